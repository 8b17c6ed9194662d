"""Undo and redo: take the run's last agent change back out, or bring the last undone one back.

Undo picks the newest call with file changes that is not undone yet:

* if the sandbox wrote any of its paths into the user's tree (an apply), it is undone **there**:
  each path the sandbox wrote goes back to its before state, but only where the user's file is
  still exactly what the sandbox wrote; any other user change refuses the whole undo;
* otherwise it is undone **in the sandbox**: the run's head moves back past the call's commit (a
  new ``undo`` event names the new head and keeps the old one reachable) and its paths are restored
  in the worktree, refused where the worktree holds changes no call recorded.

Redo reverses the newest undo, in the same place. Both are journaled exactly like an apply, and are
forward ledger events: nothing is erased. When an interrupted apply, undo or redo left a journal,
:func:`undo` rolls that operation back first (:func:`roll_back`).
"""

from __future__ import annotations

import os
from typing import Any

import pygit2

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.merge import decide, mergeback, planning, select, treeops, writing
from sandbox.merge.mergeback import ApplyConflict
from sandbox.merge.planned import PlannedPath, conflict_report, partial_of, prior_records, state_record
from sandbox.models import (
    ApplyJournal,
    ConflictReport,
    EventKind,
    LedgerEntry,
    LedgerState,
    PartialApply,
    PathRecordUpdate,
    UndoReport,
    UserPathRecord,
)
from sandbox.run.run import Run
from sandbox.store import journal, objects, trailers
from sandbox.store.journal import State
from sandbox.store.project import Project


class NothingToUndoError(SandboxError):
    """The run has no recorded change left to undo."""


class NothingToRedoError(SandboxError):
    """No undo of the run is left to redo."""


class UndoConflict(ApplyConflict):
    """Some paths changed since the agent's change; nothing was written. ``report`` lists them."""


def _pending_dirs(run: Run) -> list[str]:
    dirs = []
    for directory in (run.user_workdir, run.worktree):
        pending = journal.load(run.project, directory)
        if pending is not None and pending.run_id == run.run_id:
            dirs.append(directory)
    return dirs


def carried(state: LedgerState, entry: LedgerEntry) -> list[str]:
    """The paths of ``entry`` whose current state in the user's tree the sandbox wrote for it."""
    user_paths = state.data.user_paths
    return [f.path for f in entry.files if f.path in user_paths and entry.call_id in user_paths[f.path].calls]


def undo(
    run: Run,
    lock_timeout: float = 30.0,
    *,
    call: str | None = None,
    in_run: bool = False,
    force: bool = False,
) -> UndoReport:
    """Take back the user's last operation in their tree (an apply or a redo, partial ones included).

    ``call``: take back that one call instead (from the user's tree; with ``in_run`` from the run).
    ``in_run``: take the agent's newest call (or ``call``) out of the run itself; a call whose change
    is not in the user's tree is the agent's unapplied work, taken out only with ``force`` (a redo
    brings it back). An interrupted apply, undo or redo is rolled back first.
    """
    for directory in _pending_dirs(run):
        report = roll_back(run.project, directory, lock_timeout)
        if report is not None:
            return report
    state = run.verified_state()
    if in_run:
        entry = _named(run, state, call) if call else _newest_in_run(run, state)
        if entry.call_id in select.undone_in_run(state):
            raise NothingToUndoError(
                f"Call {entry.call_id} is already out of run {run.run_id}; 'sandbox redo {run.run_id}' brings it back."
            )
        if not force and not (entry.applied or carried(state, entry)):
            raise UnappliedWorkError(
                f"Call {entry.call_id} ({entry.tool_name}) is the agent's work that is not in your tree; taking it out "
                f"of run {run.run_id} needs --force ('sandbox undo --in-run --force'), and 'sandbox redo' brings it "
                "back. To keep it, apply it first ('sandbox apply --call "
                f"{entry.seq}')."
            )
        return _move(run, entry, "undo", "sandbox", lock_timeout)
    if call:
        entry = _named(run, state, call)
        if not carried(state, entry):
            raise NothingToUndoError(
                f"Call {entry.call_id} ({entry.seq}) is not in your tree: nothing of it to undo there. To take it out "
                f"of the run itself, use 'sandbox undo --in-run --call {entry.seq}'."
            )
        return _move(run, entry, "undo", "user", lock_timeout)
    ops = treeops.stack(run, state)
    if ops.done:
        return treeops.move(run, ops.done[-1], "undo", lock_timeout)
    for call_id in reversed(state.order):
        entry = state.calls[call_id]
        if entry.commit and entry.files and carried(state, entry):
            # Written by an older sandbox, whose applies did not record what they wrote: call by call.
            return _move(run, entry, "undo", "user", lock_timeout)
    raise NothingToUndoError(
        f"Nothing of run {run.run_id} is in your tree to undo (no apply or redo stands). To take the agent's "
        f"newest call out of the run itself, use 'sandbox undo --in-run --force {run.run_id}'."
    )


