"""The fold: how a ledger's events become each call's state and the run's bookkeeping.

The store's ledger (:mod:`sandbox.store.ledger`) stores and reads events and caches their fold; this
module interprets them, and is handed to it (:data:`FOLD`). A call's status only moves forward
(planned < approved < started < uncertain < a terminal status), so any order of the same events
leaves each call in one consistent, terminal-wins state (``tests/reliability/test_ledger_fold_property.py``).

Every process that reads a ledger (a hook, ``status``, ``drop``) must fold it completely, so the
merge-back bookkeeping (which paths of the user's tree the sandbox wrote, the undo stack) is folded
here too, from the payload types in :mod:`sandbox.models.mergeback`, without importing the merge
package (issue 14).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import cast

from sandbox.models import (
    Approval,
    CallStatus,
    CompensationLink,
    DriftRecord,
    Event,
    EventKind,
    LedgerEntry,
    LedgerState,
    MergebackData,
    UndoItem,
)
from sandbox.models.payloads import (
    ApplyFinishData,
    CallFinishData,
    CheckpointLogged,
    NoteLogged,
    ResumedData,
    RollbackFilesData,
    RollbackSessionLogged,
    view,
)

TERMINAL_STATUSES = frozenset(
    {CallStatus.succeeded, CallStatus.failed, CallStatus.not_run, CallStatus.interrupted, CallStatus.violation}
)
#: The ``data`` keys of a ``call_failed`` event that make the call interrupted or a violation.
FAILED_MARKS = {"interrupted": CallStatus.interrupted, "violation": CallStatus.violation}
#: How far along each status is: a call's status never moves to a lower rank.
STATUS_RANK = {
    CallStatus.planned: 0,
    CallStatus.approved: 1,
    CallStatus.started: 2,
    CallStatus.uncertain: 3,
    CallStatus.succeeded: 4,
    CallStatus.failed: 4,
    CallStatus.not_run: 4,
    CallStatus.interrupted: 4,
    CallStatus.violation: 4,
}
#: Event kinds whose events are also kept in the fold, in ledger order (``FoldData.<kind>``).
LOGGED_KINDS = frozenset(
    {EventKind.checkpoint, EventKind.rollback_session, EventKind.drift, EventKind.note, EventKind.compensation}
)
#: Event kinds that change what the sandbox wrote into a working tree (see :func:`fold_mergeback`).
MERGEBACK_KINDS = frozenset({EventKind.apply_finished, EventKind.undo, EventKind.redo})
_FINISH_KINDS = frozenset(
    {EventKind.call_succeeded, EventKind.call_failed, EventKind.call_resolved, EventKind.call_not_run}
)


class RunFold:
    """The run's fold, as the store's ledger takes it (:class:`sandbox.store.ledger.Fold`)."""

    def fork(self, state: LedgerState) -> LedgerState:
        """A copy of ``state`` that :meth:`event` may change (see :func:`fork_state`)."""
        return fork_state(state)

    def event(self, state: LedgerState, event: Event, oid: str | None) -> LedgerState:
        """Fold one event into ``state`` (see :func:`fold_event`)."""
        return fold_event(state, event, oid)


#: The fold every run's ledger is opened with.
FOLD = RunFold()


def fork_state(state: LedgerState) -> LedgerState:
    """A copy of ``state`` that :func:`fold_event` may change without touching the original.

    Containers are copied one level deep (a pointer per item, still O(ledger) but cheap) and entries
    are copied only when an event changes them (:func:`writable`), so extending a fold copies
    O(changed calls) entries: a deep copy of the whole state per call made recording grow with the
    length of the run.
    """
    new = state.model_copy()
    new.calls = dict(state.calls)
    new.order = list(state.order)
    new.event_ids = set(state.event_ids)
    data = state.data
    new.data = data.model_copy(
        update={
            "user_paths": dict(data.user_paths),
            "undo_stack": list(data.undo_stack),
            "checkpoint": list(data.checkpoint),
            "rollback_session": list(data.rollback_session),
            "drift": list(data.drift),
            "note": list(data.note),
            "compensation": list(data.compensation),
            "sessions": dict(data.sessions),
        }
    )
    return new


def writable(state: LedgerState, call_id: str) -> LedgerEntry | None:
    """The call's entry, copied into ``state`` first so older states sharing it stay unchanged."""
    entry = state.calls.get(call_id)
    if entry is not None:
        entry = state.calls[call_id] = entry.model_copy(deep=True)
    return entry


