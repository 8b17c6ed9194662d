"""What a run's ledger says about going back and going on, for the run page: its rewinds (and their
undo and redo), the agent sessions its calls ran in, and the commands that go on from where it stands.

A rewind (:mod:`sandbox.recovery.rewind`) is a ``rollback_files`` event (the run's files back to
just before a call) followed by a ``note`` naming it (``rewind``); ``sandbox undo`` and ``redo``
right after it add one more ``rollback_files`` and a note each (``rewind_undo``, ``rewind_redo``:
:mod:`sandbox.recovery.rewind_undo`). The fold keeps every note in ledger order, so whether a run
was ever rewound is read from the fold alone; only then are the ledger's events read (once per
request) for the calls each step took out of the run's files, as ``sandbox log`` marks them
``[rolled back]``. Which calls are out *now* stays the fold's (``LedgerEntry.rolled_back``): the
page never decides it on its own.

The next commands (:func:`next_steps`) are the CLI's, whole, with this run's and call's ids, for
the user to copy: the page never runs them (a resume relaunches an agent; an approval lets a call
whose outcome is unknown run again: both are the user's, in their terminal).
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.models import CallStatus, EventKind, LedgerEntry, LedgerState, RollbackFilesData
from sandbox.models.payloads import view
from sandbox.recovery import rewind_undo
from sandbox.recovery.resumereport import classify

if TYPE_CHECKING:
    from sandbox.run.run import Run

#: The ``note`` keys of a rewind and of its undo and redo.
REWIND_NOTES = ("rewind", rewind_undo.UNDO_NOTE, rewind_undo.REDO_NOTE)
#: How many characters of a session id a row shows (more where two sessions of the run would read alike).
SHORT = 8


@dataclass
class Then:
    """An undo or redo of a rewind: ``op`` is "undo" (taken back) or "redo" (rewound again)."""

    op: str
    at: datetime.datetime


@dataclass
class Rewind:
    """One rewind of the run, as its note and the ``rollback_files`` before it recorded it."""

    #: 1 for the run's first rewind.
    number: int
    at: datetime.datetime
    #: The call the files went back to just before.
    to: str
    checkpoint: str | None
    #: The agent session the conversation was forked into (None: only the files went back).
    session: str | None
    from_session: str | None
    #: Calls at and after ``to`` that may have acted outside the files (not undone by it).
    side_effects: list[str]
    #: The calls whose changes the run's files no longer held after it (its ``rollback_files``'s
    #: ``undone_calls``: a call an earlier rollback had taken out is listed again).
    took: list[str]
    then: list[Then] = field(default_factory=list)

    @property
    def taken_back(self) -> bool:
        """True when its newest undo or redo was an undo: the files are as they were before it."""
        return bool(self.then) and self.then[-1].op == "undo"


@dataclass
class Rewinds:
    """The run's rewinds, oldest first, and what they mean now."""

    items: list[Rewind] = field(default_factory=list)
    #: The calls out of the run's files now, each with the rewind (or its redo) that took it out.
    by_call: dict[str, Rewind] = field(default_factory=dict)
    #: What ``sandbox undo`` ("undo": takes the newest rewind back) or ``sandbox redo`` ("redo":
    #: rewinds again) would do to the newest rewind now; None: neither is about a rewind.
    next_op: str | None = None


