"""Merge-back: applying the agent's recorded changes to the user's working tree, never over a user edit.

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

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import pygit2

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.merge import brings, obstacles, select, validate
from sandbox.merge.brings import Step
from sandbox.models import (
    ApplyAction,
    ApplyJournal,
    ApplyReport,
    ConflictReport,
    EventKind,
    JournalEntry,
    LedgerEntry,
    LedgerState,
    PartialApply,
    PathMove,
    PathRecordUpdate,
    UserPathRecord,
)
from sandbox.run.run import Run
from sandbox.store import convert, journal, objects, sparse
from sandbox.store.gitcli import git
from sandbox.store.journal import Probe, State
from sandbox.store.objects import MODE_EXEC, MODE_FILE, Entry
from sandbox.store.pathspec import Pathspec
from sandbox.store.project import Project
from sandbox.store.snapshot import user_git_dir

if TYPE_CHECKING:
    from sandbox.merge import hunks  # imported when a choice of hunks is given (apply --hunks)

OPS = ("apply", "undo", "redo")
STEPS = ("after_lock", "after_journal", "after_file", "before_ledger", "after_ledger", "after_journal_remove")
faults.POINTS.update(f"{op}.{step}" for op in OPS for step in STEPS)
faults.POINTS.update({"continue.after_file", "rollback.after_file"})

#: Files and directories of a git dir that mean an operation is half done (what, how to end it).
IN_PROGRESS = (
    ("MERGE_HEAD", "merge", "git merge --continue or --abort"),
    ("rebase-merge", "rebase", "git rebase --continue or --abort"),
    ("rebase-apply", "rebase or am", "git rebase --continue/--abort or git am --continue/--abort"),
    ("CHERRY_PICK_HEAD", "cherry-pick", "git cherry-pick --continue or --abort"),
    ("REVERT_HEAD", "revert", "git revert --continue or --abort"),
    ("BISECT_LOG", "bisect", "git bisect reset"),
)
BINARY_SNIFF = 8000


class ApplyConflict(SandboxError):
    """Some paths conflict with the user's changes; nothing was written. ``report`` lists them."""

    def __init__(self, message: str, report: ApplyReport) -> None:
        super().__init__(message)
        self.report = report


class HeadMovedError(SandboxError):
    """The user's HEAD moved since the run started (override with ``--allow-moved-head``)."""


class OperationInProgressError(SandboxError):
    """A merge, rebase, cherry-pick, revert or bisect is in progress in the user's repository."""


class NothingToApplyError(SandboxError):
    """The selected calls changed no files."""


class ReadOnlyTargetError(ApplyConflict):
    """A file or directory the operation would write is read-only; nothing was written."""


# -- the plan ---------------------------------------------------------------------------------


@dataclass
class PlannedPath:
    """What the apply will do with one path. ``action``: write, merge, skip or conflict."""

    path: str
    steps: list[Step]
    user: Probe
    action: ApplyAction = "conflict"
    reason: str = ""
    hint: str = ""
    write: State = None
    record: UserPathRecord | None = None
    markers: bool = False
    #: True when the conflict is an obstacle in the tree (see :mod:`sandbox.merge.obstacles`), not an edit.
    obstacle: bool = False
    #: Unselected calls this path needs first (the user's file is at a state before them), oldest first.
    needs: list[str] = field(default_factory=list)
    #: True when the conflict is only that: the user's file is at a state before ``needs``.
    waits: bool = False
    #: The earlier partial apply (``--hunks``) this write continues from (the user's file is its result).
    partial_from: PartialApply | None = None
    #: With ``--hunks``: the ids taken from this path, when only some of them are (see :mod:`hunks`).
    taken: list[str] | None = None

    @property
    def base(self) -> State:
        """The state the agent started from (before the first selected call)."""
        return self.steps[0].before

    @property
    def agent(self) -> State:
        """The agent's final state (after the last selected call)."""
        return self.steps[-1].after

    @property
    def calls(self) -> list[str]:
        """The selected calls that changed this path, in order."""
        return [s.call_id for s in self.steps]