class UnappliedWorkError(SandboxError):
    """Taking the call out of the run would discard the agent's unapplied work; needs ``--force``."""


def _named(run: Run, state: LedgerState, call: str) -> LedgerEntry:
    entry = select.resolve_name(state, run.run_id, call)
    if not entry.commit or not entry.files:
        raise NothingToUndoError(f"Call {entry.call_id} ({entry.tool_name}) changed no files: nothing to undo.")
    return entry


def _newest_in_run(run: Run, state: LedgerState) -> LedgerEntry:
    for entry in reversed(select.live_calls(state)):
        if entry.files:
            return entry
    raise NothingToUndoError(f"Run {run.run_id} has no call left to take out of the run.")


def redo(run: Run, lock_timeout: float = 30.0) -> UndoReport:
    """Redo the newest undo: an operation in the user's tree, or one call (in the tree or the run)."""
    for directory in _pending_dirs(run):
        journal.ensure_none_pending(run.project, directory)
    state = run.verified_state()
    ops = treeops.stack(run, state)
    newest_op = ops.undone[-1] if ops.undone else None
    for item in reversed(state.data.undo_stack):
        entry = state.calls.get(item.call_id)
        if entry is not None and entry.undone:
            # Both places come from the stack's one walk of the ledger (an event it did not see: -1).
            if newest_op is not None and newest_op.position > ops.positions.get(item.event_id or "", -1):
                break
            return _move(
                run, entry, "redo", item.target or "sandbox", lock_timeout, only=item.changed, partial=item.partial
            )
    if newest_op is not None:
        return treeops.move(run, newest_op, "redo", lock_timeout)
    raise NothingToRedoError(f"Run {run.run_id} has no undone change to redo.")


def _move(
    run: Run,
    entry: LedgerEntry,
    op: str,
    target: str,
    lock_timeout: float,
    only: list[str] | None = None,
    partial: list[PathRecordUpdate] | None = None,
) -> UndoReport:
    root = run.user_workdir if target == "user" else run.worktree
    with journal.tree_lock(run.project, root, lock_timeout), run.lock(lock_timeout):
        faults.point(f"{op}.after_lock")
        journal.ensure_none_pending(run.project, root)
        state = run.verified_state()
        try:
            if target == "user":
                mergeback.check_in_progress(root)
                return _move_user(run, state, entry, op, root, only, partial or [])
            return _move_sandbox(run, state, entry, op, root)
        except (OSError, pygit2.GitError) as exc:
            # Writes to the tree turn their own errors into WriteFailedError (writing.execute):
            # what reaches here failed while planning (reading files, storing the new commit).
            what = journal.describe(exc) if isinstance(exc, OSError) else str(exc)
            raise journal.WriteFailedError(
                f"The {op} of run {run.run_id} failed before writing anything ({what}); nothing was written. "
                f"Fix the cause (free some space, if the disk is full), then run 'sandbox {op} {run.run_id}' again."
            ) from exc


def _states(entry: LedgerEntry, op: str) -> dict[str, tuple[State, State]]:
    out = {}
    for f in entry.files:
        before = journal.entry_state(f.before_mode, f.before_hash)
        after = journal.entry_state(f.after_mode, f.after_hash)
        out[f.path] = (after, before) if op == "undo" else (before, after)
    return out


