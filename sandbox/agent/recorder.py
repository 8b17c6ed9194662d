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
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.agent import adapters, hookproto
from sandbox.agent.hookproto import MAX_RESULT, POLICY, HookEvent, HookInputError, Location, Outcome
from sandbox.agent.settle import candidates_of, changed_paths, settle_call
from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from sandbox.agent.changes import ChangeSource
    from sandbox.models import LedgerEntry, ProcessScope
    from sandbox.run.config import Config
    from sandbox.run.run import Run


def handle(event: HookEvent, autostart: Callable[[Location], bool] | None = None) -> Outcome:
    """Record one hook event: through the repository's host when live, else in-process.

    Otherwise ``autostart(loc)`` is called to spawn a host (``sandbox serve``), unless the user's
    settings say ``hooks.autostart = false``; the callback itself skips the spawn when a host lives
    (it may be starting) or a hook spawned one moments ago (:func:`sandbox.agent.wire.claim_spawn`),
    and says whether it spawned one. The event then goes to the new host when it answers within
    :data:`~sandbox.agent.wire.STARTING` seconds, and is recorded in this process otherwise; what
    the callback raises is ignored.
    """
    loc = hookproto.locate(event.cwd)
    outcome = hookproto.forward(loc, event)
    if outcome is not None:
        return outcome
    if not os.access(loc.run_dir, os.W_OK):
        # Inside an OS sandbox (sandbox.confine.spawn) the run's files are read-only: only the host
        # outside can record. Block the tool (strict) rather than let it run unrecorded.
        return Outcome(
            False,
            f"the run's host is not reachable from inside the sandbox, so this {event.tool} call cannot be "
            f"recorded and is blocked; restart the agent with 'sandbox run {loc.run_id} -- AGENT'.",
            strict=True,
        )
    from sandbox.agent import procs
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    if procs.available():
        event.session = procs.session_of(os.getpid())  # as the host reads a connecting hook's
    run = Run.open(Project(loc.common_dir), loc.run_id)
    recorder = Recorder(run)
    if autostart is not None:
        spawned = False
        with contextlib.suppress(Exception):  # a host is an optimisation; recording is what counts
            spawned = bool(recorder.config().autostart and autostart(loc))
        if spawned:
            # The host comes up in well under a second; handing it this event costs less than
            # recording it here, and the hooks arriving meanwhile wait for the same host.
            outcome = hookproto.forward(loc, event)
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
            foreign = self._foreign(event)
            if foreign is not None:
                return Outcome(False, foreign, strict)
            if event.phase == "start":
                if isinstance(event.input, dict) and event.input.get("isolation") == "off":
                    from sandbox.confine import settingstree  # pygit2: never for a hook's own start

                    settingstree.refuse_unconfined(self.run)
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

    def _foreign(self, event: HookEvent) -> str | None:
        """Why ``event`` may not touch the calls of the agent session it names (None: it may).

        ``event.session`` is the ``sandbox run`` session the hook's process belongs to (the host
        reads it from the connecting process's ancestry, see :func:`sandbox.agent.procs.session_of`),
        and each agent session is bound to the sandbox session its calls were started from. A
        payload naming another live session's id (a confined agent can run ``sandbox hook`` with
        any payload) touches nothing; once that session's processes are gone, the agent session
        may continue elsewhere (``claude --resume ID`` in a new ``sandbox run``).
        """
        if not event.agent_session:
            return None
        owner = self.run.state().data.sessions.get(event.agent_session)
        if owner is None or owner == event.session:
            return None
        from sandbox.agent import procs

        if procs.available() and not procs.find(owner):
            return None
        return (
            f"This {event.tool if event.tool != '*' else 'hook'} payload names agent session "
            f"{event.agent_session[:64]!r}, which belongs to another sandbox session of run {self.run.run_id}; "
            "nothing recorded."
        )

    def _same_session(self, entry: LedgerEntry | None, event: HookEvent) -> None:
        """Refuse a payload about a call that another ``sandbox run`` session started: only that session,
        or ``sandbox resume``, ends it (a new session's hook settled a killed one's call "never ran"). The
        payload is kept beside the call as a violation."""
        if entry is None or entry.session is None or entry.session == event.session:
            return
        what = f"{event.phase} payload for {entry.call_id}"
        with contextlib.suppress(SandboxError, OSError):  # refused either way
            self.run.note(
                {"payload_from_other_session": {"call": entry.call_id, "payload": what, "status": entry.status.value}}
            )
        raise SandboxError(
            f"This {what} comes from another sandbox session than the one that started the call; only that "
            f"session or 'sandbox resume {self.run.run_id}' ends it. Nothing recorded (kept beside the call)."
        )

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
        return top != ".git" and top not in adapters.settings_dirs() and not self.run.is_private(rel)

    def _refused(self, event: HookEvent) -> str:
        """The agent refused the call before running it: ``not_run`` with its reason."""
        from sandbox.models import CallStatus

        kind, idem, replay = self.policy(event)
        call_id = event.call_id or self._paired(event)
        assert call_id is not None
        reason = event.error or "The agent refused the call before running it."
        entry = self.run.state().calls.get(call_id)
        self._same_session(entry, event)
        if entry is not None and entry.agent_session != event.agent_session:
            return f"{call_id} belongs to another agent session; nothing recorded"
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
            if entry.status == CallStatus.started and _sandbox_started(entry):
                # No permission step is left after the sandbox started a command (sandbox exec, sandbox mcp's
                # run_command): it runs, and its real end is recorded when it comes.
                with contextlib.suppress(SandboxError, OSError):
                    self.run.note({"refusal_of_running_call": {"call": call_id, "reason": reason[:500]}})
                raise SandboxError(
                    f"Call {call_id} is a command the sandbox already started; a refusal cannot end it. "
                    "Nothing recorded (kept beside the call as a violation)."
                )
            seen: list[str] | None = None
            if entry.status == CallStatus.started and kind in ("command", "unknown"):
                with contextlib.suppress(Exception):  # the watch is help only
                    seen = self._end_watch(call_id)
            changed = (
                changed_paths(self.run, candidates_of(self.run, entry, seen))
                if entry.status == CallStatus.started
                else []
            )
            if changed:  # said refused, yet it changed files while started: it ran (the payload lies)
                why = f"the agent said this {event.tool} call was refused ({reason}), "
                why += f"yet it changed {len(changed)} path(s)"
                done = self.run.finish_call(
                    call_id, CallStatus.failed, paths=changed, error=f"{why}: it ran", mark="violation"
                )
            else:
                done = self.run.not_run(call_id, reason)
        return f"{call_id} {done.status.value}"

    def _settle(self, event: HookEvent) -> str:
        """The agent moved on (its turn or session ended): its calls still started end on the evidence.

        A call that changed files meanwhile ran and was stopped (``interrupted``, with those files);
        one with no sign of running never ran (``not_run``). When the session of a ``sandbox run``
        ends, the calls are left to it: it knows whether Ctrl-C stopped them (:func:`settle_call`).
        """
        from sandbox.models import CallStatus

        if not event.agent_session:
            return "no agent session named; nothing settled"
        if event.session_end and event.session and not event.interrupted:
            return "left to the sandbox session, which ends next"
        state = self.run.state()
        open_calls = [
            cid
            for cid in state.order
            if state.calls[cid].status == CallStatus.started
            and state.calls[cid].agent_session == event.agent_session
            and state.calls[cid].session in (None, event.session)  # another session's calls are resume's
        ]
        reason = event.error or "The agent ended its turn without running the call."
        # The user left with Ctrl-C (the agent reads it as a key: no signal reaches anyone) while the
        # call was open: it was running, or at its prompt; interrupted either way, never offered again.
        ran = "the user ended the agent's session with Ctrl-C while the call was open" if event.interrupted else None
        ended: dict[str, int] = {}
        for cid in open_calls:
            done = settle_call(self.run, state.calls[cid], self._end_watch(cid), ran=ran, never=reason)
            if done is not None:
                ended[done.status.value] = ended.get(done.status.value, 0) + 1
        return ", ".join(f"{n} call(s) {what}" for what, n in sorted(ended.items())) or "no open calls"

    def _scope(self, event: HookEvent) -> ProcessScope | None:
        if event.session and (self.scope is None or self.scope.token != event.session):
            from sandbox.models import ProcessScope

            return ProcessScope(token=event.session, boot_id=self.boot_id)
        return self.scope

    def _finish(self, event: HookEvent) -> Outcome:
        from sandbox.models import CallStatus
        from sandbox.run.fold import TERMINAL_STATUSES

        kind, _idem, _replay = self.policy(event)
        rels = self._rel_paths(event)
        call_id = event.call_id or self._paired(event)
        entry = self.run.state().calls.get(call_id) if call_id else None
        self._same_session(entry, event)
        if entry is not None and entry.agent_session != event.agent_session:
            return Outcome(False, f"Call {call_id} belongs to another agent session; nothing recorded.", call=call_id)
        if entry is not None and entry.status == CallStatus.not_run:
            # A result for a call that was refused before it ran: it ran anyway.
            why = (
                f"the agent reported a result for this {event.tool} call, which was refused before it ran "
                f"({entry.error or 'no reason recorded'}): it ran anyway"
            )
            done = self.run.violation(entry.call_id, why)
            return Outcome(True, f"{call_id} {done.status.value}", call=call_id, status=done.status.value)
        if entry is not None and entry.status in TERMINAL_STATUSES:
            said = "interrupted" if event.interrupted else str(event.status)
            if said != entry.status.value:  # a finish that contradicts the first: kept beside it as evidence
                why = f"a second finish of this {event.tool} call said {said} ({event.error or 'no error'})"
                self.run.note({"conflicting_finish": {"call": entry.call_id, "first": entry.status.value, "why": why}})
                return Outcome(
                    True, f"{call_id} already {entry.status.value}; the conflicting finish was recorded beside it",
                    call=call_id, status=entry.status.value,
                )  # fmt: skip
            return Outcome(True, f"{call_id} already {entry.status.value}", call=call_id, status=entry.status.value)
        assert call_id is not None
        late = entry is None
        violation = None
        if late:
            # The start was never seen (hooks installed mid-call, its hook failed, or the payload is
            # forged): record the call now, with its changes, as a violation, never as succeeded.
            denial = self._denial(event, call_id)
            violation = (
                f"the agent reported this {event.tool} call's result without asking first (no start before "
                "it ran), so the sandbox never vouched for it" + (f"; it matches a denial: {denial}" if denial else "")
            )
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
        from sandbox.run.output import split

        mark = "violation" if violation else "interrupted" if event.interrupted else None
        from sandbox.run.calls import RecordingFailedError

        result, output = split(event.result) if kind == "command" else (event.result, {})
        try:
            done = self.run.finish_call(
                call_id,
                CallStatus.failed if mark else event.status,
                paths=paths,
                result=_bounded(result),
                output=output,
                error=violation or event.error,
                mark=mark,
                ran_ms=event.ran_ms,
            )
        except RecordingFailedError as exc:
            # Its changes could not be recorded (a tree too deep, a file not safe to read): not ok,
            # but the call has ended failed with the reason unless it says it stays started.
            ended = self.run.state().calls[call_id].status
            return Outcome(False, exc.message, call=call_id, status=ended.value, files=0)
        return Outcome(
            True,
            f"{call_id} {done.status.value}, {len(done.files)} file(s)",
            call=call_id,
            status=done.status.value,
            files=len(done.files),
        )

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
        with contextlib.suppress(Exception):  # a change source is help only: a scan is always correct
            self.source.begin(call_id)

    def _end_watch(self, call_id: str) -> list[str] | None:
        try:
            seen = self.source.end(call_id)
        except Exception:  # a change source is help only: a scan is always correct
            return None
        return None if seen is None else sorted(seen)