def rewinds(run: Run, state: LedgerState) -> Rewinds:
    """The run's rewinds (:class:`Rewinds`); reads the ledger's events only for a run that has one."""
    if not any(key in note for note in state.data.note for key in REWIND_NOTES):
        return Rewinds()  # never rewound: the fold says so, no event is read (a 500-call page stays fast)

    found = Rewinds()
    owner: dict[str, Rewind | None] = {}
    out: list[str] = []  # the calls the newest rollback_files took out, until a note says whose it was
    for _oid, event in run.events_read():
        if event.kind == EventKind.rollback_files:
            out = list(view(event.data, RollbackFilesData).get("undone_calls", []))
            owner.update(dict.fromkeys(out))  # a plain 'rollback --files' unless a rewind's note follows
            continue
        if event.kind != EventKind.note:
            out = []  # a step's own rollback_files is followed by notes only (stored transcripts, then its own)
            continue
        made = event.data.get("rewind")
        if isinstance(made, dict):
            item = _rewind(len(found.items) + 1, event.at, made, out)
            if item is not None:
                found.items.append(item)
                owner.update(dict.fromkeys(out, item))
        elif found.items and isinstance(event.data.get(rewind_undo.UNDO_NOTE), dict):
            found.items[-1].then.append(Then("undo", event.at))
        elif found.items and isinstance(event.data.get(rewind_undo.REDO_NOTE), dict):
            found.items[-1].then.append(Then("redo", event.at))
            owner.update(dict.fromkeys(out, found.items[-1]))
        else:
            continue
        out = []
    for call_id, item in owner.items():
        entry = state.calls.get(call_id)
        if item is not None and entry is not None and entry.rolled_back:
            found.by_call[call_id] = item
    step = rewind_undo.last_step(run)  # what 'sandbox undo' and 'sandbox redo' check, the same way
    if step is not None:
        found.next_op = "redo" if step.op == "undo" else "undo"
    return found


