"""The generic hook protocol: one JSON object on stdin becomes a call start or a call finish.

Agents with hooks (Claude Code, Gemini CLI, an in-house loop) run ``sandbox hook <agent>`` before
and after each tool call. An adapter (:mod:`sandbox.agent.adapters`) turns the agent's payload into a
:class:`HookEvent`; ``sandbox hook generic`` reads a :class:`HookEvent` directly (documented in
``hooks/README.md``). The event is then recorded:

* by the repository's host (:mod:`sandbox.agent.host`, the background ``sandbox serve``), over its
  socket (:mod:`sandbox.agent.wire`; fast: the hook process imports neither pygit2 nor pydantic), or
* in the hook process itself when no host is live (correct, slower start-up); it then spawns
  the host for the next events (see :func:`handle`).

``start`` is durable before the hook returns, so before the tool runs. ``finish`` commits the
call's file changes: exactly the named paths for a file-writing call (O(1)), a change source's
paths for a command (:mod:`sandbox.agent.changes`), nothing for a read-only or external call, a
scan when unknown.

This module imports only the standard library at module level: it is on the hook's fast path.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from sandbox.agent import wire
from sandbox.errors import SandboxError
from sandbox.store import layout

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox.agent.changes import ChangeSource
    from sandbox.models import ProcessScope
    from sandbox.run.config import Config
    from sandbox.run.run import Run

MAX_PAYLOAD = 8 * 1024 * 1024
MAX_RESULT = 64 * 1024
#: The longest error text kept (its first line is the ledger's one-line ``error``; the rest beside it).
MAX_ERROR = 256 * 1024
#: start/finish: one side of one call; refused: the agent refused the call before running it
#: (``error`` says why); settle: the agent says no call of its session is still running (its turn
#: or session ended), so a call it started and never finished did not run.
PHASES = ("start", "finish", "refused", "settle")
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
    #: The agent session's token (``SANDBOX_SESSION`` in the hook's environment, set by
    #: ``sandbox run``): recorded with the call's start so its processes can be found later.
    session: str | None = None
    #: The agent's own session id (e.g. Claude Code's session_id): a settle covers only its calls.
    agent_session: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> HookEvent:
        """Validate a decoded generic-protocol object; :class:`HookInputError` when malformed."""
        if not isinstance(data, dict):
            raise HookInputError("The hook payload must be a JSON object.")
        phase = data.get("event", data.get("phase"))
        if phase not in PHASES:
            raise HookInputError("The hook payload's 'event' must be 'start', 'finish', 'refused' or 'settle'.")
        if phase == "settle":
            data = {"tool": "*", **data}
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
        if phase in ("finish", "refused") and not call_id and not data.get("pair_prefix"):
            raise HookInputError(f"A {phase} event needs a 'call_id'.")
        error = data.get("error")
        agent_session = data.get("agent_session")
        if agent_session is not None and not isinstance(agent_session, str):
            raise HookInputError("The hook payload's 'agent_session' must be a string.")
        return cls(
            phase=phase,
            cwd=data["cwd"],
            tool=data["tool"],
            call_id=call_id or None,
            input=data.get("input"),
            kind=kind,
            paths=list(raw_paths),
            status=status,
            error=None if error is None else str(error)[:MAX_ERROR],
            result=data.get("result"),
            idempotency=data.get("idempotency"),
            replay=data.get("replay"),
            pair_prefix=data.get("pair_prefix"),
            agent=str(data.get("agent", "generic")),
            session=data["session"] if isinstance(data.get("session"), str) and data["session"] else None,
            agent_session=agent_session or None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The generic-protocol object for this event."""
        out = asdict(self)
        out["event"] = out.pop("phase")
        return out


