"""Merge-back: applying the agent's recorded changes to the user's working tree, never over a user edit.

This module is the operation (``sandbox apply``): the refusals before anything is planned (an
operation in progress, a moved HEAD), then the plan (:mod:`sandbox.merge.planning`, verdicts by
:mod:`sandbox.merge.decide`, types in :mod:`sandbox.merge.planned`), then the journaled write
(:mod:`sandbox.merge.writing`).

The patch is what :func:`sandbox.merge.brings.brings` decides (the live calls' commits, each
diffed against its parent; never a walk of a whole tree), so planning and writing cost O(changed
paths). For each changed path the
selected calls form a chain of states ``before -> ... -> after``; the user's file (read with
lstat and hashed, never through a symlinked parent) decides:

* equal to the after state: skipped, already applied;
* equal to the before state (or to an intermediate state the sandbox itself wrote earlier):
  the after state is written;
* anything else: a conflict. Any conflict means nothing is written at all (or, with ``--3way``,
  text files get git-style conflict markers).

Every write goes through the journal (:mod:`sandbox.store.journal`): journal first (fsync'd), then each
file atomically, then the ``apply_finished`` ledger event, then the journal is removed. The event
records, per path, the state the sandbox wrote and the calls it carries (folded into
``state.data["user_paths"]``), so a later apply of the rest of the run accepts those states and a
later undo knows what it may take back. The user's index, HEAD, refs and stash are never touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import pygit2

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.fast.pathspec import Pathspec
from sandbox.merge import obstacles, planning, writing
from sandbox.merge.planned import ApplyPlan, PlannedPath, move_of, prior_records
from sandbox.models import ApplyJournal, ApplyReport, Event, EventKind, LedgerState, PathRecordUpdate
from sandbox.run.run import Run
from sandbox.store import blobreads, journal
from sandbox.store.snapshot import user_git_dir

if TYPE_CHECKING:
    from sandbox.merge import hunks  # imported when a choice of hunks is given (apply --hunks)

#: Files and directories of a git dir that mean an operation is half done (what, how to end it).
IN_PROGRESS = (
    ("MERGE_HEAD", "merge", "git merge --continue or --abort"),
    ("rebase-merge", "rebase", "git rebase --continue or --abort"),
    ("rebase-apply", "rebase or am", "git rebase --continue/--abort or git am --continue/--abort"),
    ("CHERRY_PICK_HEAD", "cherry-pick", "git cherry-pick --continue or --abort"),
    ("REVERT_HEAD", "revert", "git revert --continue or --abort"),
    ("BISECT_LOG", "bisect", "git bisect reset"),
)


class ApplyConflict(SandboxError):
    """Some paths conflict with the user's changes; nothing was written. ``report`` lists them."""

    def __init__(self, message: str, report: ApplyReport) -> None:
        super().__init__(message)
        self.report = report


class HeadMovedError(SandboxError):
    """The user's HEAD moved since the run started (override with ``--allow-moved-head``)."""


class OperationInProgressError(SandboxError):
    """A merge, rebase, cherry-pick, revert or bisect is in progress in the user's repository."""


class ReadOnlyTargetError(ApplyConflict):
    """A file or directory the operation would write is read-only; nothing was written."""


def check_in_progress(workdir: str) -> None:
    """Refuse while a merge, rebase, cherry-pick, revert or bisect is in progress in ``workdir``."""
    gitdir = user_git_dir(workdir)
    for name, what, how in IN_PROGRESS:
        if os.path.lexists(os.path.join(gitdir, name)):
            raise OperationInProgressError(
                f"A {what} is in progress in {workdir}; finish it first ({how}), then apply or undo."
            )


def user_head(workdir: str) -> str | None:
    """The commit the user's HEAD points at now (None on an unborn branch). Reads no index."""
    repo = pygit2.Repository(user_git_dir(workdir))
    if repo.head_is_unborn:
        return None
    return str(repo.head.target)


