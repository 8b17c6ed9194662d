"""What the ``sandbox mcp`` tools do, without the protocol: one :class:`Workspace` per server.

The Model Context Protocol glue (:mod:`sandbox.mcp.server`) only turns these methods into tools;
everything a tool does to a run happens here, through the library, so it can be tested and
benchmarked without the SDK.

Recording (one ledger call per tool call that can change anything):

* ``write_file`` and ``edit_file`` are one ``write_file`` / ``edit_file`` call each, written with the
  recorder's confined write helper (``started`` durable before the file is touched, the finish
  costs O(1 path));
* ``run_command`` is one ``run_command`` call, its command confined exactly as ``sandbox exec``
  confines one (:mod:`sandbox.agent.confine`), its changes learnt from the repository's host when one
  is up, else from a scan; a non-zero exit, a timeout or a refused sandbox is ``failed`` with the
  reason;
* reading tools (``read_file``, ``list_files``, ``search``, ``show_log``, ``show_diff``,
  ``list_runs``) change nothing and are not recorded: a ledger call per read would grow the ledger
  with the model's browsing and cost a durable append (several fsyncs) on every look;
* ``start_run`` makes a run (its own ``run_started`` event), ``checkpoint`` writes a checkpoint,
  ``resume_report`` runs the conservative resume (its fence and ``uncertain`` marks are its events).

Inside the sandbox of ``sandbox run`` (an agent's server, Codex's), where the run's ledger is
read-only, the same calls are recorded by the repository's host instead (:mod:`sandbox.mcp.hosted`),
and commands run in that sandbox.

Nothing here applies, undoes or drops: those act on the user's tree or throw work away, and stay
with the user's CLI.

A call whose client went away while it ran (the stdio pipe closed) is abandoned as a crash
abandons it: the command is stopped and nothing is recorded after ``started``, so ``sandbox
resume`` reports the call ``uncertain``; every command runs with the server's process-session
token, so a resume after the server itself was killed finds (and waits for, or stops) what it left.
A request the client cancels is different: the client is still there, so the command is killed and
the call is recorded ``failed`` with what it changed until then.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox.agent import confine, sandboxpolicy
from sandbox.errors import PathRefusedError, SandboxError, UsageError
from sandbox.mcp.hosted import HostLedger, Recorded
from sandbox.models import CallStatus, ProcessScope
from sandbox.run.ids import new_call_id
from sandbox.run.run import Run
from sandbox.store import beneath, paths
from sandbox.store.project import Project

#: Bounds on what one tool answer carries (the model's context is the scarce resource).
MAX_OUTPUT_CHARS = 30_000
MAX_READ_LINES = 2_000
MAX_LINE_CHARS = 2_000
MAX_LIST = 1_000
MAX_SEARCH = 200
MAX_TIMEOUT = 3_600.0
#: The largest file ``read_file`` and ``edit_file`` read, and ``search`` looks into (bytes).
MAX_READ_BYTES = 10 * 1024 * 1024
#: A client's own id of a tool call (``_meta.callId``) used as the ledger's call id when it has this shape.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: How often a running command looks whether its client went away.
_POLL = 0.05

INSTRUCTIONS = """\
Every tool here works inside a sandbox run: an isolated copy (worktree) of the user's repository.
Nothing you do reaches the user's files: each change is recorded in the run's ledger as one call,
and the user reviews it (sandbox diff) and brings it into their tree (sandbox apply) themselves.

Start with start_run (or open_run with a run id you were given; list_runs shows them) unless the
server was started with a run. Then use read_file, write_file, edit_file, list_files and search for
files, and run_command for shell commands (confined to the worktree, no network unless the user
allowed it). Paths are relative to the worktree (absolute paths inside it are accepted too).
show_diff and show_log show what the run has done so far; checkpoint saves your progress; after an
interruption, resume_report says which calls are uncertain and must not be repeated blindly.

You cannot apply, undo or drop a run from here: those act on the user's own tree or discard work,
so they stay with the user ('sandbox apply', 'sandbox undo', 'sandbox drop' on their command line).
When you are done, tell the user the run id and suggest they review it with 'sandbox diff RUN'.
"""


class NoRunError(SandboxError):
    """A tool that works on a run was called before a run was opened or started."""

    exit_code = 2


@dataclass
class Settings:
    """What the caller (the CLI) decided for this server; the library reads no environment."""

    #: Where new runs get their home (``data_dir`` of ``.sandbox.toml`` or the XDG default).
    data_root: str
    #: How ``run_command`` is confined, built from ``--isolate``/``--network`` and the settings.
    isolation: Callable[[str | None], confine.Isolation] | None = None
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
class CommandResult:
    """What ``run_command`` answers: the recorded call, the exit code and the (bounded) output."""

    call_id: str
    status: str
    exit_code: int | None
    output: str
    output_truncated: bool
    files_changed: list[str]
    timed_out: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The answer as a JSON object."""
        return {
            "call_id": self.call_id,
            "status": self.status,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "files_changed": self.files_changed,
            "output": self.output,
            "output_truncated": self.output_truncated,
            **({"error": self.error} if self.error else {}),
        }