@dataclass
class Outcome:
    """What recording a hook event did: ``ok``, a one-line ``message``, and the strict setting.

    ``decision`` answers the agent's permission question for a start: ``deny`` (the call is
    refused before it runs; ``reason`` goes to the model), ``allow`` (the sandbox vouches for it,
    see ``hooks.allow_edits``), or None (the agent decides as it would without the sandbox).
    ``call``, ``status`` and ``files`` say what was recorded (the call, its status after the
    event, how many files a finish committed); ``note`` is a one-line remark for the user (say,
    that the run's changes are found by scanning because the inotify limits are reached).
    """

    ok: bool
    message: str = ""
    strict: bool = False
    decision: str | None = None
    reason: str = ""
    call: str | None = None
    status: str | None = None
    files: int | None = None
    note: str | None = None

    @property
    def denied(self) -> bool:
        """The sandbox refused the call (a denial or a policy): the agent must get its deny answer."""
        return self.decision == "deny"

    def to_reply(self) -> dict[str, Any]:
        """The host's JSON reply for this outcome (see :func:`forward`)."""
        return asdict(self)

    @classmethod
    def from_reply(cls, reply: Any) -> Outcome:
        """The outcome in a host's reply (KeyError/TypeError when malformed)."""
        decision = reply.get("decision")
        files = reply.get("files")
        return cls(
            bool(reply["ok"]),
            str(reply.get("message", reply.get("error", ""))),
            bool(reply.get("strict", False)),
            decision if decision in ("allow", "deny") else None,
            str(reply.get("reason") or ""),
            reply["call"] if isinstance(reply.get("call"), str) else None,
            reply["status"] if isinstance(reply.get("status"), str) else None,
            files if isinstance(files, int) and not isinstance(files, bool) else None,
            reply["note"] if isinstance(reply.get("note"), str) else None,
        )


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


#: A run found from a directory (see :mod:`sandbox.store.layout`, which owns the layout).
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


# -- talking to the repository's host ----------------------------------------------------------


def forward(loc: Location, event: HookEvent, timeout: float = 120.0) -> Outcome | None:
    """Send the event to the repository's host (:mod:`sandbox.agent.wire`); None when none answered."""
    client = wire.Client(loc.common_dir, timeout=timeout)
    reply = client.for_run(loc.run_id, loc.run_dir, "hook", wait_start=wire.STARTING, event=event.to_dict())
    if reply is None:
        return None  # no host, or it died mid-request: recording again here is idempotent
    try:
        return Outcome.from_reply(reply)
    except (KeyError, TypeError, AttributeError):
        return None


def handle(event: HookEvent, autostart: Callable[[Location], None] | None = None) -> Outcome:
    """Record one hook event: through the repository's host when live, else in-process.

    Otherwise ``autostart(loc)`` is called to spawn a host (``sandbox serve``), unless the user's
    settings say ``hooks.autostart = false``, a host lives (it may be starting), or a hook spawned
    one moments ago; the event then goes to the new host when it answers within
    :data:`~sandbox.agent.wire.STARTING` seconds, and is recorded in this process otherwise. It must not wait for
    the host; whatever it raises is ignored: this event is recorded here either way.
    """
    loc = locate(event.cwd)
    outcome = forward(loc, event)
    if outcome is not None:
        return outcome
    if not os.access(loc.run_dir, os.W_OK):
        # Inside an OS sandbox (sandbox.agent.confine) the run's files are read-only: only the host
        # outside can record. Block the tool (strict) rather than let it run unrecorded.
        return Outcome(
            False,
            f"the run's host is not reachable from inside the sandbox, so this {event.tool} call cannot be "
            f"recorded and is blocked; restart the agent with 'sandbox run {loc.run_id} -- AGENT'.",
            strict=True,
        )
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    run = Run.open(Project(loc.common_dir), loc.run_id)
    recorder = Recorder(run)
    if autostart is not None:
        with contextlib.suppress(Exception):  # a host is an optimisation; recording is what counts
            spawned = False
            if recorder.config().autostart and wire.claim_spawn(loc.common_dir):
                autostart(loc)
                spawned = True
            if spawned:
                # The host comes up in well under a second; handing it this event costs less than
                # recording it here, and the hooks arriving meanwhile wait for the same host.
                outcome = forward(loc, event)
                if outcome is not None:
                    return outcome
    return recorder.record(event)


# -- recording (runs in the hosting process or the hook process) -------------------------------