def apply(
    run: Run,
    calls: list[str] | None = None,
    paths: Pathspec | list[str] | None = None,
    *,
    dry_run: bool = False,
    three_way: bool = False,
    allow_moved_head: bool = False,
    lock_timeout: float = 30.0,
    with_deps: bool = False,
    choice: hunks.Choice | None = None,
    progress: Callable[[str], None] | None = None,
) -> ApplyReport:
    """Apply the run's changes (all, or some calls or paths) to the user's working tree.

    ``progress`` is told what is being done ("Checking your files", "Writing files: 3/120").

    All or nothing: raises :class:`ApplyConflict` (with the report) and writes nothing when any path
    conflicts. Refuses while another operation on the tree is pending or in progress, when the user's
    HEAD moved (unless ``allow_moved_head``) and for read-only targets.
    """
    project = run.project
    target = run.user_workdir
    # Blobs read once: the new calls' blobs verified below are the ones a choice of hunks diffs.
    with journal.tree_lock(project, target, lock_timeout), blobreads.reads_once():
        faults.point("apply.after_lock")
        journal.ensure_none_pending(project, target)
        check_in_progress(target)
        moved = user_head(target) != run.info.head
        if moved and not allow_moved_head:
            raise HeadMovedError(
                f"Your HEAD moved since run {run.run_id} started (was {(run.info.head or 'unborn')[:12]}); "
                "re-run with --allow-moved-head to apply onto your current files anyway."
            )
        state = run.verified_state()
        if progress is not None:
            progress("Checking your files")
        try:
            # A choice of hunks merges only the files it picks from (partial.restrict), never the rest.
            merging = three_way and choice is None
            result = planning.plan(run, calls, paths, three_way=merging, state=state, with_deps=with_deps)
        except OSError as exc:
            raise journal.WriteFailedError(
                f"The apply of run {run.run_id} failed while planning ({journal.describe(exc)}); nothing was "
                f"written. {writing.remedy(exc)}, then run 'sandbox apply {run.run_id}' again."
            ) from exc
        result.head_moved = moved
        if choice is not None:
            _take_only(run, result, choice, state, three_way, dry_run)
        if result.conflicts:
            refuse(result.conflicts, result.report(dry_run))
        report = result.report(dry_run)
        newly = [c for c in result.fully_applied if not state.calls[c].applied]
        user_paths = state.data.user_paths
        changed = [p for p in result.paths if p.record is not None and p.record != user_paths.get(p.path)]
        if dry_run or (not result.writes and not newly and not changed):
            return report
        event = _applied_event(run, state, result, report, newly, changed)
        writing.keep_users_files(run, target, result.writes)
        j = ApplyJournal(
            op="apply",
            run_id=run.run_id,
            target="user",
            target_dir=target,
            calls=result.calls,
            entries=writing.journal_entries(run.repo, target, result.writes),
            event=event,
            pid=os.getpid(),
            token=journal.new_token(),
        )
        written = writing.execute(run, j, progress=progress)
        return result.report(written=written)


def _take_only(
    run: Run, result: ApplyPlan, choice: hunks.Choice, state: LedgerState, three_way: bool, dry_run: bool
) -> None:
    """Cut the plan down to the chosen hunks (``apply --hunks``); refuse what that leaves in the way."""
    from sandbox.merge import partial

    partial.restrict(run, result, choice, state.data.user_paths, three_way)
    if result.conflicts:
        refuse(result.conflicts, result.report(dry_run))
    # A choice may leave out the deletion that clears the way for a chosen path (a file the
    # agent turned into a directory): the structure is checked again, before any write.
    by_path = {p.path: p for p in result.paths}
    for p in result.writes:
        obstacles.check_structure(result.target_dir, p, by_path)
    # A file the user edited becomes a write only here (hunks placed on it): access is checked again.
    obstacles.check_access(result.target_dir, result.writes)
    if result.conflicts:
        for p in result.conflicts:
            p.hint = "choose the change that removes what is in the way too, or leave this path out"
        refuse(result.conflicts, result.report(dry_run))


def _applied_event(
    run: Run,
    state: LedgerState,
    result: ApplyPlan,
    report: ApplyReport,
    newly: list[str],
    changed: list[PlannedPath],
) -> Event:
    """The ``apply_finished`` event: the paths' new records (and the prior ones), and the moves undo reverses."""
    user_paths = state.data.user_paths
    return run.new_event(
        EventKind.apply_finished,
        data={
            "target": "user",
            "workdir": result.target_dir,
            "selected": result.calls,
            "calls": result.fully_applied,
            "newly": newly,
            "paths": [PathRecordUpdate.of(p.path, p.record).to_data() for p in changed],
            "prior": [u.to_data() for u in prior_records(user_paths, [p.path for p in changed])],
            "merged": report.merged,
            "moves": [move_of(p.path, p.user.state, p.write) for p in result.writes],
        },
    )


def refuse(conflicts: list[PlannedPath], report: ApplyReport) -> NoReturn:
    """Raise the refusal of an operation with ``conflicts`` (read-only targets named as such)."""
    read_only = [p.path for p in conflicts if obstacles.is_read_only(p)]
    if read_only:
        shown = ", ".join(read_only[:5]) + (" ..." if len(read_only) > 5 else "")
        raise ReadOnlyTargetError(
            f"Read-only in your tree: {shown}; make them writable (chmod u+w) or leave them out (--exclude PATH). "
            "Nothing was written.",
            report,
        )
    first = conflicts[0]
    if all(p.waits for p in conflicts):
        what = "need calls that are not selected"
    elif any(p.waits for p in conflicts):
        what = "conflict with your changes or need calls that are not selected"
    else:
        what = "conflict with your changes"
    raise ApplyConflict(f"{len(conflicts)} path(s) {what} ({first.path}: {first.reason}); nothing was written.", report)