@dataclass
class ApplyPlan:
    """What an apply would do; see :func:`plan`."""

    run_id: str
    target_dir: str
    calls: list[str]
    paths: list[PlannedPath] = field(default_factory=list)
    fully_applied: list[str] = field(default_factory=list)
    head_moved: bool = False

    @property
    def conflicts(self) -> list[PlannedPath]:
        """Paths that would be refused."""
        return [p for p in self.paths if p.action == "conflict"]

    @property
    def writes(self) -> list[PlannedPath]:
        """Paths that would be written (the agent's state or a 3-way merge)."""
        return [p for p in self.paths if p.action in ("write", "merge")]

    def report(self, dry_run: bool = False, written: list[str] | None = None) -> ApplyReport:
        """The plan as a report: on a dry run what it would write; else exactly the paths ``written``.

        With any conflict the operation is refused: nothing is listed as applied or merged.
        """
        refused = bool(self.conflicts)
        if refused:
            applied: list[str] = []
        elif dry_run or written is None:
            applied = [p.path for p in self.writes]
        else:
            done = set(written)
            applied = [p.path for p in self.writes if p.path in done]
        merged = [p.path for p in self.paths if p.action == "merge" and p.path in applied]
        deleted = {p.path: "deleted" for p in self.writes if dry_run and p.write is None and p.path in applied}
        return ApplyReport(
            run=self.run_id,
            target_dir=self.target_dir,
            calls=self.calls,
            applied=[] if dry_run else applied,
            would_apply=applied if dry_run else [],
            skipped=[p.path for p in self.paths if p.action == "skip"],
            conflicts=[conflict_report(p) for p in self.conflicts],
            merged=merged,
            attention=[p.path for p in self.paths if p.markers and p.path in applied],
            reasons={
                **deleted,
                **{
                    p.path: p.reason
                    for p in self.paths
                    if p.action == "skip" or p.path in merged or (p.taken is not None and p.path in applied)
                },
            },
            dry_run=dry_run,
            head_moved=self.head_moved,
            refused=refused,
            partial={p.path: p.taken for p in self.paths if p.taken is not None and p.path in applied},
        )


def conflict_report(p: PlannedPath) -> ConflictReport:
    """One conflicting path as reported to the user (``--exclude PATH`` in hints names the path)."""
    return ConflictReport(
        path=p.path,
        base=p.base.oid if p.base else None,
        agent=p.agent.oid if p.agent else None,
        user=p.user.entry.oid if p.user.entry else None,
        reason=p.reason,
        hint=p.hint.replace("--exclude PATH", "--exclude " + select.exclude_arg(p.path)),
        needs=p.needs,
    )


def state_record(state: State, target: State, calls: list[str]) -> UserPathRecord:
    """A ``user_paths`` record: the state written, the agent state it stands for, the calls it carries."""
    return UserPathRecord(
        mode=state.mode if state else None,
        oid=state.oid if state else None,
        target_mode=target.mode if target else None,
        target_oid=target.oid if target else None,
        calls=calls,
    )


def move_of(path: str, before: State, after: State) -> dict[str, object]:
    """A :class:`sandbox.models.PathMove` as event data: what ``sandbox undo`` puts back, and from what."""
    return PathMove(
        path=path,
        before_mode=before.mode if before else None,
        before_oid=before.oid if before else None,
        after_mode=after.mode if after else None,
        after_oid=after.oid if after else None,
    ).model_dump(mode="json")


def prior_records(user_paths: Mapping[str, UserPathRecord], changed: list[str]) -> list[PathRecordUpdate]:
    """The ``user_paths`` records of ``changed`` as they are now (what rolling back restores)."""
    return [PathRecordUpdate.of(path, user_paths.get(path)) for path in changed]


def partial_of(record: UserPathRecord | None) -> PartialApply | None:
    """The partial apply a ``user_paths`` record describes, if the sandbox wrote only some hunks there."""
    return None if record is None else record.partial