def _rewind(number: int, at: datetime.datetime, made: dict[str, object], took: list[str]) -> Rewind | None:
    to = made.get("to")
    if not isinstance(to, str):
        return None  # not a rewind this version can read
    effects = made.get("side_effects")
    return Rewind(
        number=number,
        at=at,
        to=to,
        checkpoint=_text(made.get("checkpoint")),
        session=_text(made.get("session")),
        from_session=_text(made.get("from_session")),
        side_effects=[c for c in effects if isinstance(c, str)] if isinstance(effects, list) else [],
        took=list(took),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# -- agent sessions -----------------------------------------------------------------------------------


def short_sessions(entries: list[LedgerEntry]) -> dict[str, str]:
    """Each agent session of the run's calls with the short id a row shows; empty when the calls ran
    in one session (or none): only a run whose agent was relaunched or forked needs telling apart."""
    seen = list(dict.fromkeys(e.agent_session for e in entries if e.agent_session))
    if len(seen) < 2:
        return {}
    size = SHORT
    while size < max(len(s) for s in seen) and len({s[:size] for s in seen}) < len(seen):
        size += 4
    return {s: s[:size] for s in seen}


def relaunches(notes: Sequence[Mapping[str, object]]) -> list[datetime.datetime]:
    """When ``sandbox run`` started the run's agent again (each session's note after the first)."""
    starts = [moment(n.get("at")) for n in notes if _argv(n.get("agent_command"))]
    return [at for at in starts[1:] if at is not None]


# -- what to run next ----------------------------------------------------------------------------------


@dataclass
class NextStep:
    """A sentence and the commands that act on it (the CLI's, whole: text to copy)."""

    text: str
    commands: list[str]
    #: The call it is about (None: the run).
    call_id: str | None = None


def next_steps(run: Run, state: LedgerState) -> list[NextStep]:
    """What the run needs from the user after an interrupted agent session or with uncertain calls."""
    from sandbox.agent.sessions import for_command

    rid = shlex.quote(run.run_id)
    notes = state.data.note
    commands = [(moment(n.get("at")), n.get("agent_command")) for n in notes if _argv(n.get("agent_command"))]
    started_since = max((at for at, _ in commands if at is not None), default=None)
    last = commands[-1][1] if commands else None
    agent = for_command(last) if isinstance(last, list) else None
    if agent is not None:  # as 'resume --continue' decides (sandbox.recovery.continue_.plan)
        resume = f"sandbox resume {rid} --continue"
        how = "relaunches the agent on its own conversation (as 'sandbox run' started it) with the resume note"
    else:
        resume = f"sandbox resume {rid}"
        why = "no 'sandbox run' session is recorded" if last is None else "the sandbox cannot relaunch this agent"
        how = f"writes the note to give your agent when you start it again ({why})"
    entries = [state.calls[c] for c in state.order]
    in_flight = [e for e in entries if e.status == CallStatus.started]
    uncertain = [e for e in entries if e.status == CallStatus.uncertain]
    steps: list[NextStep] = []
    stopped = _interrupted(notes, entries)
    if in_flight:
        ids = ", ".join(e.call_id for e in in_flight)
        steps.append(
            NextStep(
                f"{len(in_flight)} call(s) started and did not end ({ids}). If the agent is no longer running (it "
                f"crashed or was killed), resume the run: this {how}.",
                [resume],
            )
        )
    elif stopped is not None:
        said = f"The agent's last session was interrupted ({stopped}). To go on, resume the run: this {how}."
        steps.append(NextStep(said, [resume]))
    elif any(not _after(started_since, e) for e in uncertain):
        blocked = "; the uncertain calls not to repeat blindly stay blocked until you approve them" if agent else ""
        said = "Calls whose outcome is unknown remain, and no agent session started since. To go on, resume the run: "
        steps.append(NextStep(f"{said}this {how}{blocked}.", [resume]))
    for e in uncertain:
        steps.append(_uncertain(rid, e))
    return steps


def _uncertain(rid: str, e: LedgerEntry) -> NextStep:
    cid = shlex.quote(e.call_id)
    # A call id is the agent's word: one that begins with '-' would read as an option (-C elsewhere), so
    # then the options come first and '--' ends them.
    if cid.startswith("-") or rid.startswith("-"):
        resolve = [f"sandbox call resolve --status {outcome} -- {rid} {cid}" for outcome in ("succeeded", "failed")]
        approve = f"sandbox approve -- {rid} {cid}"
    else:
        resolve = [f"sandbox call resolve {rid} {cid} --status {outcome}" for outcome in ("succeeded", "failed")]
        approve = f"sandbox approve {rid} {cid}"
    decision = classify(e)
    said = f"Call {e.call_id} ({e.tool_name}) is uncertain ({decision}): it started and its end was never recorded."
    check = "Once you checked what it did, record the outcome (either command)."
    if e.approval is not None and e.approval.value == "denied":
        return NextStep(
            f"{said} It is blocked: the agent's retry of it is refused until you approve it. {check} Or let the agent "
            "run it again:",
            [*resolve, approve],
            e.call_id,
        )
    if e.approval is not None and e.approval.value == "approved":
        return NextStep(f"{said} You approved it: the agent may run it again. {check}", resolve, e.call_id)
    return NextStep(f"{said} {check}", resolve, e.call_id)


def _interrupted(notes: Sequence[Mapping[str, object]], entries: list[LedgerEntry]) -> str | None:
    """How the newest agent session ended, when that was an interruption no call came after."""
    why: str | None = None
    at: datetime.datetime | None = None
    for note in notes:
        said = note.get("interrupted")
        if _argv(note.get("agent_command")):
            why = None  # a session began: an earlier interruption is behind it
        elif isinstance(said, str) and said:
            why, at = said, moment(note.get("at"))
    if why is None or (at is not None and any(_began(e) > at for e in entries)):
        return None
    return why.removeprefix("interrupted: ")


def _after(at: datetime.datetime | None, e: LedgerEntry) -> bool:
    """True when ``at`` (a session's start) is after call ``e`` started."""
    return at is not None and at > _began(e)


def _began(e: LedgerEntry) -> datetime.datetime:
    began = e.started_at or e.created_at
    return began if began.tzinfo is not None else began.replace(tzinfo=datetime.timezone.utc)


def _argv(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(a, str) for a in value)


def moment(value: object) -> datetime.datetime | None:
    """A time from the ledger (a datetime, or ISO text as the fold keeps a note's), aware; None if none."""
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