class Recorder:
    """Turns hook events into ledger calls for one run.

    ``source`` (:mod:`sandbox.agent.changes`) supplies the paths a command changed; without one,
    :func:`sandbox.agent.changes.pick` chooses (the repository's host when it lives, else a scan).
    """

    def __init__(self, run: Run, source: ChangeSource | None = None, boot_id: str | None = None) -> None:
        self.run = run
        self._source = source
        self._config: Config | None = None
        #: The agent session this process supervises (``sandbox run``), recorded with each start.
        self.scope: ProcessScope | None = None
        #: This machine's boot id, recorded with a hook's session scope (the host sets it).
        self.boot_id = boot_id

    @property
    def source(self) -> ChangeSource:
        """Where commands' changes come from (picked on first use)."""
        if self._source is None:
            from sandbox.agent import changes

            self._source = changes.pick(host=(self.run.project.common_dir, self.run.run_id, self.run.dir))
        return self._source

    @source.setter
    def source(self, value: ChangeSource) -> None:
        self._source = value

    def config(self) -> Config:
        """The user's sandbox settings (read from the user's tree, never the worktree)."""
        if self._config is None:
            from sandbox.run import config

            try:
                self._config = config.load(self.run.user_workdir)
            except config.ConfigError:
                self._config = config.Config()
        return self._config

    def record(self, event: HookEvent) -> Outcome:
        """Record ``event``; refusals and failures come back as a not-ok :class:`Outcome`.

        A denied call comes back ok with ``decision = "deny"``: refusing it is the sandbox
        working, and the agent must get its own deny answer, whatever the strict setting.
        """
        strict = False
        try:
            strict = self.config().strict
            if event.phase == "start":
                outcome = self._start(event)
                outcome.strict = strict
                return outcome
            if event.phase == "finish":
                outcome = self._finish(event)
                outcome.strict = strict
                return outcome
            handler = {"refused": self._refused, "settle": self._settle}[event.phase]
            return Outcome(True, handler(event), strict)
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
        from sandbox.store.paths import from_user

        out = []
        for given in event.paths:
            try:
                out.append(from_user(self.run.worktree, given, event.cwd))
            except SandboxError as exc:
                raise HookInputError(f"{event.tool} call refused: {exc.message} Nothing recorded.") from None
        return out

    def _start(self, event: HookEvent, ran: bool = False) -> Outcome:
        """Record a call's start; ``ran``: it already ran (a late start from its finish), so no refusal."""
        from sandbox.models import CallStatus

        kind, idem, replay = self.policy(event)
        rels = self._rel_paths(event)  # refuse a path outside the worktree before recording anything
        call_id = event.call_id or _new_pair_id(event.pair_prefix)
        known = self.run.state().calls.get(call_id)
        if known is not None and known.status == CallStatus.not_run and not ran:
            # The agent asks again for a call already refused (a hook retried): refuse it again.
            return Outcome(
                True,
                f"{call_id} refused again",
                decision="deny",
                reason=known.error or "refused",
                call=call_id,
                status=known.status.value,
            )
        denial = None if ran else self._denial(event, call_id)
        if denial is not None:
            self.run.refuse_call(
                event.tool,
                event.input,
                denial,
                call_id=call_id,
                idempotency=idem,
                replay=replay,
                summary=_summary(event),
                agent_session=event.agent_session,
            )
            return Outcome(
                True, f"{call_id} refused: {denial}", decision="deny", reason=denial, call=call_id, status="not_run"
            )
        try:
            self.run.start_call(
                event.tool,
                event.input,
                call_id=call_id,
                idempotency=idem,
                replay=replay,
                side_effects=[f"external:{event.tool}"] if kind == "external" else [],
                summary=_summary(event),
                procs=self._scope(event),
                agent_session=event.agent_session,
            )
        except SandboxError:
            # A repeated start (the agent retried its hook, or a host died after recording it)
            # is fine; anything else (a denied or merely planned call among them) is a refusal.
            entry = self.run.state().calls.get(call_id)
            if entry is None or entry.status in (CallStatus.planned, CallStatus.approved):
                raise
            return Outcome(
                True, f"{call_id} already recorded ({entry.status.value})", call=call_id, status=entry.status.value
            )
        if kind in ("command", "unknown"):
            self._begin_watch(call_id)
        if kind == "write" and rels and self.config().allow_edits and all(self._isolated(rel) for rel in rels):
            return Outcome(
                True, f"{call_id} started", decision="allow", reason=ALLOW_REASON, call=call_id, status="started"
            )
        return Outcome(True, f"{call_id} started", call=call_id, status="started")

    def _denial(self, event: HookEvent, call_id: str) -> str | None:
        """Why the call must not run (a policy rule or an earlier denial of the same input), or None."""
        for rule in self.config().tools:
            if fnmatch.fnmatchcase(event.tool, rule.match):
                if rule.deny:
                    return f"The sandbox's policy refuses {event.tool} calls: {rule.deny}"
                break
        from sandbox.run import approvals

        entry = self.run.state().calls.get(call_id)
        if entry is not None and entry.approval is not None and entry.approval.value == "denied":
            return _denied_text(event.tool, entry.call_id, entry.denial_reason)
        denial = approvals.is_denied(self.run, event.tool, event.input)
        if denial is not None:
            return _denied_text(event.tool, denial.call_id, denial.reason)
        return None

    def _isolated(self, rel: str) -> bool:
        """True for a path whose edit stays in the worktree until apply (not git's, not the sandbox's own)."""
        top = rel.split("/", 1)[0]
        return top not in (".git", ".claude", ".gemini") and not self.run.is_private(rel)

    def _refused(self, event: HookEvent) -> str:
        """The agent refused the call before running it: ``not_run`` with its reason."""
        from sandbox.models import CallStatus

        kind, idem, replay = self.policy(event)
        call_id = event.call_id or self._paired(event)
        assert call_id is not None
        reason = event.error or "The agent refused the call before running it."
        entry = self.run.state().calls.get(call_id)
        if entry is None:
            done = self.run.refuse_call(
                event.tool,
                event.input,
                reason,
                call_id=call_id,
                idempotency=idem,
                replay=replay,
                summary=_summary(event),
                agent_session=event.agent_session,
            )
        else:
            if entry.status == CallStatus.started and kind in ("command", "unknown"):
                with contextlib.suppress(Exception):  # the watch is help only
                    self._end_watch(call_id)
            done = self.run.not_run(call_id, reason)
        return f"{call_id} {done.status.value}"

    def _settle(self, event: HookEvent) -> str:
        """Calls of the event's session still started never ran: the agent moved on without them."""
        from sandbox.models import CallStatus

        state = self.run.state()
        open_calls = [
            cid
            for cid in state.order
            if state.calls[cid].status == CallStatus.started and state.calls[cid].agent_session == event.agent_session
        ]
        reason = event.error or "The agent ended its turn without running the call."
        for cid in open_calls:
            with contextlib.suppress(Exception):  # the watch is help only; the call ends either way
                self._end_watch(cid)
            self.run.not_run(cid, reason)
        return f"{len(open_calls)} call(s) did not run" if open_calls else "no open calls"

    def _scope(self, event: HookEvent) -> ProcessScope | None:
        if event.session and (self.scope is None or self.scope.token != event.session):
            from sandbox.models import ProcessScope

            return ProcessScope(token=event.session, boot_id=self.boot_id)
        return self.scope

    def _finish(self, event: HookEvent) -> Outcome:
        from sandbox.models import TERMINAL_STATUSES

        kind, _idem, _replay = self.policy(event)
        rels = self._rel_paths(event)
        call_id = event.call_id or self._paired(event)
        entry = self.run.state().calls.get(call_id) if call_id else None
        if entry is not None and entry.status in TERMINAL_STATUSES:
            return Outcome(
                True, f"{call_id} already {entry.status.value}", call=call_id, status=entry.status.value, files=None
            )
        assert call_id is not None
        late = entry is None
        if late:
            # The start was never seen (hooks installed mid-call, or its hook failed): record the
            # call now, late, rather than lose its changes.
            self._start(HookEvent(**{**event.__dict__, "phase": "start", "call_id": call_id}), ran=True)
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
        return Outcome(
            True,
            f"{call_id} {done.status.value}, {len(done.files)} file(s)",
            call=call_id,
            status=done.status.value,
            files=len(done.files),
        )

    def _paired(self, event: HookEvent) -> str | None:
        from sandbox.models import CallStatus
        from sandbox.run.run import input_hash

        wanted = input_hash(event.tool, event.input)
        prefix = event.pair_prefix or ""
        state = self.run.state()
        for cid in state.order:
            entry = state.calls[cid]
            if entry.status == CallStatus.started and cid.startswith(prefix) and entry.input_hash == wanted:
                return cid
        return _new_pair_id(event.pair_prefix) if event.pair_prefix else None

    def _begin_watch(self, call_id: str) -> None:
        with contextlib.suppress(Exception):  # a change source is help only: a scan is always correct
            self.source.begin(call_id)

    def _end_watch(self, call_id: str) -> list[str] | None:
        try:
            seen = self.source.end(call_id)
        except Exception:  # a change source is help only: a scan is always correct
            return None
        return None if seen is None else sorted(seen)


#: Why the sandbox answers "allow" for an edit inside the worktree (shown in the agent's debug log).
ALLOW_REASON = "sandbox: edits inside the run's worktree stay isolated until 'sandbox apply'"


def _denied_text(tool: str, call_id: str, reason: str | None) -> str:
    why = f": {reason}" if reason else ""
    return (
        f"The user denied this {tool} call in the sandbox (same tool and input as call {call_id}){why}. "
        "Do not ask for it again."
    )


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