def _written_state(record: UserPathRecord | None) -> State:
    """The state the sandbox wrote at a path (None: no record)."""
    return None if record is None else journal.entry_state(record.mode, record.oid)


def _target_state(record: UserPathRecord | None) -> State:
    """The agent's state a path's record stands for (None: no record)."""
    return None if record is None else journal.entry_state(record.target_mode, record.target_oid)


def resolve_call(state: LedgerState, run_id: str, given: str) -> LedgerEntry:
    """The call named by an id, a sequence number or a unique prefix; :class:`UnknownCallError` otherwise."""
    return select.resolve_name(state, run_id, given)


def as_pathspec(given: Pathspec | list[str] | None) -> Pathspec | None:
    """A :class:`Pathspec` from one, from a list of pathspec strings (from the top), or None."""
    if given is None or isinstance(given, Pathspec):
        return given or None
    return select.pathspec(given)


def plan(
    run: Run,
    calls: list[str] | None = None,
    paths: Pathspec | list[str] | None = None,
    three_way: bool = False,
    state: LedgerState | None = None,
    with_deps: bool = False,
) -> ApplyPlan:
    """Decide, path by path, what applying the run (or some calls, or some paths) would do.

    Reads only the changed paths of the user's tree; writes nothing there (a 3-way merge stores its
    result as a blob). Raises :class:`PathRefusedError` for paths outside the tree, in ``.git`` or
    through a symlinked directory, and :class:`ReadOnlyTargetError` for read-only targets.
    """
    state = state or run.state()
    target = run.user_workdir
    brought = brings.brings(run, state, calls, as_pathspec(paths), with_deps)
    selected, chains = brought.selected, brought.chains
    result = ApplyPlan(run.run_id, target, brought.calls)
    if not chains:
        what = "selected changes" if calls or paths else "recorded file changes"
        raise NothingToApplyError(f"Run {run.run_id} has no {what} to apply.")
    user_paths = state.data.user_paths
    # The user's files are compared as `git add` would store them (sandbox.store.convert).
    conv = convert.for_tree(target)
    probes = {path: conv.clean_probe(target, path, journal.probe(target, path)) for path in sorted(chains)}
    probes.update(excluded_probes(target, probes))
    for path in sorted(chains):
        planned = PlannedPath(path, chains[path], probes[path])
        _decide(planned, user_paths.get(path))
        result.paths.append(planned)
    if any(p.action == "conflict" for p in result.paths):
        select.explain_dependencies(run, state, selected, result.paths)
        _whose_change(run, result.paths)
    by_path = {p.path: p for p in result.paths}
    for p in result.paths:
        obstacles.check_structure(target, p, by_path)
    obstacles.check_sparse(target, user_git_dir(target), result.paths)
    if three_way:
        for p in result.conflicts:
            if not p.obstacle:
                _merge(run, target, p)
    obstacles.check_access(target, result.writes)
    planned_paths = set(by_path)
    for entry in selected:
        if all(
            path in planned_paths
            or run.is_private(path)
            or entry.call_id in select.carried(state, path)  # whole: a partial apply is not carried
            for path, _before, _after in brings.call_changes(run, entry)
        ):
            result.fully_applied.append(entry.call_id)
    return result


#: The reason :func:`_decide` gives a user's edit; :func:`_whose_change` refines it.
YOUR_EDIT = "your file differs from the version the agent started from"


def _whose_change(run: Run, planned: list[PlannedPath]) -> None:
    """Say whose change a conflict is when the run's base carries an uncommitted edit (issue 21).

    The base snapshot holds the uncommitted files of the tree the run started in; in a clone that
    fetched the run, or after the user put the file back, the user's file may be exactly the
    committed version: then the difference is that edit, not theirs.
    """
    mine = [p for p in planned if p.action == "conflict" and p.reason == YOUR_EDIT]
    if not mine or not run.info.head:
        return
    from sandbox.runs.remote import fetched_from

    head_tree = objects.commit_tree(run.repo, run.info.head)
    where = "in the clone where the run started" if fetched_from(run.project, run.run_id) else "in your tree"
    for p in mine:
        committed = objects.lookup(run.repo, head_tree, p.path)
        if committed != p.base and journal.matches(p.user, committed):
            p.reason = (
                f"your file is as committed; the agent started from an uncommitted edit of it made {where} "
                "when the run started"
            )
            p.hint = (
                "see that edit and the agent's with 'sandbox conflicts'; take both with --3way, or leave it out "
                "(--exclude PATH)"
            )


