"""The user's operations in their tree, as ``sandbox undo`` and ``redo`` walk them.

An *operation* is one apply (whole, partial, 3-way or some hunks) or the redo of one, in this
clone's tree. Each records what it wrote, path by path, from the user's state to the new one
(``MergebackData.moves``), so ``sandbox undo`` puts back exactly what the user had, whatever the
calls were, and never touches the run: the agent's work stays in the run, to be applied again.
An undo of an operation is an ``undo`` event with no call that ``reverts`` it; its redo is a
``redo`` event that ``reverts`` the undo (the same shape as the roll-back of an interrupted
operation, :func:`sandbox.merge.undo.roll_back`). A new apply starts a new redo history.

The stack is read from the ledger's events of this clone (undo and redo are rare; the ledger is
the one place the order of operations is kept).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.merge import mergeback, planning, writing
from sandbox.merge.mergeback import ApplyConflict
from sandbox.merge.planned import PlannedPath, conflict_report
from sandbox.models import (
    ApplyJournal,
    Event,
    EventKind,
    LedgerState,
    MergebackData,
    PathMove,
    UndoReport,
)
from sandbox.run.run import Run
from sandbox.store import journal


class OperationConflict(ApplyConflict):
    """Some paths changed since the operation wrote them; nothing was written. ``report`` lists them."""


@dataclass
class Operation:
    """One apply (or redo of one) in the user's tree, in effect or undone."""

    event_id: str
    #: The apply's event (for a redo: the apply it brings back).
    origin: Event
    data: MergebackData
    #: Its place in the ledger's events: its own event's, or for an undone one the undo's.
    position: int
    #: For an undone operation: the undo event that took it back.
    undone_by: str | None = None

    @property
    def moves(self) -> list[PathMove]:
        """What it wrote, path by path."""
        return self.data.moves

    @property
    def selected(self) -> list[str]:
        """The calls it was asked to take."""
        return list(self.data.selected) or list(self.data.calls)


@dataclass
class Stack:
    """The operations in effect (oldest first) and the undone ones a redo can bring back (newest last)."""

    done: list[Operation] = field(default_factory=list)
    undone: list[Operation] = field(default_factory=list)
    #: Every event's place in the ledger (by event id), from the same walk: redo compares an undone
    #: call's undo with the newest undone operation without walking the ledger again.
    positions: dict[str, int] = field(default_factory=dict)


def _ours(state: LedgerState, event: Event) -> bool:
    # This clone's only when its MAC verifies (sandbox.store.provenance), whatever clone it names.
    return event.own()


#: The stack last built for each open run, under the ledger tip and clone it was built for. A commit
#: id names its whole chain, so one tip has one stack: undo and redo build it twice per command (to
#: choose, then under the locks to check nothing changed), and the ledger is walked once.
_BUILT: weakref.WeakKeyDictionary[Run, tuple[tuple[str | None, str | None], Stack]] = weakref.WeakKeyDictionary()


def stack(run: Run, state: LedgerState) -> Stack:
    """The operations of this clone's tree, from the run's ledger up to ``state``'s tip (read once per tip)."""
    key = (state.tip, state.clone)
    found = _BUILT.get(run)
    if found is None or found[0] != key:
        found = (key, _build(run, state))
        _BUILT[run] = found
    built = found[1]
    # The lists are the caller's; operations and positions are read-only.
    return Stack(list(built.done), list(built.undone), built.positions)


def _build(run: Run, state: LedgerState) -> Stack:
    out = Stack()
    by_id: dict[str, Operation] = {}
    # The events up to the fold's own tip, not the ledger's newest: one appended meanwhile is not in ``state``.
    events = run.events(state.tip) if state.tip is not None else []
    for position, (_oid, event) in enumerate(events):
        out.positions[event.event_id] = position
        if event.event_id not in state.event_ids or not _ours(state, event):
            continue
        data = MergebackData.model_validate(event.data or {})
        if event.kind == EventKind.apply_finished:
            # An apply recorded before applies named their moves is undone call by call (undo.py).
            if "moves" in (event.data or {}) and (data.moves or data.paths):
                op = Operation(event.event_id, event, data, position)
                out.done.append(op)
                by_id[op.event_id] = op
                out.undone.clear()  # a new apply starts a new redo history, as in an editor
        elif event.call_id is None and data.target == "user" and data.reverts:
            if event.kind == EventKind.undo:
                found = next((o for o in out.done if o.event_id == data.reverts), None)
                if found is not None:
                    out.done.remove(found)
                    found.undone_by, found.position = event.event_id, position
                    out.undone.append(found)
            elif event.kind == EventKind.redo:
                back = next((o for o in out.undone if o.undone_by == data.reverts), None)
                if back is not None:
                    out.undone.remove(back)
                    again = Operation(event.event_id, back.origin, back.data, position)
                    out.done.append(again)
    return out


