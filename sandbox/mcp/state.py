"""The state of one ``sandbox mcp`` server, shared by its tool groups: :class:`WorkspaceState`.

A server works on one project and, once a tool opened or started one, one run. Its tool groups
(:mod:`~sandbox.mcp.runs`, :mod:`~sandbox.mcp.files`, :mod:`~sandbox.mcp.find`,
:mod:`~sandbox.mcp.commands`, :mod:`~sandbox.mcp.review`) are mixins of this class, composed into
:class:`sandbox.mcp.workspace.Workspace`; what every group needs lives here: the open run, the lock
that serializes the tools, the calls in flight, the ledger call id of a request, and the refusals
common to the recording tools (a pinned run, a server inside a sandbox, an input the user denied).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sandbox.confine import spawn
from sandbox.errors import SandboxError
from sandbox.mcp.hosted import HostLedger
from sandbox.models import ProcessScope
from sandbox.run.ids import new_call_id
from sandbox.run.run import Run
from sandbox.store.project import Project

#: The most characters one tool answer carries (the model's context is the scarce resource).
MAX_OUTPUT_CHARS = 30_000
#: A client's own id of a tool call (``_meta.callId``) used as the ledger's call id when it has this shape.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class NoRunError(SandboxError):
    """A tool that works on a run was called before a run was opened or started."""

    exit_code = 2


class Abandoned(Exception):
    """The client went away while a call ran; the call is left as a crash leaves it."""


@dataclass
class Settings:
    """What the caller (the CLI) decided for this server; the library reads no environment."""

    #: Where new runs get their home (``data_dir`` of ``.sandbox.toml`` or the XDG default).
    data_root: str
    #: How ``run_command`` is confined, built from ``--isolate``/``--network`` and the settings.
    isolation: Callable[[str | None], spawn.Isolation] | None = None
    #: The environment of commands (the server's own, usually); ``SANDBOX_SESSION`` is added.
    command_env: Mapping[str, str] | None = None
    #: Called with a run when a tool opens or starts it (the CLI starts the run's service).
    on_open: Callable[[Run], None] | None = None
    #: The boot id of this machine, recorded with the process scope (None: unknown).
    boot_id: str | None = None
    #: The server runs inside one of our sandboxes (an agent's under ``sandbox run``), where the
    #: run's ledger is read-only: its calls are recorded by the repository's host
    #: (:mod:`sandbox.mcp.hosted`), and its commands run in the sandbox it is already in.
    through_host: bool = False


@dataclass
class InFlight:
    """A command call running now (see :mod:`sandbox.mcp.commands`)."""

    call_id: str
    started: float = field(default_factory=time.monotonic)
    #: The client cancelled the request: stop the command, record the call failed.
    cancelled: threading.Event = field(default_factory=threading.Event)


class WorkspaceState:
    """The state of one MCP server: its project, the run it works on, the calls in flight.

    Tool methods are serialized (one ``threading.Lock``): a run's recorder, pygit2 objects and
    the worktree are used by one call at a time, as the agents' own tools use them.
    """

    def __init__(self, project: Project, user_workdir: str | None, settings: Settings) -> None:
        import secrets

        self.project = project
        self.user_workdir = user_workdir
        self.settings = settings
        self.run: Run | None = None
        self.lock = threading.Lock()
        #: Set when the client went away: running commands are stopped and left unfinished.
        self.disconnected = threading.Event()
        self.in_flight: dict[str, InFlight] = {}
        #: Calls a command of which was stopped because the client went away (left unfinished).
        self.abandoned: list[str] = []
        self.scope = ProcessScope(
            token=secrets.token_hex(16),
            supervisor_pid=os.getpid(),
            supervisor_start=_start_time(os.getpid()),
            boot_id=settings.boot_id,
        )
        self._instance = secrets.token_hex(3)
        #: Set by :meth:`pin`: the one run this server works on (``sandbox mcp --run`` / ``--new``).
        self.pinned: str | None = None
        #: The run's host, which records the calls when :attr:`Settings.through_host` (else None).
        self.hosted: HostLedger | None = None

    def call_id_for(self, request_id: str | int | None, client_call: str | None = None) -> str:
        """A ledger call id for an MCP request: the client's own id of the tool call when it gives
        one in ``_meta`` (Codex: the model's ``call_id``, so the ledger maps onto its conversation
        as Claude Code's tool-use ids do) and the run has no call of that id yet; else
        ``mcp-<server>-<request id>`` (request ids repeat across sessions, so the server's own
        token keeps them unique), or a new id."""
        if client_call is not None and _CLIENT_ID.match(client_call):
            run = self.run
            if run is not None and client_call not in run.state().calls:
                return client_call
        if request_id is None:
            return new_call_id()
        text = re.sub(r"[^A-Za-z0-9_.-]", "_", str(request_id))[:64]
        return f"mcp-{self._instance}-{text}"

    def require_run(self) -> Run:
        """The run the tools work on; :class:`NoRunError` before one is open."""
        if self.run is None:
            raise NoRunError("No run is open yet; call start_run (or open_run with a run id from list_runs) first.")
        return self.run

    def pin(self) -> None:
        """Keep this server on the run it has open: ``open_run`` of another run and ``start_run``
        are refused from now on (the user chose the run; the model may not move to another
        agent's run and write there)."""
        self.pinned = self.require_run().run_id

    def record_through_host(self) -> None:
        """From now on the open run's calls are recorded by the repository's host: this process
        cannot write the run's ledger (it sees a read-only view of it, as inside a sandbox)."""
        run = self.require_run()
        self.settings.through_host = True
        self.hosted = HostLedger(run.project.common_dir, run.run_id, run.dir, run.worktree)

    def refuse_if_hosted(self, tool: str, instead: str) -> None:
        """Refuse (one line) a tool that writes the run's ledger other than by recording a call,
        in a server inside a sandbox: there only the host writes the ledger, and only calls."""
        if self.hosted is not None:
            raise SandboxError(
                f"{tool} is not available to an MCP server inside the sandbox of 'sandbox run', where the run's "
                f"ledger is read-only; the user runs '{instead}' on their command line."
            )

    def resolve_own(self, run_id: str) -> str:
        """The id of the run ``run_id`` names (its id, label or a prefix); a server pinned to a run refuses
        every other one, and one that names none, alike (its model learns nothing of other runs' names)."""
        from sandbox.run.names import resolve_run

        try:
            rid = resolve_run(self.project, run_id)
        except SandboxError:
            self.refuse_if_pinned(None)
            raise
        self.refuse_if_pinned(rid)
        return rid

    def refuse_if_pinned(self, wanted: str | None) -> None:
        """Refuse to move to run ``wanted`` (None: a new run) when the server is pinned to another."""
        if self.pinned is not None and wanted != self.pinned:
            raise SandboxError(
                f"This server works on run {self.pinned} only (it was started with --run or --new); "
                "ask the user to start 'sandbox mcp' without them to choose runs."
            )

    @staticmethod
    def refuse_if_denied(
        run: Run, tool: str, spec: object, call_id: str, agent_session: str | None, summary: str
    ) -> None:
        """Refuse (recorded as a ``not_run`` call) a tool whose same input the user denied, or that a
        ``resume --continue`` blocked because its outcome is unknown, until ``sandbox approve``."""
        from sandbox.run import approvals

        denial = approvals.is_denied(run, tool, spec)
        if denial is None:
            return
        why = f": {denial.reason}" if denial.reason else ""
        reason = (
            f"The user denied this {tool} call in the sandbox (same tool and input as call {denial.call_id}){why}. "
            "Do not ask for it again."
        )
        run.refuse_call(tool, spec, reason, call_id=call_id, summary=summary, agent_session=agent_session)
        raise SandboxError(reason)


def _start_time(pid: int) -> int | None:
    from sandbox.agent import procs

    return procs.start_time(pid)


def kill(proc: subprocess.Popen[bytes], box: spawn.Confined | None) -> None:
    """Kill a process the server started and everything it started (bubblewrap's PID namespace, or its
    session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if box is not None:
            proc.kill()  # the namespace's init dies with bubblewrap, and every process in it
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