def _refuse(run: Run, entry: LedgerEntry, op: str, target: str, root: str, planned: list[PlannedPath]) -> None:
    conflicts = [p for p in planned if p.action == "conflict"]
    if not conflicts:
        return
    for p in conflicts:
        if p.obstacle:
            continue  # the obstacle's own reason (a read-only file, a directory in the way) says it best
        if target == "user":
            p.reason = "your file changed since the sandbox wrote it"
            p.hint = "put it back as it was, or reverse this change by hand"
        else:
            p.reason = "the worktree file differs from what the run recorded (a change no call recorded)"
            p.hint = "record or discard that change in the worktree first"
    report = UndoReport(
        op=op,
        run=run.run_id,
        call=entry.call_id,
        target=target,
        target_dir=root,
        calls=[entry.call_id],
        conflicts=[_labelled(op, p) for p in conflicts],
        refused=True,
    )
    first = conflicts[0]
    what = "are in the way" if all(p.obstacle for p in conflicts) else "changed"
    raise UndoConflict(
        f"Cannot {op} call {entry.call_id}: {len(conflicts)} path(s) {what} ({first.path}: {first.reason}); "
        "nothing was written.",
        report,
    )


def _labelled(op: str, p: PlannedPath) -> ConflictReport:
    """The conflict with its versions named for what they are, whichever way the move goes.

    An undo moves a path from the agent's version back to the original, so its planned step runs
    agent -> original: ``base`` (the original, what the undo would restore) is the step's *after*
    state and ``agent`` its *before* state. A redo runs original -> agent, as an apply does.
    """
    report = conflict_report(p)
    if op == "undo":
        report.base, report.agent = report.agent, report.base
    return report


def _journal(
    run: Run,
    op: str,
    target: str,
    root: str,
    entry: LedgerEntry,
    writes: list[PlannedPath],
    event: Any,
    old_head: str | None = None,
    new_head: str | None = None,
) -> ApplyJournal:
    entries = writing.journal_entries(run.repo, root, writes)
    return ApplyJournal(
        op=op,
        run_id=run.run_id,
        target=target,
        target_dir=root,
        calls=[entry.call_id],
        entries=entries,
        event=event,
        old_head=old_head,
        new_head=new_head,
        pid=os.getpid(),
        token=journal.new_token(),
    )


def _user_moves(
    state: LedgerState, entry: LedgerEntry, op: str, only: list[str] | None, undone_partial: list[PathRecordUpdate]
) -> tuple[list[str], dict[str, tuple[State, State]], dict[str, PartialApply], dict[str, PathRecordUpdate]]:
    """The paths an undo or redo of ``entry`` moves in the user's tree, each from and to which state;
    the partly applied paths an undo takes out, and those a redo writes again."""
    user_paths = state.data.user_paths
    states = _states(entry, op)
    partial: dict[str, PartialApply] = {}
    again: dict[str, PathRecordUpdate] = {}
    if op == "undo":
        chosen = carried(state, entry)
        for path in chosen:
            taken = partial_of(user_paths.get(path))
            if taken is not None and entry.call_id in taken.calls:
                # Only some hunks were taken: exactly those go back out, for all the calls they came from.
                partial[path] = taken
                record = user_paths[path]
                wrote = journal.entry_state(record.mode, record.oid)
                states[path] = (wrote, journal.entry_state(taken.base_mode, taken.base_oid))
    else:
        chosen = [p for p in (only if only is not None else list(states)) if p in states]
        for update in undone_partial:
            taken = update.partial
            assert taken is not None
            again[update.path] = update
            wrote = journal.entry_state(update.mode, update.oid)
            states[update.path] = (journal.entry_state(taken.base_mode, taken.base_oid), wrote)
    return chosen, states, partial, again