def _plan(run: Run, moves: list[tuple[str, journal.State, journal.State]], label: str) -> list[PlannedPath]:
    return planning.plan_moves(run.user_workdir, [(p, src, dst, label) for p, src, dst in moves], user_tree=True)


def _refuse_conflicts(run: Run, kind: str, calls: list[str], planned: list[PlannedPath]) -> None:
    """Raise :class:`OperationConflict` (nothing written) when a path of the user's tree changed since."""
    root = run.user_workdir
    conflicts = [p for p in planned if p.action == "conflict"]
    if not conflicts:
        return
    for p in conflicts:
        if not p.obstacle:
            p.reason = (
                "your file changed since the sandbox wrote it"
                if kind == "undo"
                else "your file changed since the undo put it back"
            )
            p.hint = "put it back as it was, or take this change back by hand"
    reports = [conflict_report(p) for p in conflicts]
    if kind == "undo":
        for r in reports:
            r.base, r.agent = r.agent, r.base
    report = UndoReport(
        op=kind, run=run.run_id, target="user", target_dir=root, calls=calls, conflicts=reports, refused=True
    )
    first = conflicts[0]
    raise OperationConflict(
        f"Cannot {kind} the apply of {', '.join(calls) or 'run ' + run.run_id}: {len(conflicts)} path(s) "
        f"changed ({first.path}: {first.reason}); nothing was written.",
        report,
    )


def _event_data(op: Operation, kind: str) -> dict[str, object]:
    """The ``undo``/``redo`` event's data: what it reverts, the path records it leaves, its moves."""
    data = op.data
    changed = sorted({m.path for m in op.moves} | {u.path for u in data.paths})
    if kind == "undo":
        return {
            "target": "user",
            "reverts": op.event_id,
            "changed": changed,
            "paths": [u.to_data() for u in data.prior],
            "prior": [u.to_data() for u in data.paths],
            "unapplied": list(data.newly),
        }
    return {
        "target": "user",
        "reverts": op.undone_by,
        "changed": changed,
        "selected": list(data.selected),
        "calls": list(data.newly),
        "newly": list(data.newly),
        "paths": [u.to_data() for u in data.paths],
        "prior": [u.to_data() for u in data.prior],
        "moves": [m.model_dump(mode="json") for m in op.moves],
    }


def move(run: Run, op: Operation, kind: str, lock_timeout: float = 30.0) -> UndoReport:
    """Undo (``kind`` "undo") or redo one operation in the user's tree, all or nothing, journaled."""
    root = run.user_workdir
    with journal.tree_lock(run.project, root, lock_timeout), run.lock(lock_timeout):
        faults.point(f"{kind}.after_lock")
        journal.ensure_none_pending(run.project, root)
        mergeback.check_in_progress(root)
        state = run.verified_state()
        fresh = stack(run, state)
        pool = fresh.done if kind == "undo" else fresh.undone
        # Still the newest, not just still there: another process's apply (undo, redo) in between makes
        # another one the operation to take back, and one taken out of order would break the stack.
        if not pool or pool[-1].event_id != op.event_id:
            raise SandboxError(f"Run {run.run_id} changed meanwhile; run 'sandbox {kind} {run.run_id}' again.")
        moves = []
        for m in op.moves:
            before = journal.entry_state(m.before_mode, m.before_oid)
            after = journal.entry_state(m.after_mode, m.after_oid)
            moves.append((m.path, after, before) if kind == "undo" else (m.path, before, after))
        calls = op.selected
        planned = _plan(run, moves, calls[0] if calls else "")
        _refuse_conflicts(run, kind, calls, planned)
        event = run.new_event(EventKind.undo if kind == "undo" else EventKind.redo, data=_event_data(op, kind))
        writes = [p for p in planned if p.action == "write"]
        j = ApplyJournal(
            op=kind,
            run_id=run.run_id,
            target="user",
            target_dir=root,
            calls=calls,
            entries=writing.journal_entries(run.repo, root, writes),
            event=event,
            pid=os.getpid(),
            token=journal.new_token(),
        )
        if writes:
            written = writing.execute(run, j)
        else:
            faults.point(f"{kind}.before_ledger")
            run.record_event(event)
            faults.point(f"{kind}.after_ledger")
            written = []
    done = {"restored": written} if kind == "undo" else {"applied": written}
    return UndoReport(
        op=kind,
        run=run.run_id,
        target="user",
        target_dir=root,
        calls=calls,
        skipped=[p.path for p in planned if p.path not in written],
        reasons={p.path: p.reason for p in planned if p.action == "skip"},
        **done,
    )
