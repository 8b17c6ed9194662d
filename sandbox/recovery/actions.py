"""The three recovery actions. They are different things and never all called "undo":

* :attr:`RecoveryAction.rollback_files`: the run's worktree files back to a checkpoint's workspace
  commit, agent changes only, recorded as a forward event that moves the run's head (nothing is
  erased). It never touches the user's tree; changes already applied there are named, with the
  apply-level ``sandbox undo`` to take them out.
* :attr:`RecoveryAction.rollback_session`: the message history and run state back to a checkpoint.
  Files and the ledger's evidence stay as they are; the next resume note says what was rolled back
  and what the ledger still records after it.
* :attr:`RecoveryAction.compensate`: for an external side effect, runs the compensation the call
  registered (``{"argv": [...]}``) as its own recorded call with its own idempotency; it can
  itself end uncertain. Without one, it says plainly that the effect cannot be undone.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.models import CallStatus, EventKind, FileChange, LedgerEntry, LedgerState
from sandbox.run.checkpoint import CheckpointStore, StoredCheckpoint
from sandbox.store import convert, fsutil, objects, paths, trailers
from sandbox.store.capture import capture

if TYPE_CHECKING:
    from sandbox.confine.spawn import Isolation
    from sandbox.run.run import Run

faults.POINTS.update(
    {
        "recovery.rollback_files.after_worktree",
        "recovery.rollback_files.after_ledger",
        "recovery.rollback_session.before",
        "recovery.compensate.after_link",
    }
)


class RecoveryAction(str, enum.Enum):
    """The three recovery actions."""

    rollback_files = "rollback_files"
    rollback_session = "rollback_session"
    compensate = "compensate"


class RollbackRefusedError(SandboxError):
    """The worktree has changes no call recorded at paths the rollback would write."""


class NoCompensationError(SandboxError):
    """The call registered no compensation (or one the sandbox cannot run)."""


@dataclass
class RollbackFilesReport:
    """What ``rollback --files`` did."""

    checkpoint: str
    commit: str | None
    files: list[FileChange] = field(default_factory=list)
    undone_calls: list[str] = field(default_factory=list)
    applied_calls: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class RollbackSessionReport:
    """What ``rollback --session`` did: the session's messages and state to continue from."""

    checkpoint: str
    checkpoint_id: str
    messages: Any
    run_state: Any
    calls_after: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class CompensateReport:
    """What ``compensate`` did: the compensation call and how it ended."""

    call_id: str
    compensation_call: str
    entry: LedgerEntry
    returncode: int
    message: str = ""


def _ancestors(run: Run, commit: str, stop: str) -> set[str]:
    """The first-parent chain from ``commit`` back to ``stop`` (the run's own history: short)."""
    out: set[str] = set()
    oid: str | None = commit
    while oid is not None and oid not in out:
        out.add(oid)
        if oid == stop:
            break
        parents = objects.read_commit(run.repo, oid).parents
        oid = parents[0] if parents else None
    return out