def _move_user(
    run: Run,
    state: LedgerState,
    entry: LedgerEntry,
    op: str,
    root: str,
    only: list[str] | None,
    undone_partial: list[PathRecordUpdate],
) -> UndoReport:
    """Undo or redo ``entry`` in the user's tree; ``undone_partial``: for a redo, the records of the
    partly applied paths (``apply --hunks``) its undo took back, which the redo writes again."""
    user_paths = state.data.user_paths
    chosen, states, partial, again = _user_moves(state, entry, op, only, undone_partial)
    moves = [(path, states[path][0], states[path][1], entry.call_id) for path in chosen]
    planned = planning.plan_moves(root, moves, user_tree=True)
    for p in planned:
        record = user_paths.get(p.path) or UserPathRecord()
        if op == "undo" and p.action == "write" and journal.entry_state(record.mode, record.oid) != p.user.state:
            decide.conflict(p)  # the sandbox wrote something else there (a 3-way merge)
    _refuse(run, entry, op, "user", root, planned)
    writes = [p for p in planned if p.action == "write"]
    records = []
    for p in planned:
        if p.path in again:
            records.append(again[p.path].to_data())  # the partial apply exactly as it was before the undo
            continue
        gone = set(partial[p.path].calls) if p.path in partial else {entry.call_id}
        calls = [c for c in (user_paths.get(p.path) or UserPathRecord()).calls if c not in gone]
        if op == "redo":
            calls.append(entry.call_id)
        dst = p.steps[0].after
        records.append(PathRecordUpdate.of(p.path, state_record(dst, dst, calls)).to_data())
    event = run.new_event(
        EventKind.undo if op == "undo" else EventKind.redo,
        entry.call_id,
        data={
            "target": "user",
            "changed": [p.path for p in planned],
            # Records of the partly applied paths taken back, so that a redo writes them again.
            "partial": [u.to_data() for u in prior_records(user_paths, sorted(partial))],
            "partly": bool(again),
            "paths": records,
            "prior": [u.to_data() for u in prior_records(user_paths, [p.path for p in planned])],
        },
    )
    j = _journal(run, op, "user", root, entry, writes, event)
    written = writing.execute(run, j) if writes else _record_only(run, j)
    return UndoReport(
        op=op,
        run=run.run_id,
        call=entry.call_id,
        target="user",
        target_dir=root,
        calls=[entry.call_id],
        **_written(op, written),
        skipped=[p.path for p in planned if p.path not in written],
        reasons={
            **{p.path: p.reason for p in planned if p.action == "skip"},
            **{path: f"only the hunks taken with --hunks, of {', '.join(t.calls)}" for path, t in partial.items()},
            **{path: "the hunks taken with --hunks again" for path in again},
        },
    )


def _written(op: str, written: list[str]) -> dict[str, list[str]]:
    """Report fields: an undo restored the paths it wrote, a redo applied them again."""
    return {"restored": written} if op == "undo" else {"applied": written}


def _record_only(run: Run, j: ApplyJournal) -> list[str]:
    """Nothing to write (every path already there): the event alone records the undo or redo."""
    faults.point(f"{j.op}.before_ledger")
    run.record_event(j.event)
    faults.point(f"{j.op}.after_ledger")
    return []


def _move_sandbox(run: Run, state: LedgerState, entry: LedgerEntry, op: str, root: str) -> UndoReport:
    repo = run.repo
    head = state.head
    assert head is not None
    head_tree = objects.commit_tree(repo, head)
    states = _states(entry, op)
    planned = planning.plan_moves(root, [(path, src, dst, entry.call_id) for path, (src, dst) in states.items()])
    for p in planned:
        if objects.lookup(repo, head_tree, p.path) != p.steps[0].before:
            decide.conflict(p, "a later call changed it in the run", "undo that call first")
    _refuse(run, entry, op, "sandbox", root, planned)
    new_tree = objects.edit_tree(repo, head_tree, {path: dst for path, (_src, dst) in states.items()})
    parent, child = entry.parent_commit, entry.commit
    if op == "undo" and head == child and parent and objects.commit_tree(repo, parent) == new_tree:
        new_head = parent  # exactly back past the call's commit
    elif op == "redo" and head == parent and child and objects.commit_tree(repo, child) == new_tree:
        new_head = child
    else:
        undone = trailers.UNDO if op == "undo" else trailers.REDO
        message = trailers.message(
            f"sandbox: {op} {entry.call_id}", [(trailers.RUN, run.run_id), (undone, entry.call_id)]
        )
        # Durable before the journal names it; its event follows the file writes (writing.execute).
        new_head = run.write_commit(new_tree, head, message)
    event = run.new_event(
        EventKind.undo if op == "undo" else EventKind.redo,
        entry.call_id,
        commit=new_head,
        parent_commit=head,
        data={"target": "sandbox", "changed": sorted(states), "old_head": head},
    )
    writes = [p for p in planned if p.action == "write"]
    j = _journal(run, op, "sandbox", root, entry, writes, event, old_head=head, new_head=new_head)
    written = writing.execute(run, j, keep=[head, new_head])
    return UndoReport(
        op=op,
        run=run.run_id,
        call=entry.call_id,
        target="sandbox",
        target_dir=root,
        calls=[entry.call_id],
        **_written(op, written),
        skipped=[p.path for p in planned if p.path not in written],
        head=new_head,
    )