def fold_event(state: LedgerState, event: Event, oid: str | None) -> LedgerState:
    """Fold one event into the state (mutates and returns ``state``).

    Status only moves forward (planned < approved < started < uncertain < succeeded/failed), so
    any order of the same events leaves each call in one consistent, terminal-wins state.
    """
    if state.foreign is not None and not event.own():
        state.foreign += 1  # a repeated one too: whoever wrote it is not this clone
    if event.event_id in state.event_ids:
        if oid is not None:
            state.tip = oid  # a repeated event changes nothing, but the ledger's next append goes after it
        return state
    state.event_ids.add(event.event_id)
    state.count += 1
    state.tip = oid
    if _other_clones_tree(state, event):
        return state  # an apply/undo/redo in another clone's tree: nothing of this clone's
    entry = writable(state, event.call_id) if event.call_id else None
    if event.call_id and entry is None and event.call is not None:
        entry = _new_entry(state, event, event.call_id)
    if event.kind == EventKind.run_started and event.run is not None:
        state.run = event.run
        state.head = event.run.base
    elif entry is None or not _fold_call_event(state, entry, event):
        _fold_run_event(state, event)
    if event.kind in MERGEBACK_KINDS:
        fold_mergeback(state, event, lambda call_id: writable(state, call_id))
    return state


def _new_entry(state: LedgerState, event: Event, call_id: str) -> LedgerEntry:
    """The entry of a call first seen in ``event`` (which carries its spec), added to ``state``."""
    spec = event.call
    assert spec is not None
    entry = LedgerEntry(
        call_id=call_id,
        step_id=spec.step_id,
        tool_name=spec.tool_name,
        input_hash=spec.input_hash,
        input_ref=spec.input_ref,
        input=spec.input,
        status=CallStatus.planned,
        idempotency=spec.idempotency,
        replay_policy=spec.replay_policy,
        side_effects=list(spec.side_effects),
        summary=spec.summary,
        compensation=spec.compensation,
        agent_session=spec.agent_session,
        epoch=event.epoch,
        seq=len(state.order) + 1,
        created_at=event.at,
    )
    state.calls[call_id] = entry
    state.order.append(call_id)
    return entry


def _advance(entry: LedgerEntry, status: CallStatus) -> None:
    """Move the call to ``status`` unless it is further along (a terminal status stays)."""
    if entry.status in TERMINAL_STATUSES and status not in TERMINAL_STATUSES:
        return
    if STATUS_RANK[status] >= STATUS_RANK[entry.status]:
        entry.status = status