def rollback_files(run: Run, target: str, label: str | None = None) -> RollbackFilesReport:
    """Put the worktree's files back to checkpoint ``target`` (id, name, label or ``auto_...``);
    ``label`` says where that is in the report's words (``to just before #5 (Edit)``).

    Only paths where the run's head differs from the checkpoint's workspace are written. Refused,
    with nothing written, when one of them was changed in the worktree outside any recorded call.
    """
    store = CheckpointStore(run)
    item = store.find(target)
    ckpt = item.checkpoint
    goal = ckpt.file_snapshot.commit
    objects.enable_fsync()
    with run.lock():
        state = run.state()
        head = state.head
        assert head is not None and state.run is not None
        if not run.worktree_exists():
            raise SandboxError(f"The worktree of run {run.run_id} is missing; run 'sandbox resume {run.run_id}' first.")
        head_tree = objects.commit_tree(run.repo, head)
        goal_tree = objects.commit_tree(run.repo, goal)
        if goal_tree == head_tree:
            return RollbackFilesReport(ckpt.name, None, message=f"The run's files are already at {ckpt.name}.")
        changes = list(objects.diff_trees(run.repo, head_tree, goal_tree))
        cap = capture(run.repo, run.worktree, head_tree, [c.path for c in changes], run.is_ignored, run.is_private)
        blocked = [rel for rel, now in cap.changes.items() if now != objects.lookup(run.repo, goal_tree, rel)]
        if blocked:
            raise RollbackRefusedError(
                f"Rollback refused: {', '.join(sorted(blocked)[:5])} changed in the worktree outside any recorded "
                f"call; record or restore them first (see 'sandbox resume {run.run_id}'). Nothing was written."
            )
        _write(run, changes)
        faults.point("recovery.rollback_files.after_worktree")
        message = trailers.message(
            f"sandbox: rollback files to {ckpt.name}", [(trailers.RUN, run.run_id), (trailers.CHECKPOINT, ckpt.id)]
        )
        assert goal_tree is not None
        kept = _ancestors(run, goal, state.run.base)
        undone = [
            c
            for c in state.order
            if state.calls[c].commit and not state.calls[c].undone and state.calls[c].commit not in kept
        ]
        applied = [c for c in undone if state.calls[c].applied]
        files: list[FileChange] = []

        def files_of(commit: str) -> dict[str, list[FileChange]]:
            files.extend(objects.file_change(c.path, c.old, c.new, f"{head}..{commit}") for c in changes)
            return {"files": files}

        commit, _state = run.move_head(
            EventKind.rollback_files,
            tree=goal_tree,
            parent=head,
            message=message,
            fields_of=files_of,
            epoch=state.epoch,
            data={
                "checkpoint": ckpt.id,
                "name": ckpt.name,
                "undone_calls": undone,
                "applied_calls": applied,
                # The calls whose changes the checkpoint's files hold: in the run's files again, even
                # if an earlier rollback took them out (read from the ledger as it was then).
                "kept_calls": _live_at(run, ckpt.tool_ledger.tip, state.clone),
            },
        )
        faults.point("recovery.rollback_files.after_ledger")
    text = f"The run's files are back {label or 'at ' + ckpt.name}: {len(files)} path(s) restored in the worktree."
    if applied:
        numbers = ", ".join(f"#{state.calls[c].seq}" if c in state.calls else c for c in applied)
        text += (
            f" Calls {numbers} had already been applied to your tree; this rollback changed only the "
            f"sandbox. To take them out of your tree, use 'sandbox undo {run.run_id}' (your last apply) or "
            f"'sandbox undo {run.run_id} --call CALL' (one call)."
        )
    return RollbackFilesReport(ckpt.name, commit, files, undone, applied, text)


def _live_at(run: Run, tip: str | None, clone: str | None) -> list[str]:
    """The calls whose changes were in the run's files at ledger ``tip`` (a checkpoint's)."""
    from sandbox.run.fold import fold_event

    then = LedgerState(clone=clone)
    for oid, event in run.events(tip) if tip else []:
        fold_event(then, event, oid)
    return [e.call_id for e in then.live_calls()]


def _write(run: Run, changes: list[objects.TreeChange]) -> None:
    """Write each change's new entry into the worktree: deletions first, then files and links."""
    root = run.worktree
    for change in changes:
        if change.new is None or change.new.mode == objects.MODE_GITLINK:
            full = os.path.join(root, change.path)
            if os.path.lexists(full) and not (os.path.isdir(full) and not os.path.islink(full)):
                fsutil.remove_path(full, sync=False)
            fsutil.prune_empty_dirs(root, os.path.dirname(change.path))
    for change in changes:
        new = change.new
        if new is None or new.mode == objects.MODE_GITLINK:
            continue
        paths.check_parents(root, change.path)
        full = os.path.join(root, change.path)
        _make_parents(root, change.path)
        if new.mode == objects.MODE_LINK:
            fsutil.atomic_symlink(full, os.fsdecode(objects.read_blob(run.repo, new.oid)), sync=False)
        else:
            data = convert.for_tree(root).smudge(change.path, new.oid, run.repo)  # as checkout writes it
            fsutil.atomic_write(full, data, 0o755 if new.mode == objects.MODE_EXEC else 0o644, sync=False)


def _make_parents(root: str, rel: str) -> None:
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        if os.path.lexists(current) and not os.path.isdir(current):
            fsutil.remove_path(current, sync=False)  # the checkpoint had a directory here
        os.makedirs(current, exist_ok=True)


def rollback_session(run: Run, target: str) -> RollbackSessionReport:
    """Move the session (messages and run state) back to runtime checkpoint ``target``.

    Recorded as a ``rollback_session`` event; nothing is erased, and the files are not touched.
    """
    store = CheckpointStore(run)
    item: StoredCheckpoint = store.find(target)
    ckpt = item.checkpoint
    if ckpt.kind != "runtime":
        raise SandboxError(
            f"{ckpt.name} is an automatic checkpoint and holds no session; pick one from 'sandbox checkpoints'."
        )
    messages = store.messages(ckpt)
    faults.point("recovery.rollback_session.before")
    state: LedgerState = run.state()
    seen = {e.call_id for _oid, e in run.events()[: ckpt.tool_ledger.count] if e.call_id}
    after = [c for c in state.order if c not in seen]
    event = run.new_event(
        EventKind.rollback_session,
        epoch=state.epoch,
        data={
            "checkpoint": ckpt.id,
            "name": ckpt.name,
            "label": ckpt.label,
            "step_id": ckpt.step_id,
            "messages_ref": ckpt.messages_ref,
            "calls_after": after,
        },
    )
    run.record_event(event)
    text = (
        f"The session is back at {ckpt.name}; {len(after)} call(s) recorded after it stay in the ledger "
        "and the next resume note lists them."
    )
    return RollbackSessionReport(ckpt.name, ckpt.id, messages, ckpt.run_state, after, text)