def plan_moves(root: str, moves: list[tuple[str, State, State, str]], user_tree: bool = False) -> list[PlannedPath]:
    """Plan moving each path from one state to another (undo, redo): (path, from, to, call id).

    A path at ``to`` is skipped, one at ``from`` is written, anything else is a conflict; every
    obstacle (:mod:`sandbox.merge.obstacles`) is checked as for an apply, the sparse checkout only in
    the user's tree (``user_tree``).
    """
    conv = convert.for_tree(root)
    probes = {path: conv.clean_probe(root, path, journal.probe(root, path)) for path, _s, _d, _c in moves}
    probes.update(excluded_probes(root, probes))
    planned = [PlannedPath(path, [Step(call_id, src, dst)], probes[path]) for path, src, dst, call_id in moves]
    for p in planned:
        _decide(p, None)
    by_path = {p.path: p for p in planned}
    for p in planned:
        obstacles.check_structure(root, p, by_path)
    if user_tree:
        obstacles.check_sparse(root, user_git_dir(root), planned)
    obstacles.check_access(root, [p for p in planned if p.action == "write"])
    return planned


def excluded_probes(root: str, probes: dict[str, Probe]) -> dict[str, Probe]:
    """Absent paths that the tree's sparse checkout excludes: ``excluded``, with the index's entry.

    Such a file is not deleted, only not checked out (:mod:`sandbox.store.sparse`).
    """
    absent = [path for path, probe in probes.items() if probe.kind == "absent"]
    return {path: Probe("excluded", entry) for path, entry in sparse.excluded(root, absent).items()}


def _decide(p: PlannedPath, prior: UserPathRecord | None) -> None:
    """Set the action of one path from the user's state, the chain and what the sandbox wrote before."""
    user, steps = p.user, p.steps
    written = _written_state(prior)
    prior_target = _target_state(prior)
    prior_calls: list[str] = list(prior.calls) if prior else []
    chain_calls = [c for c in p.calls if c not in prior_calls]
    if user.kind == "unreadable":
        where = f" ({user.blocker!r})" if user.blocker else ""
        p.reason = f"it cannot be read in your tree{where}: {user.unreadable}"
        p.hint = "make it readable (chmod u+r), or leave this path out (--exclude PATH)"
        p.obstacle = True
        return
    if user.kind == "excluded":
        if user.entry == p.agent:
            p.action, p.reason = "skip", "already there (outside your sparse checkout)"
            return
        p.obstacle = True
        p.reason = "it is outside your sparse checkout (not checked out, not deleted)"
        p.hint = (
            "add its directory to your checkout ('git sparse-checkout add DIR') and apply again, "
            "or leave it out (--exclude PATH)"
        )
        return
    if not user.known:
        p.reason = "it is neither a file nor a symlink in your tree (a fifo or socket)"
        p.hint = "move it away, then apply again"
        p.obstacle = True
        return
    if journal.matches(user, p.agent):
        p.action, p.reason = "skip", "already applied"
        # Carried only when the sandbox itself wrote this state: an undo must never take back a
        # change the user made (even one equal to the agent's).
        if prior is not None and written == user.state:
            p.record = state_record(written, p.agent, prior_calls + chain_calls)
        return
    if p.base == p.agent:
        p.action, p.reason = "skip", "the agent's calls leave it as it was; yours is kept"
        return
    if prior is not None and prior_target == p.agent:
        p.action, p.reason = "skip", "applied earlier; your later changes to it are kept"
        return
    partial = partial_of(prior)
    if partial is not None and written == user.state:
        broken = any(steps[j].after != steps[j + 1].before for j in range(len(steps) - 1))
        if journal.entry_state(partial.base_mode, partial.base_oid) == steps[0].before and not broken:
            # Only some hunks were taken before: the rest is written on top of what the sandbox wrote.
            p.action, p.write, p.partial_from = "write", p.agent, partial
            kept = [c for c in prior_calls if c not in partial.calls]
            p.record = state_record(p.agent, p.agent, kept + [c for c in p.calls if c not in kept])
            return
        p.reason = f"only some hunks of {', '.join(partial.calls)} were taken into it (apply --hunks)"
        p.hint = "take the rest of them first (apply those calls), or undo that apply ('sandbox undo')"
        return
    for i in range(len(steps) - 1, -1, -1):
        if not journal.matches(user, steps[i].before):
            continue
        if any(steps[j].after != steps[j + 1].before for j in range(i, len(steps) - 1)):
            continue
        if i > 0 and not (prior is not None and written == user.state):
            continue
        p.action, p.write = "write", p.agent
        carried = prior_calls if prior is not None and written == user.state else []
        p.record = state_record(p.agent, p.agent, carried + [c for c in p.calls if c not in carried])
        return
    gaps = [steps[j + 1].call_id for j in range(len(steps) - 1) if steps[j].after != steps[j + 1].before]
    if gaps:
        p.reason = f"call(s) {', '.join(gaps)} build on changes to it by calls that are not selected"
        p.hint = "select those calls too (--call), or apply the whole run"
    elif user.kind == "dir":
        p.reason = "it is a directory in your tree"
        p.hint = "move the directory away to take the agent's version, or leave this path out (--exclude PATH)"
    elif user.entry is None:
        p.reason = "you deleted it; the agent changed it"
        p.hint = "restore your file to take the agent's change, or leave this path out (--exclude PATH)"
    else:
        p.reason = YOUR_EDIT
        p.hint = (
            "see base, agent and yours with 'sandbox conflicts', then merge by hand, use --3way, "
            "or leave it out (--exclude PATH)"
        )