def _sandbox_started(entry: LedgerEntry) -> bool:
    """True for a call whose command the sandbox itself starts (its input is a command's argv, as
    ``sandbox exec`` and ``sandbox mcp``'s run_command record it): once started, nothing asks permission."""
    value = entry.input
    if not isinstance(value, dict) or not set(value) <= {"argv", "isolation"}:
        return False
    argv = value.get("argv")
    return isinstance(argv, list) and bool(argv) and all(isinstance(a, str) for a in argv)


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


#: Before a summary that only the hook payload gives (nothing in the tool's input says what ran).
AGENT_WORD = "the agent says: "


#: What a payload's summary may put before a path its input names: ``sandbox mcp``'s own verbs
#: (``write src/a.txt``, as its unconfined server records it). Nothing goes before a command, a URL
#: or a query: ``echo rm -rf src`` for an input that ran ``rm -rf src`` would read as harmless.
_SAYS_WHAT_RAN = re.compile(r"(?:write |edit )?")
_PATH_KEYS = ("file_path", "notebook_path", "path")
#: The shell ``sandbox mcp``'s run_command starts (``/bin/sh -c COMMAND``): its summary is the COMMAND.
_MCP_SHELL = "/bin/sh"


def _summary(event: HookEvent) -> str | None:
    """The call's one line in the ledger: what its input says ran (the command, the file). The
    payload's ``summary`` is kept only when it says the same (else a forged payload would show a
    harmless command while another ran); a summary the input cannot confirm is marked as the agent's
    word. At most 500 characters."""
    value = event.input
    what: str | None = None
    named = ""
    if isinstance(value, dict):
        for key in ("command", "file_path", "notebook_path", "path", "pattern", "url", "query"):
            if isinstance(value.get(key), str):
                what, named = value[key], key
                break
        argv = value.get("argv")  # sandbox exec, and sandbox mcp's run_command (``/bin/sh -c COMMAND``)
        if what is None and isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            shell = len(argv) == 3 and argv[0] == _MCP_SHELL and argv[1] == "-c" and event.summary == argv[2]
            return (event.summary if shell and event.summary else " ".join(argv))[:500]
    given = event.summary
    if what is not None:
        before = given[: len(given) - len(what)] if given is not None and given.endswith(what) else None
        said = before == "" or (before is not None and named in _PATH_KEYS and _SAYS_WHAT_RAN.fullmatch(before))
        return (given if said and given is not None else f"{event.tool}: {what}")[:500]
    if given:
        return (AGENT_WORD + given)[:500]
    return event.tool


def _bounded(result: Any) -> Any:
    """The result, or a stub when it is too big to keep (a Read's response holds the whole file)."""
    if result is None:
        return None
    text = json.dumps(result, default=str)
    if len(text) <= MAX_RESULT:
        return result
    return {"truncated": True, "bytes": len(text)}