def _inverse(run: Run, j: ApplyJournal) -> Any:
    """The event recording the roll-back of a journaled operation whose own event was recorded."""
    kind = {"apply": EventKind.undo, "undo": EventKind.redo, "redo": EventKind.undo}[j.op]
    data: dict[str, Any] = {
        "target": j.target,
        "reverts": j.event.event_id,
        "changed": [e.path for e in j.entries],
    }
    if j.target == "user":
        data["paths"] = j.event.data.get("prior", [])
    if j.op == "apply":
        data["unapplied"] = j.event.data.get("newly", [])
    if j.op == "undo" and j.event.call_id is None:
        data["calls"] = j.event.data.get("unapplied", [])  # the undone apply's calls are applied again
    call_id = None if j.op == "apply" else j.event.call_id
    commit = j.old_head if j.target == "sandbox" else None
    return run.new_event(kind, call_id, commit=commit, parent_commit=j.new_head if commit else None, data=data)


def roll_back(project: Project, target_dir: str, lock_timeout: float = 30.0) -> UndoReport | None:
    """Reverse the interrupted operation journaled for ``target_dir``; None when none is pending.

    Each path goes back to its before state where it is at its after state. If the operation's
    event was already recorded, a forward event records the roll-back too.
    """
    with journal.tree_lock(project, target_dir, lock_timeout):
        j = journal.load(project, target_dir)
        if j is None:
            return None
        bad = journal.check(target_dir, j.entries)
        if bad:
            raise journal.TreeChangedError(
                f"Cannot roll back the interrupted {j.op}: {', '.join(bad[:5])} changed since; nothing was written."
            )
        run = Run.open(project, j.run_id)
        with run.lock(lock_timeout):
            state = run.state()
            recorded = j.event.event_id in state.event_ids
            if recorded and j.target == "sandbox" and state.head != j.new_head:
                raise SandboxError(
                    f"Run {run.run_id} moved on since the interrupted {j.op}; "
                    "finish it with 'sandbox apply --continue'."
                )
            written: list[str] = []
            try:
                journal.clear_temps(project, j, target_dir)
                temps = journal.temps_of(project, j)
                journal.play(
                    run.repo,
                    target_dir,
                    j.entries,
                    "rollback.after_file",
                    reverse=True,
                    on_write=written.append,
                    temps=temps,
                )
                if recorded:
                    run.record_event(_inverse(run, j), keep=[c for c in (j.old_head, j.new_head) if c])
                if j.target == "sandbox":
                    run.sync_head()
                journal.remove(project, target_dir)
            except OSError as exc:
                raise journal.WriteFailedError(
                    f"Could not roll back the interrupted {j.op} of run {run.run_id} ({journal.describe(exc)}); the "
                    f"journal is kept: fix the cause, then run 'sandbox undo {run.run_id}' again, or "
                    f"'sandbox apply --continue {run.run_id}' to finish the {j.op} instead."
                ) from exc
    return UndoReport(
        op="undo",
        run=j.run_id,
        call=None if j.op == "apply" else j.event.call_id,
        target=j.target,
        target_dir=target_dir,
        calls=j.calls,
        restored=written,
        skipped=[e.path for e in j.entries if e.path not in written],
        recovered=f"rolled back the interrupted {j.op}",
    )
