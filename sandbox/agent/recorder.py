"""Recording hook events: a :class:`Recorder` turns the wire protocol's events into ledger calls.

The wire protocol itself (:mod:`sandbox.agent.hookproto`: events, outcomes, the socket, forwarding)
is standard library only and on the hook's fast path; this module needs the run (pygit2, pydantic)
and runs in the process hosting the run, or in the hook process when no host is live (:func:`handle`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.agent import hookproto
from sandbox.agent.hookproto import MAX_RESULT, POLICY, HookEvent, HookInputError, Location, Outcome
from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from sandbox.models import ProcessScope
    from sandbox.run.config import Config
    from sandbox.run.run import Run


def handle(event: HookEvent, autostart: Callable[[Location], None] | None = None) -> Outcome:
    """Record one hook event: through the process hosting the run when live, else in-process.

    In-process, ``autostart(loc)`` is called first to spawn a host (``sandbox serve``) for the
    next events, unless the user's settings say ``hooks.autostart = false``; the callback itself
    skips the spawn when some process already hosts the run (it may be starting) or a hook spawned
    one moments ago (:func:`sandbox.agent.service.claim_autostart`). It must not wait for the host;
    whatever it raises is ignored: this event is recorded here either way.
    """
    loc = hookproto.locate(event.cwd)
    outcome = hookproto.forward(loc, event)
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
            if recorder.config().autostart:
                autostart(loc)
    return recorder.record(event)


# -- recording (runs in the hosting process or the hook process) -------------------------------


class Recorder:
    """Turns hook events into ledger calls for one run.

    ``watcher`` (from :mod:`sandbox.agent.launch`) supplies the paths a command changed; without one,
    the session service of :mod:`sandbox.agent.session` is asked when it exists, else the worktree is
    scanned at finish.
    """

    def __init__(self, run: Run, watcher: Any = None) -> None:
        self.run = run
        self.watcher = watcher
        self._config: Config | None = None
        #: The agent session this process supervises (``sandbox run``), recorded with each start.
        self.scope: ProcessScope | None = None

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
            handler = {"finish": self._finish, "refused": self._refused, "settle": self._settle}[event.phase]
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
            return Outcome(True, f"{call_id} refused again", decision="deny", reason=known.error or "refused")
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
            return Outcome(True, f"{call_id} refused: {denial}", decision="deny", reason=denial)
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
            return Outcome(True, f"{call_id} already recorded ({entry.status.value})")
        if kind in ("command", "unknown"):
            self._begin_watch(call_id)
        if kind == "write" and rels and self.config().allow_edits and all(self._isolated(rel) for rel in rels):
            return Outcome(True, f"{call_id} started", decision="allow", reason=ALLOW_REASON)
        return Outcome(True, f"{call_id} started")

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

            return ProcessScope(token=event.session)
        return self.scope

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
        return f"{call_id} {done.status.value}, {len(done.files)} file(s)"

    def _paired(self, event: HookEvent) -> str | None:
        from sandbox.models import CallStatus
        from sandbox.run.ids import input_hash

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
        from sandbox.agent import session  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    client_for = getattr(session, "client_for", None)
    if client_for is None:
        return None
    try:
        return client_for(run)
    except Exception:  # no live service: the caller scans
        return None


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