class Abandoned(Exception):
    """The client went away while a call ran; the call is left as a crash leaves it."""


@dataclass
class _InFlight:
    call_id: str
    started: float = field(default_factory=time.monotonic)
    #: The client cancelled the request: stop the command, record the call failed.
    cancelled: threading.Event = field(default_factory=threading.Event)


class Workspace:
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
        self.in_flight: dict[str, _InFlight] = {}
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

    # -- runs ----------------------------------------------------------------------------------

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

    def _refuse_if_pinned(self, wanted: str | None) -> None:
        if self.pinned is not None and wanted != self.pinned:
            raise SandboxError(
                f"This server works on run {self.pinned} only (it was started with --run or --new); "
                "ask the user to start 'sandbox mcp' without them to choose runs."
            )

    def open_run(self, run_id: str) -> dict[str, Any]:
        """Work on an existing run (any unique prefix of its id)."""
        with self.lock:
            from sandbox.run.names import resolve_run

            rid = resolve_run(self.project, run_id)
            self._refuse_if_pinned(rid)
            run = Run.open(self.project, rid)
            run.load()
            return self._opened(run, created=False)

    def start_run(self, label: str | None = None) -> dict[str, Any]:
        """Snapshot the user's working tree into a new run and work on it."""
        with self.lock:
            self._refuse_if_pinned(None)
            if self.user_workdir is None:
                raise SandboxError(
                    "This server was started inside a run's worktree; start it from your repository to make new runs."
                )
            run = Run.start(self.project, self.user_workdir, label=label)
            return self._opened(run, created=True)

    def _opened(self, run: Run, created: bool) -> dict[str, Any]:
        self.run = run
        if self.settings.through_host:
            self.hosted = HostLedger(run.project.common_dir, run.run_id, run.dir, run.worktree)
        if self.settings.on_open is not None:
            self.settings.on_open(run)
        info = run.info
        return {
            "run_id": run.run_id,
            "worktree": run.worktree,
            "label": info.label,
            "created": created,
            "calls": len(run.entries()),
        }

    def list_runs(self) -> list[dict[str, Any]]:
        """The repository's runs: id, label, calls, changed paths, whether it is the open one."""
        from sandbox.run.summary import summarize_runs

        with self.lock:
            rows = summarize_runs(self.project, disk=False)
        current = self.run.run_id if self.run is not None else None
        keep = ("run", "label", "created_at", "calls", "changed_paths", "worktree", "error")
        return [{**{k: r.get(k) for k in keep if k in r}, "open": r["run"] == current} for r in rows]

    # -- paths ---------------------------------------------------------------------------------

    def _rel(self, run: Run, path: str) -> str:
        """``path`` as the CLI confines it (:func:`sandbox.store.paths.from_user`), relative."""
        if any(part.lower() == ".git" for part in path.replace("\\", "/").split("/")):
            raise PathRefusedError(f"The path {path!r} is inside .git; the sandbox's tools never read or write there.")
        return paths.from_user(run.worktree, path)

    def _open(self, run: Run, path: str, flags: int, allow_root: bool = False) -> tuple[str, int]:
        """(relative, descriptor) of a path to read, opened beneath the worktree (:mod:`sandbox.store.beneath`):
        the kernel refuses a symlink that leads out at any component, even one a command of the
        model's made a moment ago; where it landed inside is checked for ``.git``."""
        if allow_root and (path.strip() in ("", ".", "./") or self._is_root(run, path)):
            rel = ""
        else:
            rel = self._rel(run, path)
        root = _open_worktree(run)
        try:
            try:
                fd = beneath.open_beneath(root, rel, flags | os.O_NONBLOCK)  # a FIFO must not block us
            except beneath.EscapeError:
                raise PathRefusedError(
                    f"The path {path!r} leads out of the worktree through a symlink; it is refused."
                ) from None
            except FileNotFoundError:
                raise SandboxError(f"{rel} does not exist in the worktree; list_files shows what does.") from None
            except NotADirectoryError:
                raise SandboxError(f"{rel or '.'} is not a directory of the worktree.") from None
            except OSError as exc:
                raise SandboxError(f"Cannot open {rel or '.'}: {exc.strerror or exc}.") from None
            inside = beneath.relative(root, fd)
            if inside is None or any(p.lower() == ".git" for p in inside.split("/")):
                os.close(fd)
                raise PathRefusedError(f"The path {path!r} leads into .git through a symlink; it is refused.")
            return inside, fd
        finally:
            os.close(root)

    @staticmethod
    def _is_root(run: Run, path: str) -> bool:
        return os.path.isabs(path) and os.path.realpath(path) == os.path.realpath(run.worktree)

    def _write(self, run: Run, call: Any, rel: str, data: bytes) -> None:
        """Write ``rel`` through a descriptor of its parent opened beneath the worktree (missing
        directories made one at a time, no symlink followed): temporary file and rename there."""
        root = _open_worktree(run)
        try:
            try:
                dirfd, name = beneath.open_parent(root, rel, create=True)
            except beneath.EscapeError:
                raise PathRefusedError(
                    f"The path {rel!r} goes through a symlink; the sandbox never writes through a symlinked directory."
                ) from None
            except NotADirectoryError:
                raise PathRefusedError(
                    f"Cannot write {rel!r}: a parent path is a file, not a directory; delete it first."
                ) from None
        finally:
            os.close(root)
        try:
            mode = 0o644
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise PathRefusedError(f"Cannot write {rel!r}: it is a directory.")
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                    mode = 0o755
            except FileNotFoundError:
                pass
            if call is not None:
                call.note_paths([rel])
            try:
                beneath.write_at(dirfd, name, data, mode)
            except OSError as exc:
                raise PathRefusedError(f"Cannot write {rel!r} in the worktree: {exc.strerror or exc}.") from None
        finally:
            os.close(dirfd)

    @staticmethod
    def _refuse_if_denied(
        run: Run, tool: str, spec: Any, call_id: str, agent_session: str | None, summary: str
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

    # -- files ---------------------------------------------------------------------------------

    def read_file(self, path: str, offset: int = 1, limit: int | None = None) -> str:
        """Lines ``offset``.. (1-based, at most ``limit``) of a text file, numbered like ``cat -n``."""
        run = self.require_run()
        if offset < 1:
            raise UsageError("offset is the first line to read, counted from 1.")
        limit = MAX_READ_LINES if limit is None else limit
        if limit < 1:
            raise UsageError("limit is the number of lines to read; give at least 1.")
        rel, fd = self._open(run, path, os.O_RDONLY)
        data = _read_fd(rel, fd)
        if b"\0" in data[:8192]:
            return f"{rel} is a binary file ({len(data)} bytes); it is not shown."
        lines = data.decode("utf-8", errors="replace").splitlines()
        if not lines:
            return f"{rel} is empty."
        if offset > len(lines):
            raise UsageError(f"{rel} has {len(lines)} lines; offset {offset} is past its end.")
        end = min(len(lines), offset - 1 + min(limit, MAX_READ_LINES))
        out = []
        for number in range(offset, end + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} more characters]"
            out.append(f"{number:>6}\t{line}")
        if end < len(lines):
            out.append(f"[{len(lines) - end} more lines: read with offset={end + 1}]")
        return "\n".join(out)

    def write_file(
        self,
        path: str,
        content: str,
        request_id: str | int | None = None,
        client_call: str | None = None,
        agent_session: str | None = None,
    ) -> dict[str, Any]:
        """Write ``content`` to ``path`` (created with its directories) as one recorded call.

        ``client_call``, ``agent_session``: the client's id of the tool call and its session (from
        the request's ``_meta``), recorded with the call.
        """
        with self.lock:
            run = self.require_run()
            rel = self._rel(run, path)
            paths.check_parents(run.worktree, rel)  # refused before anything is recorded
            data = content.encode("utf-8")
            spec = {"path": rel, "bytes": len(data)}
            call_id = self.call_id_for(request_id, client_call)
            if self.hosted is not None:
                done = self._write_through_host(
                    self.hosted, run, "write_file", spec, rel, data, call_id, agent_session, ("idempotent", "auto")
                )
                return {"call_id": done.call_id, "path": rel, "bytes": len(data), "changed": bool(done.files)}
            self._refuse_if_denied(run, "write_file", spec, call_id, agent_session, f"write {rel}")
            with run.tool_call(
                "write_file",
                spec,
                call_id=call_id,
                idempotency="idempotent",
                replay="auto",
                summary=f"write {rel}",
                agent_session=agent_session,
            ) as call:
                self._write(run, call, rel, data)
            assert call.entry is not None
            return {
                "call_id": call.entry.call_id,
                "path": rel,
                "bytes": len(data),
                "changed": bool(call.entry.files),
            }

    def edit_file(
        self,
        path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
        request_id: str | int | None = None,
        client_call: str | None = None,
        agent_session: str | None = None,
    ) -> dict[str, Any]:
        """Replace ``old_string`` by ``new_string`` in ``path`` as one recorded call.

        The agents' Edit semantics: ``old_string`` must occur exactly once unless ``replace_all``,
        must differ from ``new_string``, and the file must exist. Nothing is recorded when the
        edit is refused (it changes nothing).
        """
        with self.lock:
            run = self.require_run()
            if old_string == "":
                raise UsageError("old_string is empty; to create or overwrite a whole file use write_file.")
            if old_string == new_string:
                raise UsageError("old_string and new_string are the same; the edit would change nothing.")
            rel, fd = self._open(run, path, os.O_RDONLY)
            text = _read_fd(rel, fd).decode("utf-8", errors="surrogateescape")
            count = text.count(old_string)
            if count == 0:
                raise SandboxError(
                    f"old_string was not found in {rel}; read the file and copy the text exactly "
                    "(whitespace and indentation included)."
                )
            if count > 1 and not replace_all:
                raise SandboxError(
                    f"old_string occurs {count} times in {rel}; give more surrounding text to make it unique, "
                    "or set replace_all to replace every occurrence."
                )
            updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
            spec = {"path": rel, "old_string": old_string, "new_string": new_string, "replace_all": replace_all}
            call_id = self.call_id_for(request_id, client_call)
            replaced = count if replace_all else 1
            if self.hosted is not None:
                new = updated.encode("utf-8", errors="surrogateescape")
                self._write_through_host(
                    self.hosted, run, "edit_file", spec, rel, new, call_id, agent_session, ("conditional", "ask")
                )
                return {"call_id": call_id, "path": rel, "replacements": replaced}
            self._refuse_if_denied(run, "edit_file", spec, call_id, agent_session, f"edit {rel}")
            with run.tool_call(
                "edit_file",
                spec,
                call_id=call_id,
                idempotency="conditional",
                replay="ask",
                summary=f"edit {rel}",
                agent_session=agent_session,
            ) as call:
                self._write(run, call, rel, updated.encode("utf-8", errors="surrogateescape"))
            assert call.entry is not None
            return {"call_id": call.entry.call_id, "path": rel, "replacements": replaced}

    def _write_through_host(
        self,
        hosted: HostLedger,
        run: Run,
        tool: str,
        spec: dict[str, Any],
        rel: str,
        data: bytes,
        call_id: str,
        agent_session: str | None,
        policy: tuple[str, str],
    ) -> Recorded:
        """Write ``rel`` as one call the host records: started before the file is touched (a denied
        input is refused there), finished with exactly that path (failed with the reason when the
        write was refused)."""
        verb = "write" if tool == "write_file" else "edit"
        hosted.start(
            tool,
            spec,
            call_id=call_id,
            kind="write",
            idempotency=policy[0],
            replay=policy[1],
            summary=f"{verb} {rel}",
            agent_session=agent_session,
            paths=[rel],
        )
        try:
            self._write(run, None, rel, data)
        except SandboxError as exc:
            hosted.finish(
                tool,
                spec,
                call_id=call_id,
                kind="write",
                succeeded=False,
                agent_session=agent_session,
                paths=[rel],
                error=f"{type(exc).__name__}: {exc.message}",
            )
            raise
        return hosted.finish(
            tool, spec, call_id=call_id, kind="write", succeeded=True, agent_session=agent_session, paths=[rel]
        )

    def list_files(self, path: str = ".", pattern: str | None = None) -> str:
        """The entries of a directory (``pattern`` None), or the files below it matching a glob."""
        run = self.require_run()
        rel, fd = self._open(run, path, os.O_RDONLY | os.O_DIRECTORY, allow_root=True)
        try:
            if pattern is None:
                names = []
                for name in sorted(os.listdir(fd)):
                    if name.lower() == ".git":
                        continue
                    kind = _kind_at(fd, name)
                    names.append(name + ("/" if kind == "dir" else "@" if kind == "link" else ""))
                return _bounded_list(names, f"{rel or '.'} is empty.")
            regex = glob_regex(pattern)
            found = []
            for sub in _walk_files(fd, ""):
                if regex.fullmatch(sub):
                    found.append(sub if not rel else f"{rel}/{sub}")
                    if len(found) > MAX_LIST:
                        break
            return _bounded_list(found, f"No file matches {pattern!r}.")
        finally:
            os.close(fd)

    def search(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_results: int = MAX_SEARCH,
    ) -> str:
        """Lines matching a regular expression (Python's ``re``) in the tracked, new and untracked
        files not ignored by ``.gitignore``, as ``path:line:text``; at most ``max_results`` lines.

        git finds the files that may match (``git grep -l``: the fastest way over a large worktree;
        only names come out of it), and each one is then opened beneath the worktree
        (:mod:`sandbox.store.beneath`) and read here: the lines shown come from a file inside, even
        when a command of the model's flips a directory to a symlink while git reads (git opens the
        paths it walks, and would follow it). A pattern git cannot take (PCRE and Python differ a
        little) falls back to every file ``ls-files`` lists."""
        from sandbox.store import gitcli, gitfiles

        run = self.require_run()
        rel, fd = self._open(run, path, os.O_RDONLY, allow_root=True)
        os.close(fd)
        # git grep --untracked and ls-files read every .gitignore, info/exclude and core.excludesFile:
        # one the model made a FIFO would block this (unconfined) server for ever (sandbox.store.gitfiles).
        odd = None if gitfiles.repository_plain(run.worktree) else ".git"
        odd = odd or gitfiles.tree_rules_plain(run.worktree, (".gitignore",))
        if odd is not None:
            raise UsageError(f"The search cannot read the worktree's ignore rules: {odd} is not a regular file.")
        try:
            regex = re.compile(pattern.encode("utf-8", "surrogateescape"), re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise UsageError(f"The search pattern is not a regular expression: {exc}.") from None
        limit = max(1, min(max_results, 1000))
        spec = rel or "."
        pathspecs = [f":(glob){rel + '/' if rel else ''}{glob if '/' in glob else '**/' + glob}"] if glob else [spec]
        grep = ["grep", "-l", "-z", "-I", "--untracked", "--full-name", *(["-i"] if ignore_case else [])]
        proc = gitcli.git([*grep, "-P", "-e", pattern, "--", *pathspecs], run.worktree, check=False)
        if proc.returncode == 1:
            return f"No line matches {pattern!r}."
        if proc.returncode != 0:  # a git without PCRE, or a pattern PCRE reads otherwise: every file
            listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *pathspecs]
            proc = gitcli.git(listing, run.worktree, check=False)
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"The search failed: {detail[-1] if detail else 'exit ' + str(proc.returncode)}.")
        names = sorted({os.fsdecode(n) for n in proc.stdout.split(b"\0") if n})
        lines: list[str] = []
        more = left = 0
        root = _open_worktree(run)
        try:
            for done, name in enumerate(names, 1):
                for number, text in _matching_lines(root, name, regex):
                    if len(lines) < limit:
                        line = f"{name}:{number}:{text}"
                        lines.append(line if len(line) <= 400 else line[:400] + " [...]")
                    else:
                        more += 1
                if more:  # the answer is full: the files left are not read (git found they may match)
                    left = len(names) - done
                    break
        finally:
            os.close(root)
        if not lines:
            return f"No line matches {pattern!r}."
        if more:
            where = f", and maybe in {left} more files" if left else ""
            lines.append(f"[{more} more matching lines{where}; narrow the pattern, path or glob]")
        return "\n".join(lines)

    # -- commands ------------------------------------------------------------------------------

    def run_command(
        self,
        command: str,
        timeout: float = 120.0,
        idempotency: str = "conditional",
        replay: str = "ask",
        request_id: str | int | None = None,
        call_id: str | None = None,
        agent_session: str | None = None,
    ) -> CommandResult:
        """Run ``command`` with ``/bin/sh -c`` in the worktree as one recorded call.

        Confined as ``sandbox exec`` confines a command (refused before anything is recorded when
        the confinement cannot be had). The output (stdout and stderr together) is kept in a
        temporary file and answered bounded: its head and its tail. ``timeout`` seconds: then the
        command is killed and the call is ``failed`` ("timed out"). Raises :class:`Abandoned` when
        the client went away meanwhile (the call stays ``started``).
        """
        if not command.strip():
            raise UsageError("The command is empty; give a shell command to run in the worktree.")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise UsageError(f"timeout must be between 0 and {MAX_TIMEOUT:.0f} seconds.")
        call_id = call_id or self.call_id_for(request_id)
        with self.lock:
            run = self.require_run()
            return self._run_command(run, command, timeout, idempotency, replay, call_id, agent_session)

    def cancel(self, call_id: str) -> bool:
        """The client cancelled a running call: its command is stopped and the call is recorded
        ``failed`` (the client is still there to be told; the changes made so far are recorded)."""
        flight = self.in_flight.get(call_id)
        if flight is not None:
            flight.cancelled.set()
        return flight is not None

    def _run_command(
        self,
        run: Run,
        command: str,
        timeout: float,
        idempotency: str,
        replay: str,
        call_id: str,
        agent_session: str | None = None,
    ) -> CommandResult:
        from sandbox.agent import changes
        from sandbox.agent.hosted import command_input

        if self.hosted is not None:
            return self._run_through_host(
                self.hosted, run, command, timeout, idempotency, replay, call_id, agent_session
            )
        isolation = self.settings.isolation(run.user_workdir) if self.settings.isolation else None
        confined = None
        if isolation is not None and isolation.enabled:
            confine.check(isolation)  # refused before anything is recorded
            policy = sandboxpolicy.policy_for_run(isolation, run)
            confined = (isolation, policy)
        argv = ["/bin/sh", "-c", command]
        source = changes.pick(host=(run.project.common_dir, run.run_id, run.dir))
        input_value = command_input(argv, isolation)
        self._refuse_if_denied(run, "run_command", input_value, call_id, agent_session, command[:500])
        run.start_call(
            "run_command",
            input_value,
            call_id=call_id,
            idempotency=idempotency,
            replay=replay,
            summary=command[:500],
            procs=self.scope,
            agent_session=agent_session,
        )
        flight = self.in_flight[call_id] = _InFlight(call_id)
        try:
            source.begin(call_id)
            with tempfile.TemporaryFile() as out:
                try:
                    code, timed_out = self._spawn_and_wait(argv, run.worktree, confined, out, timeout, flight)
                    refused = None
                except confine.ConfinementError as exc:
                    code, timed_out, refused = 126, False, exc
                output, truncated = _bounded_output(out)
            error = refused.message if refused is not None else _command_error(flight, code, timed_out, timeout)
            changed = source.end(call_id)
            entry = run.finish_call(
                call_id,
                CallStatus.failed if error else CallStatus.succeeded,
                paths=changed,
                result={"exit_code": None if timed_out else code, "timed_out": timed_out},
                error=error,
            )
        finally:
            self.in_flight.pop(call_id, None)
        return CommandResult(
            call_id=call_id,
            status=entry.status.value,
            exit_code=None if timed_out else code,
            output=output,
            output_truncated=truncated,
            files_changed=[f.path for f in entry.files],
            timed_out=timed_out,
            error=error,
        )

    def _run_through_host(
        self,
        hosted: HostLedger,
        run: Run,
        command: str,
        timeout: float,
        idempotency: str,
        replay: str,
        call_id: str,
        agent_session: str | None,
    ) -> CommandResult:
        """:meth:`_run_command` for a server inside a sandbox: the host records the call (its watcher's
        window between start and finish gives the paths), and the command runs right here, in the
        sandbox the server is in (no sandbox nests in another), as one of the agent session's processes."""
        from sandbox.agent.hosted import command_input

        argv = ["/bin/sh", "-c", command]
        spec = command_input(argv, None)  # confined by the sandbox around the server, not by one of its own
        hosted.start(
            "run_command",
            spec,
            call_id=call_id,
            kind="command",
            idempotency=idempotency,
            replay=replay,
            summary=command[:500],
            agent_session=agent_session,
        )
        flight = self.in_flight[call_id] = _InFlight(call_id)
        try:
            with tempfile.TemporaryFile() as out:
                code, timed_out = self._spawn_and_wait(argv, run.worktree, None, out, timeout, flight)
                output, truncated = _bounded_output(out)
            error = _command_error(flight, code, timed_out, timeout)
            done = hosted.finish(
                "run_command",
                spec,
                call_id=call_id,
                kind="command",
                succeeded=error is None,
                agent_session=agent_session,
                result={"exit_code": None if timed_out else code, "timed_out": timed_out},
                error=error,
            )
        finally:
            self.in_flight.pop(call_id, None)
        return CommandResult(
            call_id=call_id,
            status=done.status or ("failed" if error else "succeeded"),
            exit_code=None if timed_out else code,
            output=output,
            output_truncated=truncated,
            files_changed=_recorded_files(run, call_id),
            timed_out=timed_out,
            error=error,
        )

    def _spawn_and_wait(
        self,
        argv: list[str],
        cwd: str,
        confined: tuple[confine.Isolation, confine.Policy] | None,
        out: Any,
        timeout: float,
        flight: _InFlight,
    ) -> tuple[int, bool]:
        """(exit code, timed out). Polls so a client that went away stops the command at once."""
        env = dict(self.settings.command_env) if self.settings.command_env is not None else dict(os.environ)
        if self.hosted is None:  # inside a sandbox the agent session's own token stays: the host bound the call to it
            env["SANDBOX_SESSION"] = self.scope.token  # resume finds the command by it (sandbox.agent.procs)
        proc: subprocess.Popen[bytes]
        box: confine.Confined | None = None
        if confined is not None:
            box = confine.spawn(
                confined[0], confined[1], argv, cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
            proc = box.proc
        else:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            try:
                proc.wait(timeout=_POLL)
                break
            except subprocess.TimeoutExpired:
                pass
            if self.disconnected.is_set():
                _kill(proc, box)
                raise Abandoned(f"the client went away while {argv[-1][:80]!r} ran")
            if flight.cancelled.is_set():
                _kill(proc, box)
                timed_out = False
                break
            if time.monotonic() >= deadline:
                timed_out = True
                _kill(proc, box)
                break
        if box is not None:
            code = box.wait()
        else:
            code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return code, timed_out

    # -- evidence ------------------------------------------------------------------------------

    def show_log(self, call_id: str | None = None) -> str:
        """The run's calls in order (one line each, with files), or one call in full."""
        with self.lock:  # the run's repository is shared with the recording tools
            return self._log_text(self.require_run(), call_id)

    def _log_text(self, run: Run, call_id: str | None) -> str:
        if call_id is not None:
            from sandbox.run.names import resolve_call_id

            return _call_text(run, resolve_call_id(run, call_id))
        entries = run.entries()
        if not entries:
            return f"Run {run.run_id} has no calls yet."
        out = []
        for e in entries:
            flags = (" [undone]" if e.undone else "") + (" [applied]" if e.applied else "")
            out.append(f"{e.seq:>3}  {e.call_id}  {e.status.value}  {e.tool_name}{flags}")
            if e.summary:
                out.append(f"       {e.summary[:200]}")
            if e.error:
                out.append(f"       error: {e.error.strip().splitlines()[0][:300] if e.error.strip() else e.error}")
            for f in e.files:
                kind = "A" if f.before_hash is None else "D" if f.after_hash is None else "M"
                out.append(f"       {kind} {f.path}")
        return "\n".join(out)

    def show_diff(self, call_id: str | None = None, stat_only: bool = False) -> str:
        """The run's patch against its base (or one call's), or its ``--stat`` summary; bounded."""
        from sandbox.merge.preview import diff_text, preview_range

        with self.lock:
            from sandbox.run.names import resolve_call_id

            run = self.require_run()
            call = resolve_call_id(run, call_id) if call_id is not None else None
            text = diff_text(run, preview_range(run, call), stat=stat_only, color=False)
        if not text:
            return "No changes."
        if len(text) > MAX_OUTPUT_CHARS:
            return text[:MAX_OUTPUT_CHARS] + (
                f"\n[... {len(text) - MAX_OUTPUT_CHARS} more characters; use stat_only, or call_id for one call]"
            )
        return text

    def resume_report(self) -> dict[str, Any]:
        """Resume the run conservatively and report: the note for you, what must not be replayed,
        which calls are uncertain (and what they may have changed), and the latest checkpoint's
        messages and state."""
        from sandbox.recovery.resume import resume

        with self.lock:
            run = self.require_run()
            self.refuse_if_hosted("resume_report", f"sandbox resume {run.run_id}")
            report = resume(run)
            return {
                "run_id": report.run_id,
                "note": report.note,
                "next_step": report.next_step,
                "uncertain": [u.model_dump(mode="json") for u in report.uncertain],
                "do_not_replay": report.do_not_replay,
                "may_replay": report.may_replay,
                "ask_first": report.ask_first,
                "drift": [d.model_dump(mode="json") for d in report.drift],
                "last_completed_step": report.last_completed_step,
                "checkpoint": report.checkpoint.name if report.checkpoint else None,
                "messages": report.messages,
                "state": report.run_state,
                "problems": report.problems,
            }

    def checkpoint(
        self,
        label: str | None = None,
        step_id: str | None = None,
        messages: Any = None,
        state: Any = None,
    ) -> dict[str, Any]:
        """Save a checkpoint with the messages and state the client passes."""
        with self.lock:
            run = self.require_run()
            self.refuse_if_hosted("checkpoint", f"sandbox checkpoint {run.run_id}")
            ckpt = run.checkpoint(label, step_id=step_id, messages=messages, run_state=state)
            return {"checkpoint_id": ckpt.id, "name": ckpt.name, "label": label, "step_id": step_id}

    # -- shutdown ------------------------------------------------------------------------------

    def abandon_all(self, wait: float = 5.0) -> list[str]:
        """The client went away: stop running commands, leave their calls unfinished; their ids."""
        self.disconnected.set()
        pending = list(self.in_flight)
        deadline = time.monotonic() + wait
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(_POLL)
        return pending


# -- helpers -----------------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression over ``/``-separated relative paths.

    ``*`` and ``?`` stay within a name, ``**`` crosses directories, ``[...]`` is a class; a
    pattern without ``/`` matches a file name at any depth (``*.py`` is ``**/*.py``).
    """
    if "/" not in pattern and "**" not in pattern:
        pattern = "**/" + pattern
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def _open_worktree(run: Run) -> int:
    try:
        return beneath.open_root(run.worktree)
    except OSError:
        raise SandboxError(
            f"The run's worktree {run.worktree} cannot be opened (was the run dropped?); open another run."
        ) from None


def _read_fd(rel: str, fd: int) -> bytes:
    """The bytes of the file open on ``fd`` (closed here): a regular file of at most
    :data:`MAX_READ_BYTES`, else one line saying why not."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SandboxError(f"{rel} is a directory; use list_files to see what is in it.")
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"{rel} is not a regular file.")
        if st.st_size > MAX_READ_BYTES:
            raise SandboxError(
                f"{rel} is {st.st_size} bytes, more than the {MAX_READ_BYTES} read_file reads; "
                "search it, or look at parts of it with run_command (head, sed -n)."
            )
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_READ_BYTES + 1)
    except OSError as exc:
        raise SandboxError(f"Cannot read {rel}: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    if len(data) > MAX_READ_BYTES:  # it grew while we read
        raise SandboxError(f"{rel} is more than the {MAX_READ_BYTES} bytes read_file reads.")
    return data


def _matching_lines(root: int, name: str, regex: re.Pattern[bytes]) -> list[tuple[int, str]]:
    """(line number, text) of the lines of ``name`` (beneath ``root``) that ``regex`` finds; none
    for what is not a regular text file of at most :data:`MAX_READ_BYTES` (``git grep -I``), a
    symlink, a path that leads out, or into ``.git``."""
    try:
        fd = beneath.open_beneath(root, name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return []  # gone, a symlink (git grep reads none either), or leading out: nothing to show
    try:
        inside = beneath.relative(root, fd)
        st = os.fstat(fd)
        if inside is None or ".git" in inside.lower().split("/") or not stat.S_ISREG(st.st_mode):
            return []
        if st.st_size > MAX_READ_BYTES:
            return []
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_READ_BYTES)
    except OSError:
        return []
    finally:
        os.close(fd)
    if b"\0" in data[:8000]:
        return []
    out = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if regex.search(line):
            out.append((number, line.rstrip(b"\r").decode("utf-8", errors="replace")))
    if out and data.endswith(b"\n") and out[-1][0] > data.count(b"\n"):
        out.pop()  # the empty "line" after the last newline
    return out


def _kind_at(dirfd: int, name: str) -> str:
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return "file"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def _walk_files(dirfd: int, base: str) -> Iterator[str]:
    """Every file below the directory ``dirfd`` (not ``.git``), as ``/``-separated paths, a
    directory's files before its subdirectories, by name; each subdirectory opened with
    ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent (a symlink or FIFO swapped in is skipped)."""
    try:
        with os.scandir(dirfd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        if entry.name.lower() == ".git":
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            subdirs.append(entry.name)
        else:
            yield entry.name if not base else f"{base}/{entry.name}"
    for name in subdirs:
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            continue
        try:
            yield from _walk_files(sub, name if not base else f"{base}/{name}")
        finally:
            os.close(sub)


def _bounded_list(items: list[str], empty: str) -> str:
    if not items:
        return empty
    if len(items) > MAX_LIST:
        return "\n".join(items[:MAX_LIST]) + f"\n[more than {MAX_LIST} entries; narrow the path or the pattern]"
    return "\n".join(items)


def _bounded_output(fh: Any) -> tuple[str, bool]:
    """The command's output: whole when short, else its head and its tail (the end matters most)."""
    size = fh.seek(0, os.SEEK_END)
    if size <= MAX_OUTPUT_CHARS:
        fh.seek(0)
        return fh.read().decode("utf-8", errors="replace"), False
    head_len, tail_len = MAX_OUTPUT_CHARS // 4, MAX_OUTPUT_CHARS - MAX_OUTPUT_CHARS // 4
    fh.seek(0)
    head = fh.read(head_len).decode("utf-8", errors="replace")
    fh.seek(size - tail_len)
    tail = fh.read(tail_len).decode("utf-8", errors="replace")
    return f"{head}\n[... {size - head_len - tail_len} bytes of output left out ...]\n{tail}", True


def _command_error(flight: _InFlight, code: int, timed_out: bool, timeout: float) -> str | None:
    """Why a command's call failed (None: it succeeded)."""
    if flight.cancelled.is_set():
        return "cancelled by the client; the command was killed"
    if timed_out:
        return f"timed out after {timeout:g} s; the command was killed"
    return f"exit code {code}" if code != 0 else None


def _recorded_files(run: Run, call_id: str) -> list[str]:
    """The files the host recorded for a call, read from the ledger (read-only inside a sandbox)."""
    try:
        entry = run.state().calls.get(call_id)
    except (SandboxError, OSError):
        return []
    return [f.path for f in entry.files] if entry is not None else []


def _kill(proc: subprocess.Popen[bytes], box: confine.Confined | None) -> None:
    """Kill a command and everything it started (bubblewrap's PID namespace, or its session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if box is not None:
            proc.kill()  # the namespace's init dies with bubblewrap, and every process in it
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _start_time(pid: int) -> int | None:
    from sandbox.agent import procs

    return procs.start_time(pid)


def _call_text(run: Run, call_id: str) -> str:
    import json

    entry = run.entry(call_id)
    lines = [
        f"call:    {entry.call_id} (#{entry.seq})",
        f"tool:    {entry.tool_name}",
        f"status:  {entry.status.value}",
    ]
    if entry.summary:
        lines.append(f"summary: {entry.summary}")
    if entry.input is not None:
        lines.append("input:   " + json.dumps(entry.input, ensure_ascii=False)[:2000])
    if entry.result is not None:
        lines.append("result:  " + json.dumps(entry.result, ensure_ascii=False)[:2000])
    if entry.commit:
        lines.append(f"commit:  {entry.commit}")
    lines.extend(f"file:    {f.path}" for f in entry.files)
    error = run.error_text(entry)
    if error:
        lines.append("error:")
        lines.extend(f"  {line}" for line in error.splitlines() or [error])
    return "\n".join(lines)