def _is_text(data: bytes) -> bool:
    return b"\0" not in data[:BINARY_SNIFF]


def _merge(run: Run, root: str, p: PlannedPath) -> None:
    """Three-way merge of a text file both sides changed; on success the path becomes a merge."""
    base, agent, user = p.base, p.agent, p.user.entry
    gaps = any(p.steps[j].after != p.steps[j + 1].before for j in range(len(p.steps) - 1))
    regular = (MODE_FILE, MODE_EXEC)
    if gaps or user is None or agent is None or p.user.kind != "file" or agent.mode not in regular:
        p.hint = "--3way merges only text files present on both sides; " + p.hint
        return
    if base is not None and base.mode not in regular:
        return
    base_mode = base.mode if base else MODE_FILE
    if user.mode != base_mode and agent.mode != base_mode and user.mode != agent.mode:
        return
    mode = user.mode if user.mode != base_mode else agent.mode
    repo = run.repo
    with open(os.path.join(root, p.path), "rb") as fh:
        ours = convert.for_tree(root).clean_bytes(p.path, fh.read())
    theirs = objects.read_blob(repo, agent.oid)
    ancestor = objects.read_blob(repo, base.oid) if base else b""
    if not (_is_text(ours) and _is_text(theirs) and _is_text(ancestor)):
        p.reason += " (binary: --3way cannot merge it)"
        return
    merged, conflicts = merge_text(run.project, ours, ancestor, theirs)
    p.action, p.write = "merge", Entry(mode, objects.write_blob(repo, merged))
    p.markers = conflicts > 0
    p.reason = "merged with your changes; conflict markers need attention" if p.markers else "merged cleanly"
    p.record = state_record(p.write, p.agent, p.calls)