def _fold_call_event(state: LedgerState, entry: LedgerEntry, event: Event) -> bool:
    """Fold an event of the call ``entry``; False for a kind that is the run's, not the call's."""
    kind = event.kind
    if kind == EventKind.call_planned:
        _advance(entry, CallStatus.planned)
    elif kind == EventKind.call_approved:
        if event.own():  # an approval another clone recorded (anyone could write it) approves nothing here
            entry.approval = Approval.approved
            _advance(entry, CallStatus.approved)
    elif kind == EventKind.call_denied:
        entry.approval = Approval.denied
        entry.denial_reason = event.reason
    elif kind == EventKind.call_started:
        if event.procs is not None:
            entry.session = entry.session or event.procs.token
            if entry.agent_session:
                state.data.sessions[entry.agent_session] = event.procs.token  # the latest: a resumed agent session
        _advance(entry, CallStatus.started)
        entry.started_at = entry.started_at or event.at
        entry.epoch = event.epoch
    elif kind in _FINISH_KINDS:
        _fold_finish(state, entry, event)
    elif kind == EventKind.call_uncertain:
        _advance(entry, CallStatus.uncertain)
    elif kind == EventKind.drift:
        # What a killed call wrote, found at resume, is that call's change (booked_to); logged as the run's too.
        if event.commit and event.data.get("booked_to") == entry.call_id and not entry.commit:
            entry.commit = event.commit
            entry.parent_commit = event.parent_commit
            entry.files = list(event.files)
            state.head = event.commit
        return False
    elif kind in (EventKind.undo, EventKind.redo):
        # Whether the call is still applied to the user's tree is merge-back's (fold_mergeback).
        entry.undone = kind == EventKind.undo
        if event.commit:  # an undo or redo in the run's worktree moved its head
            state.head = event.commit
    else:
        return False
    return True


def _finish_status(event: Event, data: CallFinishData) -> CallStatus:
    """The terminal status a finishing event (its ``data`` viewed) gives its call."""
    kind = event.kind
    if kind == EventKind.call_resolved:
        status = CallStatus(data.get("status", CallStatus.failed.value))
    elif kind == EventKind.call_not_run:
        status = CallStatus.not_run
    else:
        status = CallStatus.succeeded if kind == EventKind.call_succeeded else CallStatus.failed
    if kind == EventKind.call_failed:
        status = next((s for mark, s in FAILED_MARKS.items() if data.get(mark)), status)
    return status


def _fold_finish(state: LedgerState, entry: LedgerEntry, event: Event) -> None:
    """Fold a call's end (succeeded, failed, resolved, not run): the first terminal status wins."""
    data = view(event.data, CallFinishData)  # once per event: the fold runs in every process that reads a ledger
    status = _finish_status(event, data)
    # A call the agent ran although it was refused: the evidence of it outranks the refusal.
    overrides = status == CallStatus.violation and entry.status == CallStatus.not_run
    if entry.status in TERMINAL_STATUSES and not overrides:
        return
    entry.status = status
    entry.finished_at = event.at
    ran = data.get("ran_ms")
    if ran is not None and ran >= 0:
        # The agent says how long the tool itself ran: it started after the wait at the agent's
        # permission prompt (the call's created_at is when the agent asked).
        began = event.at - datetime.timedelta(milliseconds=ran)
        entry.started_at = max(began, entry.started_at or began)
    entry.result_ref = event.result_ref
    entry.result = event.result
    entry.error = event.error
    entry.error_detail = event.error_detail
    entry.error_ref = event.error_ref
    if event.commit:
        entry.commit = event.commit
        entry.parent_commit = event.parent_commit
        entry.files = list(event.files)
        state.head = event.commit


def _other_clones_tree(state: LedgerState, event: Event) -> bool:
    """True for a merge-back event (apply, or undo/redo in the user's tree) this clone did not write.

    A run travels (``sandbox push`` / ``fetch``, plain git), its ledger with it; what was applied to
    the tree of the clone that applied it says nothing about this clone's tree, and an event anyone
    could have written must never drive a write into it. Only an event whose MAC verifies under this
    clone's key is this clone's (:mod:`sandbox.store.provenance`): the ``clone`` it names is a claim.
    """
    if event.kind not in MERGEBACK_KINDS or event.own():
        return False
    return event.kind == EventKind.apply_finished or event.data.get("target") == "user"


def _fold_run_event(state: LedgerState, event: Event) -> None:
    """Fold an event of the run as a whole (or of a call this ledger never saw begin)."""
    kind = event.kind
    if kind == EventKind.resumed:
        resumed = view(event.data, ResumedData)
        state.epoch = max(state.epoch, int(resumed.get("epoch", state.epoch + 1)))
    elif kind in (EventKind.head_moved, EventKind.rollback_files, EventKind.undo, EventKind.redo):
        if event.commit:
            state.head = event.commit
        if kind == EventKind.rollback_files:
            _fold_rollback_files(state, event)
    elif kind == EventKind.apply_finished:
        for call_id in view(event.data, ApplyFinishData).get("calls", []):
            entry = writable(state, call_id)
            if entry is not None:
                entry.applied = True
    elif kind == EventKind.run_ended:
        state.ended = True
    elif kind == EventKind.run_dropped:
        state.dropped = True
    if kind in LOGGED_KINDS:
        log_event(state, event)