def compensation_origin(run: Run, call_id: str) -> str | None:
    """None when this clone registered ``call_id``'s compensation; else where the record came from.

    A compensation is a command line in the call's record: one another clone wrote (a fetched run, or
    one that arrived by plain git) is someone else's text, run only confined and only once the user
    saw it and said yes (:mod:`sandbox.store.provenance`).
    """
    from sandbox.agent.transcripts import origin

    for _oid, event in run.events_read():
        if event.call_id == call_id and event.call is not None and event.call.compensation and not event.own():
            return origin(run)
    return None


def compensation_argv(run: Run, call_id: str) -> list[str]:
    """The command line ``call_id`` registered as its compensation (refused when it has none)."""
    entry = run.entry(call_id)
    if entry.status in (CallStatus.planned, CallStatus.approved):
        raise SandboxError(f"Call {call_id} ({entry.tool_name}) never ran; there is nothing to compensate.")
    comp = entry.compensation
    if not comp:
        effects = f" (its side effects: {', '.join(entry.side_effects)})" if entry.side_effects else ""
        raise NoCompensationError(
            f"{entry.tool_name} ({call_id}) registered no compensation, so its effect cannot be undone{effects}. "
            "File changes, if any, are undone with 'sandbox undo' or 'sandbox rollback --files'."
        )
    argv = comp.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise NoCompensationError(
            f'The compensation of {entry.tool_name} ({call_id}) is not a command ({{"argv": [...]}}); '
            f"the runtime must run it itself: {comp}."
        )
    return [str(a) for a in argv]


def compensate(run: Run, call_id: str, isolation: Isolation | None = None) -> CompensateReport:
    """Run the compensation ``call_id`` registered, as its own recorded call, confined by ``isolation``
    (None: not confined; a compensation another clone registered is refused so: see
    :func:`compensation_origin`)."""
    from sandbox.agent.execute import execute

    argv = compensation_argv(run, call_id)
    where = compensation_origin(run, call_id)
    if where is not None and (isolation is None or not isolation.enabled):
        raise SandboxError(
            f"The compensation of call {call_id} comes from a record {where}: it runs only confined; nothing was run."
        )
    entry = run.entry(call_id)
    comp = entry.compensation or {}
    state = run.state()
    links = [link for link in state.data.compensation if link.call_id == call_id]
    comp_id = f"{call_id}-compensate-{len(links) + 1}"
    if links:
        last = links[-1].compensation_call
        previous = state.calls.get(last)
        if previous is None:
            comp_id = last  # linked, but the crash came before it started: this is the same attempt
        elif previous.status == CallStatus.succeeded:
            raise SandboxError(f"Call {call_id} was already compensated by {last}.")
        elif previous.status in (CallStatus.started, CallStatus.uncertain):
            raise SandboxError(
                f"The compensation {last} of {call_id} is {previous.status.value}; check whether it took effect and "
                f"record it with 'sandbox call resolve {run.run_id} {last} --status succeeded|failed'."
            )
    if not links or comp_id != links[-1].compensation_call:
        link = run.new_event(
            EventKind.compensation,
            call_id,
            epoch=state.epoch,
            data={"call_id": call_id, "compensation_call": comp_id, "argv": argv},
        )
        run.record_event(link)
    faults.point("recovery.compensate.after_link")
    outcome = execute(
        run,
        argv,
        tool_name=f"compensate_{entry.tool_name}",
        idempotency=str(comp.get("idempotency", "conditional")),
        replay=str(comp.get("replay", "ask")),
        step_id=entry.step_id,
        call_id=comp_id,
        isolation=isolation,
    )
    verb = "succeeded" if outcome.returncode == 0 else f"failed (exit code {outcome.returncode})"
    text = f"Compensation of {entry.tool_name} ({call_id}) ran as call {comp_id} and {verb}."
    return CompensateReport(call_id, comp_id, outcome.entry, outcome.returncode, text)
