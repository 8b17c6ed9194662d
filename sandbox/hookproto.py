"""The generic hook protocol: one JSON object on stdin becomes a call start or a call finish.

Agents with hooks (Claude Code, Gemini CLI, an in-house loop) run ``sandbox hook <agent>`` before
and after each tool call. An adapter (:mod:`sandbox.adapters`) turns the agent's payload into a
:class:`HookEvent`; ``sandbox hook generic`` reads a :class:`HookEvent` directly (documented in
``hooks/README.md``). The event is then recorded:

* by the process hosting the run (``sandbox run``, or the background ``sandbox serve`` of
  :mod:`sandbox.service`), over a Unix socket in the run's directory (fast: the hook process
  imports neither pygit2 nor pydantic), or
* in the hook process itself when no such process is live (correct, slower start-up); it then
  spawns ``sandbox serve`` for the next events (see :func:`handle`).

``start`` is durable before the hook returns, so before the tool runs. ``finish`` commits the
call's file changes: exactly the named paths for a file-writing call (O(1)), the session
watcher's paths for a command, nothing for a read-only or external call, a scan when unknown.

This module imports only the standard library at module level: it is on the hook's fast path.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import socket
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from sandbox import layout
from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox.config import Config
    from sandbox.run import Run

MAX_PAYLOAD = 8 * 1024 * 1024
MAX_RESULT = 64 * 1024
SOCKET_NAME = "hook.sock"
PHASES = ("start", "finish")
KINDS = ("write", "command", "read", "external", "unknown")
#: Default (idempotency, replay) per kind of call.
POLICY = {
    "write": ("conditional", "ask"),
    "command": ("conditional", "ask"),
    "read": ("idempotent", "auto"),
    "external": ("non_idempotent", "never"),
    "unknown": ("conditional", "ask"),
}


class HookInputError(SandboxError):
    """The hook payload is malformed, oversized, or names something outside the run."""

    exit_code = 1


@dataclass
class HookEvent:
    """One side of one tool call, in the agent-neutral form (the generic protocol's JSON)."""

    phase: str
    cwd: str
    tool: str
    call_id: str | None = None
    input: Any = None
    kind: str = "unknown"
    paths: list[str] = field(default_factory=list)
    status: str = "succeeded"
    error: str | None = None
    result: Any = None
    idempotency: str | None = None
    replay: str | None = None
    #: finish without a call id: pair with the oldest started call of the same tool and input
    #: whose id starts with this prefix (for agents whose hooks carry no call id).
    pair_prefix: str | None = None
    agent: str = "generic"

    @classmethod
    def from_dict(cls, data: Any) -> HookEvent:
        """Validate a decoded generic-protocol object; :class:`HookInputError` when malformed."""
        if not isinstance(data, dict):
            raise HookInputError("The hook payload must be a JSON object.")
        phase = data.get("event", data.get("phase"))
        if phase not in PHASES:
            raise HookInputError("The hook payload's 'event' must be 'start' or 'finish'.")
        for key in ("cwd", "tool"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise HookInputError(f"The hook payload has no '{key}' string.")
        call_id = data.get("call_id")
        if call_id is not None and not isinstance(call_id, str):
            raise HookInputError("The hook payload's 'call_id' must be a string.")
        kind = data.get("kind", "unknown")
        if kind not in KINDS:
            raise HookInputError(f"The hook payload's 'kind' must be one of {', '.join(KINDS)}.")
        raw_paths = data.get("paths", [])
        if not isinstance(raw_paths, list) or not all(isinstance(p, str) for p in raw_paths):
            raise HookInputError("The hook payload's 'paths' must be a list of strings.")
        status = data.get("status", "succeeded")
        if status not in ("succeeded", "failed"):
            raise HookInputError("The hook payload's 'status' must be 'succeeded' or 'failed'.")
        if phase == "finish" and not call_id and not data.get("pair_prefix"):
            raise HookInputError("A finish event needs a 'call_id'.")
        error = data.get("error")
        return cls(
            phase=phase,
            cwd=data["cwd"],
            tool=data["tool"],
            call_id=call_id or None,
            input=data.get("input"),
            kind=kind,
            paths=list(raw_paths),
            status=status,
            error=None if error is None else str(error)[:2000],
            result=data.get("result"),
            idempotency=data.get("idempotency"),
            replay=data.get("replay"),
            pair_prefix=data.get("pair_prefix"),
            agent=str(data.get("agent", "generic")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The generic-protocol object for this event."""
        out = asdict(self)
        out["event"] = out.pop("phase")
        return out


@dataclass
class Outcome:
    """What recording a hook event did: ``ok``, a one-line ``message``, and the strict setting."""

    ok: bool
    message: str = ""
    strict: bool = False


# -- reading the payload -----------------------------------------------------------------------


def read_payload(stream: BinaryIO) -> Any:
    """Read and decode one JSON payload (at most :data:`MAX_PAYLOAD` bytes)."""
    data = stream.read(MAX_PAYLOAD + 1)
    if len(data) > MAX_PAYLOAD:
        raise HookInputError(f"The hook payload is larger than {MAX_PAYLOAD // (1024 * 1024)} MiB; nothing recorded.")
    if not data.strip():
        raise HookInputError("The hook payload is empty; expected one JSON object on stdin.")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not valid JSON"
        raise HookInputError(f"The hook payload is not valid JSON ({reason}); nothing recorded.") from None


# -- finding the run from a directory, without git libraries -----------------------------------


#: A run found from a directory (see :mod:`sandbox.layout`, which owns the layout).
Location = layout.Location


def locate(cwd: str) -> Location:
    """The run whose worktree contains ``cwd``; :class:`HookInputError` when there is none."""
    if not os.path.isdir(cwd):
        raise HookInputError(f"The hook's cwd {cwd!r} is not a directory; nothing recorded.")
    found = layout.locate(cwd)
    if found is None:
        raise HookInputError(
            f"{cwd} is not inside a sandbox run's worktree; start the agent with 'sandbox run -- AGENT' "
            "(nothing recorded)."
        )
    return found


# -- talking to the process hosting the run ----------------------------------------------------


def socket_path(run_dir: str) -> str:
    """The Unix socket on which ``sandbox run`` accepts hook events for the run."""
    return os.path.join(run_dir, SOCKET_NAME)


def _connect(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        if len(os.fsencode(path)) < 100:
            sock.connect(path)
        else:
            # sun_path holds ~100 bytes; a deep repository path needs a relative name. The hook
            # process is single-threaded and short-lived, so changing its directory is harmless.
            here = os.getcwd()
            os.chdir(os.path.dirname(path))
            try:
                sock.connect(os.path.basename(path))
            finally:
                os.chdir(here)
    except OSError:
        sock.close()
        raise
    return sock


def forward(loc: Location, event: HookEvent, timeout: float = 120.0) -> Outcome | None:
    """Send the event to the ``sandbox run`` process hosting the run; None when none is live."""
    path = socket_path(loc.run_dir)
    if not os.path.exists(path):
        return None
    try:
        sock = _connect(path, timeout)
    except OSError:
        return None  # a stale socket from a session that ended: record in this process
    try:
        sock.sendall(json.dumps(event.to_dict()).encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        sock.close()
    try:
        reply = json.loads(b"".join(chunks))
        return Outcome(bool(reply["ok"]), str(reply.get("message", "")), bool(reply.get("strict", False)))
    except (ValueError, KeyError, TypeError):
        return None  # the host died mid-request: recording again here is idempotent


def handle(event: HookEvent, autostart: Callable[[Location], None] | None = None) -> Outcome:
    """Record one hook event: through the process hosting the run when live, else in-process.

    In-process, ``autostart(loc)`` is called first to spawn a host (``sandbox serve``) for the
    next events, unless the user's settings say ``hooks.autostart = false``, some process already
    hosts the run (it may be starting), or a hook spawned one moments ago. It must not wait for
    the host; whatever it raises is ignored: this event is recorded here either way.
    """
    loc = locate(event.cwd)
    outcome = forward(loc, event)
    if outcome is not None:
        return outcome
    if not os.access(loc.run_dir, os.W_OK):
        # Inside an OS sandbox (sandbox.confine) the run's files are read-only: only the host
        # outside can record. Block the tool (strict) rather than let it run unrecorded.
        return Outcome(
            False,
            f"the run's host is not reachable from inside the sandbox, so this {event.tool} call cannot be "
            f"recorded and is blocked; restart the agent with 'sandbox run {loc.run_id} -- AGENT'.",
            strict=True,
        )
    from sandbox.project import Project
    from sandbox.run import Run

    run = Run.open(Project(loc.common_dir), loc.run_id)
    recorder = Recorder(run)
    if autostart is not None:
        with contextlib.suppress(Exception):  # a host is an optimisation; recording is what counts
            from sandbox import service

            if recorder.config().autostart and service.claim_autostart(loc.run_dir):
                autostart(loc)
    return recorder.record(event)


# -- recording (runs in the hosting process or the hook process) -------------------------------


class Recorder:
    """Turns hook events into ledger calls for one run.

    ``watcher`` (from :mod:`sandbox.agent`) supplies the paths a command changed; without one,
    the session service of :mod:`sandbox.session` is asked when it exists, else the worktree is
    scanned at finish.
    """

    def __init__(self, run: Run, watcher: Any = None) -> None:
        self.run = run
        self.watcher = watcher
        self._config: Config | None = None

    def config(self) -> Config:
        """The user's sandbox settings (read from the user's tree, never the worktree)."""
        if self._config is None:
            from sandbox import config

            try:
                self._config = config.load(self.run.info.user_workdir)
            except config.ConfigError:
                self._config = config.Config()
        return self._config

    def record(self, event: HookEvent) -> Outcome:
        """Record ``event``; refusals and failures come back as a not-ok :class:`Outcome`."""
        strict = False
        try:
            strict = self.config().strict
            message = self._start(event) if event.phase == "start" else self._finish(event)
            return Outcome(True, message, strict)
        except SandboxError as exc:
            return Outcome(False, exc.message, strict)

    def policy(self, event: HookEvent) -> tuple[str, str, str]:
        """(kind, idempotency, replay) for the event's tool: the user's rules, then the adapter's."""
        kind, idem, replay = event.kind, event.idempotency, event.replay
        for rule in self.config().tools:
            if fnmatch.fnmatchcase(event.tool, rule.match):
                kind = rule.kind or kind
                idem = rule.idempotency or (None if rule.kind else idem)
                replay = rule.replay or (None if rule.kind else replay)
                break
        default_idem, default_replay = POLICY[kind]
        return kind, idem or default_idem, replay or default_replay

    def _rel_paths(self, event: HookEvent) -> list[str]:
        from sandbox.paths import from_user

        out = []
        for given in event.paths:
            try:
                out.append(from_user(self.run.worktree, given, event.cwd))
            except SandboxError as exc:
                raise HookInputError(f"{event.tool} call refused: {exc.message} Nothing recorded.") from None
        return out

    def _start(self, event: HookEvent) -> str:
        kind, idem, replay = self.policy(event)
        self._rel_paths(event)  # refuse a path outside the worktree before recording anything
        call_id = event.call_id or _new_pair_id(event.pair_prefix)
        try:
            self.run.start_call(
                event.tool,
                event.input,
                call_id=call_id,
                idempotency=idem,
                replay=replay,
                side_effects=[f"external:{event.tool}"] if kind == "external" else [],
                summary=_summary(event),
            )
        except SandboxError:
            # A repeated start (the agent retried its hook, or a host died after recording it)
            # is fine; anything else (a denied or merely planned call among them) is a refusal.
            from sandbox.models import CallStatus

            entry = self.run.state().calls.get(call_id)
            if entry is None or entry.status in (CallStatus.planned, CallStatus.approved):
                raise
            return f"{call_id} already recorded ({entry.status.value})"
        if kind in ("command", "unknown"):
            self._begin_watch(call_id)
        return f"{call_id} started"

    def _finish(self, event: HookEvent) -> str:
        from sandbox.models import TERMINAL_STATUSES

        kind, _idem, _replay = self.policy(event)
        rels = self._rel_paths(event)
        call_id = event.call_id or self._paired(event)
        entry = self.run.state().calls.get(call_id) if call_id else None
        if entry is not None and entry.status in TERMINAL_STATUSES:
            return f"{call_id} already {entry.status.value}"
        assert call_id is not None
        late = entry is None
        if late:
            # The start was never seen (hooks installed mid-call, or its hook failed): record the
            # call now, late, rather than lose its changes.
            self._start(HookEvent(**{**event.__dict__, "phase": "start", "call_id": call_id}))
        paths: list[str] | None
        if kind == "write" and rels:
            paths = rels
        elif kind in ("read", "external"):
            paths = []
        else:
            paths = self._end_watch(call_id)
            if late:
                paths = None  # its changes happened before anyone watched: scan
        done = self.run.finish_call(
            call_id, event.status, paths=paths, result=_bounded(event.result), error=event.error
        )
        return f"{call_id} {done.status.value}, {len(done.files)} file(s)"

    def _paired(self, event: HookEvent) -> str | None:
        from sandbox.models import CallStatus
        from sandbox.run import input_hash

        wanted = input_hash(event.tool, event.input)
        prefix = event.pair_prefix or ""
        state = self.run.state()
        for cid in state.order:
            entry = state.calls[cid]
            if entry.status == CallStatus.started and cid.startswith(prefix) and entry.input_hash == wanted:
                return cid
        return _new_pair_id(event.pair_prefix) if event.pair_prefix else None

    def _begin_watch(self, call_id: str) -> None:
        if self.watcher is not None:
            self.watcher.begin(call_id)
            return
        client = _session_client(self.run)
        if client is not None:
            with contextlib.suppress(Exception):  # the session service is optional help, never required
                client.begin(call_id)

    def _end_watch(self, call_id: str) -> list[str] | None:
        if self.watcher is not None:
            seen = self.watcher.end(call_id)
            return None if seen is None else sorted(seen)
        client = _session_client(self.run)
        if client is not None:
            try:
                seen = client.end(call_id)
            except Exception:  # the session service is optional help: a scan is always correct
                return None
            return None if seen is None else sorted(seen)
        return None


def _session_client(run: Run) -> Any:
    try:
        from sandbox import session  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    client_for = getattr(session, "client_for", None)
    if client_for is None:
        return None
    try:
        return client_for(run)
    except Exception:  # no live service: the caller scans
        return None


def _new_pair_id(prefix: str | None) -> str:
    import secrets

    return (prefix or "call_") + secrets.token_hex(6)


def _summary(event: HookEvent) -> str | None:
    value = event.input
    if isinstance(value, dict):
        for key in ("command", "file_path", "notebook_path", "path", "pattern", "url", "query"):
            if isinstance(value.get(key), str):
                return f"{event.tool}: {value[key]}"[:500]
        argv = value.get("argv")  # sandbox exec
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return " ".join(argv)[:500]
    return event.tool


def _bounded(result: Any) -> Any:
    """The result, or a stub when it is too big to keep (a Read's response holds the whole file)."""
    if result is None:
        return None
    text = json.dumps(result, default=str)
    if len(text) <= MAX_RESULT:
        return result
    return {"truncated": True, "bytes": len(text)}


def classify_tool(
    tool: str,
    write: Collection[str],
    command: Collection[str],
    read: Collection[str],
    external: Collection[str],
) -> str:
    """The kind of a tool (write, command, read, external, unknown) from an adapter's tool lists.

    MCP tools (``mcp__server__tool``) are external unless listed otherwise.
    """
    if tool in write:
        return "write"
    if tool in command:
        return "command"
    if tool in read:
        return "read"
    if tool in external or tool.startswith("mcp__"):
        return "external"
    return "unknown"