def _fold_rollback_files(state: LedgerState, event: Event) -> None:
    """Mark the calls a ``rollback --files`` took out of the run's head; those it kept (or brought back) are in."""
    data = view(event.data, RollbackFilesData)
    kept = data.get("kept_calls")
    out = set(data.get("undone_calls", []))
    if kept is not None:  # else written before rollbacks named the calls they keep
        out |= {c for c in state.order if state.calls[c].commit} - set(kept)
    for call_id in state.order:
        back = call_id in out or (kept is None and state.calls[call_id].rolled_back)
        if state.calls[call_id].rolled_back != back and state.calls[call_id].commit:
            rolled = writable(state, call_id)
            if rolled is not None:
                rolled.rolled_back = back


def fold_mergeback(state: LedgerState, event: Event, writable: Callable[[str], LedgerEntry | None]) -> None:
    """Fold an ``apply_finished``/``undo``/``redo`` event's merge-back bookkeeping into ``state.data``.

    Each event names its paths' new :class:`~sandbox.models.UserPathRecord` (or drops them);
    ``unapplied`` calls are no longer applied; an undo pushes its call on the undo stack and a redo
    takes it off. ``writable(call_id)`` is the call's entry, copied so older states sharing it stay
    unchanged.
    """
    data = MergebackData.model_validate(event.data)
    if event.call_id and event.kind in (EventKind.undo, EventKind.redo) and data.target == "user":
        undone = writable(event.call_id)
        if undone is not None:  # an undo in the user's tree takes the call out of it, a redo puts it back
            undone.applied = event.kind == EventKind.redo and not data.partly
    user_paths = state.data.user_paths
    for item in data.paths:
        record = item.record()
        if record is None:
            user_paths.pop(item.path, None)
        else:
            user_paths[item.path] = record
    for call_id in data.unapplied:
        entry = writable(call_id)
        if entry is not None:
            entry.applied = False
    if event.kind == EventKind.redo and not event.call_id and data.target == "user":
        for call_id in data.calls:  # a redo of a whole apply: its calls are applied again
            entry = writable(call_id)
            if entry is not None:
                entry.applied = True
    if event.call_id and event.kind in (EventKind.undo, EventKind.redo):
        stack = state.data.undo_stack
        if event.kind == EventKind.undo:
            stack.append(
                UndoItem(
                    call_id=event.call_id,
                    target=data.target,
                    event_id=event.event_id,
                    changed=data.changed,
                    partial=data.partial,
                )
            )
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].call_id == event.call_id:
                    del stack[i]
                    break


def log_event(state: LedgerState, event: Event) -> None:
    """Append an event of a :data:`LOGGED_KINDS` kind to its list in ``state.data``."""
    item = {"event_id": event.event_id, "at": event.at.isoformat(), **event.data}
    if event.kind == EventKind.drift:
        state.data.drift.append(DriftRecord.model_validate(item))
    elif event.kind == EventKind.compensation:
        state.data.compensation.append(CompensationLink.model_validate(item))
    elif event.kind == EventKind.checkpoint:
        # Kept as stored, not viewed: a value of another type stays as read (a newer sandbox's ledger,
        # tests/run/test_fold.py), and each reader of these lists checks the values it reads.
        state.data.checkpoint.append(cast(CheckpointLogged, item))
    elif event.kind == EventKind.rollback_session:
        state.data.rollback_session.append(cast(RollbackSessionLogged, item))
    else:
        state.data.note.append(cast(NoteLogged, item))