def merge_text(project: Project, ours: bytes, base: bytes, theirs: bytes, diff3: bool = False) -> tuple[bytes, int]:
    """Merge three texts with git-style conflict markers; returns (result, number of conflicts).

    Runs ``git merge-file``: libgit2 (pygit2) has no binding to merge raw contents, only blobs of
    an index, so the git command on three temp files is the one way to get git's own markers. It
    runs inside the repository, so its ``merge.conflictStyle`` (diff3, zdiff3) applies as it does
    to ``git merge``; ``diff3`` asks for the base section whatever the config says. The labels are
    ``yours``, ``base`` and ``agent``.
    """
    scratch = os.path.join(project.state_dir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        names = []
        for name, data in (("yours", ours), ("base", base), ("agent", theirs)):
            path = os.path.join(tmp, name)
            with open(path, "wb") as fh:
                fh.write(data)
            names.append(path)
        style = ["--diff3"] if diff3 else []
        args = ["merge-file", "-p", *style, "-L", "yours", "-L", "base", "-L", "agent", *names]
        proc = git(args, cwd=tmp, check=False)
    if proc.returncode < 0 or proc.returncode > 127:
        raise SandboxError(f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout, proc.returncode


# -- checks on the user's repository ----------------------------------------------------------


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


# -- executing --------------------------------------------------------------------------------


def journal_entries(repo: pygit2.Repository, root: str, writes: list[PlannedPath]) -> list[JournalEntry]:
    """Journal entries for the planned writes, in the bytes on disk (as checkout would write them).

    Planning compares blobs (cleaned); the journal and the writes deal in the bytes on disk, so each
    state goes through the tree's conversion (:mod:`sandbox.store.convert`): identity in most trees.
    """
    conv = convert.for_tree(root)
    out = []
    for p in writes:
        before = conv.on_disk(p.path, p.user.state)
        after = conv.to_disk(p.path, p.write, repo)
        out.append(
            JournalEntry(
                path=p.path,
                before_mode=before.mode if before else None,
                before_oid=before.oid if before else None,
                after_mode=after.mode if after else None,
                after_oid=after.oid if after else None,
            )
        )
    return out


def execute(
    run: Run, j: ApplyJournal, keep: list[str] | None = None, progress: Callable[[str], None] | None = None
) -> list[str]:
    """Carry out a journaled operation: journal, files, ledger event, journal removal (each a fault point).

    Returns the paths written; ``progress`` is told each one ("Writing files: 3/120"). An OS error
    (disk full, I/O error, read-only file system) or a failed ledger append rolls the written paths
    back and raises :class:`journal.WriteFailedError` saying so; where the roll-back fails too, the
    journal is kept and the error names the commands that finish or reverse the operation.
    """
    project, op = run.project, j.op
    validate.check(run.repo, j.entries)  # the whole plan, before the journal: nothing half-applies
    if j.token is None:
        j.token = journal.new_token()
    temps = journal.temps_of(project, j)
    journal.clear_temps(project, None, j.target_dir)  # a staging area emptied by an earlier crash's recovery
    try:
        journal.save(project, j)
    except OSError as exc:
        with contextlib.suppress(OSError):
            journal.remove(project, j.target_dir)
        raise journal.WriteFailedError(
            f"The {op} of run {run.run_id} could not write its journal ({journal.describe(exc)}); nothing was "
            f"written. {_remedy(exc)}, then run '{_again(j)}' again."
        ) from exc
    faults.point(f"{op}.after_journal")
    written: list[str] = []
    total = len(j.entries)

    def wrote(path: str) -> None:
        written.append(path)
        if progress is not None:
            done = ", done." if len(written) == total else ""  # git's way: the last count always shows
            progress(f"Writing files: {len(written)}/{total}{done}")

    try:
        journal.play(run.repo, j.target_dir, j.entries, f"{op}.after_file", on_write=wrote, temps=temps)
    except OSError as exc:
        where = _where(j.target_dir, exc)
        raise _roll_back_failed(run, j, temps, written, f"writing {where}", exc) from exc
    except SandboxError as exc:  # the tree changed under the write (a path in the way): put back what was written
        raise _roll_back_failed(run, j, temps, written, "writing your tree", exc) from exc
    faults.point(f"{op}.before_ledger")
    try:
        run.record_event(j.event, keep=keep or ())
    except (OSError, pygit2.GitError, SandboxError) as exc:
        raise _roll_back_failed(run, j, temps, written, "recording it in the run's ledger", exc) from exc
    faults.point(f"{op}.after_ledger")
    if j.target == "sandbox":
        run.head()  # moves refs/sandbox/<run>/head to the event's commit
    try:
        journal.remove(project, j.target_dir)
    except OSError as exc:
        raise journal.WriteFailedError(
            f"The {op} of run {run.run_id} is complete and recorded, but its journal could not be removed "
            f"({journal.describe(exc)}); run 'sandbox apply --continue {run.run_id}' to clear it."
        ) from exc
    faults.point(f"{op}.after_journal_remove")
    return written


def _where(root: str, exc: OSError) -> str:
    if not exc.filename:
        return "your tree"
    rel = os.path.relpath(os.fsdecode(exc.filename), root)
    return "a file" if rel.startswith("..") else repr(rel.replace(os.sep, "/"))


def _remedy(exc: OSError | Exception) -> str:
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or code == errno.EDQUOT:
        return "Free some space"
    if code == errno.EROFS:
        return "Make the file system writable"
    if code in (errno.EACCES, errno.EPERM):
        return "Fix the permissions"
    return "Fix the cause"


def _again(j: ApplyJournal) -> str:
    return f"sandbox {j.op} {j.run_id}"


def _roll_back_failed(
    run: Run, j: ApplyJournal, temps: journal.Temps, written: list[str], stage: str, exc: Exception
) -> journal.WriteFailedError:
    """Undo the files of a failed operation and its journal; the error that says what happened."""
    what = journal.describe(exc) if isinstance(exc, OSError) else str(exc).rstrip(".")
    head = f"The {j.op} of run {run.run_id} failed {stage} ({what})"
    try:
        journal.play(run.repo, j.target_dir, j.entries, "rollback.after_file", reverse=True, temps=temps)
        journal.clear_temps(run.project, j, j.target_dir)
        journal.remove(run.project, j.target_dir)
    except (OSError, SandboxError) as again:
        reason = journal.describe(again) if isinstance(again, OSError) else str(again).rstrip(".")
        return journal.WriteFailedError(
            f"{head} after writing {len(written)} path(s), and putting them back failed too ({reason}); the journal "
            f"is kept: {_remedy(exc).lower()}, then run 'sandbox apply --continue {run.run_id}' to finish the "
            f"{j.op} or 'sandbox undo {run.run_id}' to reverse it."
        )
    done = f"the {len(written)} path(s) it had written were put back, so " if written else ""
    where = "your tree" if j.target == "user" else "the run's worktree"
    return journal.WriteFailedError(
        f"{head}; {done}nothing of {where} changed. {_remedy(exc)}, then run '{_again(j)}' again."
    )


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
    with journal.tree_lock(project, target, lock_timeout):
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
            result = plan(run, calls, paths, three_way=three_way, state=state, with_deps=with_deps)
        except OSError as exc:
            raise journal.WriteFailedError(
                f"The apply of run {run.run_id} failed while planning ({journal.describe(exc)}); nothing was "
                f"written. {_remedy(exc)}, then run 'sandbox apply {run.run_id}' again."
            ) from exc
        result.head_moved = moved
        if result.conflicts:
            refuse(result.conflicts, result.report(dry_run))
        if choice is not None:
            from sandbox.merge import hunks

            hunks.restrict(run.repo, result, choice)
            # A choice may leave out the deletion that clears the way for a chosen path (a file the
            # agent turned into a directory): the structure is checked again, before any write.
            by_path = {p.path: p for p in result.paths}
            for p in result.writes:
                obstacles.check_structure(target, p, by_path)
            if result.conflicts:
                for p in result.conflicts:
                    p.hint = "choose the change that removes what is in the way too, or leave this path out"
                refuse(result.conflicts, result.report(dry_run))
        report = result.report(dry_run)
        newly = [c for c in result.fully_applied if not state.calls[c].applied]
        user_paths = state.data.user_paths
        changed = [p for p in result.paths if p.record is not None and p.record != user_paths.get(p.path)]
        if dry_run or (not result.writes and not newly and not changed):
            return report
        event = run.new_event(
            EventKind.apply_finished,
            data={
                "target": "user",
                "workdir": target,
                "selected": result.calls,
                "calls": result.fully_applied,
                "newly": newly,
                "paths": [PathRecordUpdate.of(p.path, p.record).to_data() for p in changed],
                "prior": [u.to_data() for u in prior_records(user_paths, [p.path for p in changed])],
                "merged": report.merged,
                "moves": [move_of(p.path, p.user.state, p.write) for p in result.writes],
            },
        )
        keep_users_files(run, target, result.writes)
        entries = journal_entries(run.repo, target, result.writes)
        j = ApplyJournal(
            op="apply",
            run_id=run.run_id,
            target="user",
            target_dir=target,
            calls=result.calls,
            entries=entries,
            event=event,
            pid=os.getpid(),
            token=journal.new_token(),
        )
        written = execute(run, j, progress=progress)
        return result.report(written=written)


def keep_users_files(run: Run, root: str, writes: list[PlannedPath]) -> None:
    """Store the user's version of each path about to be written, so ``sandbox undo`` can put it back
    (an edit of theirs under a 3-way merge, a state the sandbox never wrote, is not in any object store)."""
    repo = run.repo
    conv = convert.for_tree(root)
    with objects.git_writes():
        for p in writes:
            state = p.user.state
            if state is None or state.oid in repo:
                continue
            full = os.path.join(root, p.path)
            if p.user.kind == "link":
                data = os.fsencode(os.readlink(full))
            else:
                with open(full, "rb") as fh:
                    data = conv.clean_bytes(p.path, fh.read())
            objects.write_blob(repo, data)  # the apply's plan still checks the file against state.oid


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


def continue_pending(project: Project, workdir: str, lock_timeout: float = 30.0) -> ApplyReport | None:
    """Finish the interrupted apply, undo or redo journaled for ``workdir``; None when none is pending.

    Idempotent: each path is at its before or after state; those at before are written. A path at
    neither (changed since) stops it with nothing written and the journal kept.
    """
    with journal.tree_lock(project, workdir, lock_timeout):
        j = journal.load(project, workdir)
        if j is None:
            return None
        bad = journal.check(workdir, j.entries)
        if bad:
            raise journal.TreeChangedError(
                f"Cannot finish the interrupted {j.op}: {', '.join(bad[:5])} changed since; nothing was written. "
                "Put them back or roll the operation back with 'sandbox undo'."
            )
        run = Run.open(project, j.run_id)
        with run.lock():
            state = run.state()
            recorded = j.event.event_id in state.event_ids
            if j.target == "sandbox" and not recorded and state.head != j.old_head:
                raise SandboxError(
                    f"Run {run.run_id} moved on since the interrupted {j.op}; roll it back with 'sandbox undo'."
                )
            written: list[str] = []
            try:
                journal.clear_temps(project, j, workdir)
                temps = journal.temps_of(project, j)
                journal.play(run.repo, workdir, j.entries, "continue.after_file", on_write=written.append, temps=temps)
                run.record_event(j.event, keep=[c for c in (j.old_head, j.new_head) if c])
                if j.target == "sandbox":
                    run.head()
                journal.remove(project, workdir)
            except OSError as exc:
                raise journal.WriteFailedError(
                    f"Could not finish the interrupted {j.op} of run {run.run_id} ({journal.describe(exc)}); the "
                    f"journal is kept: {_remedy(exc).lower()}, then run 'sandbox apply --continue {run.run_id}' "
                    f"again, or 'sandbox undo {run.run_id}' to reverse it."
                ) from exc
        return ApplyReport(
            op=j.op,
            run=j.run_id,
            target=j.target,
            target_dir=workdir,
            calls=j.calls,
            applied=written if j.op != "undo" else [],
            restored=written if j.op == "undo" else [],
            skipped=[e.path for e in j.entries if e.path not in written],
            recovered="continued",
        )
