"""Planning an apply, undo or redo: every path decided before anything is written.

:func:`plan` takes what the run brings (:func:`sandbox.merge.brings.brings`: per path, the chain
of the selected calls' states), probes only those paths of the user's tree (lstat and hash, as
``git add`` would store them, never through a symlinked parent), and has :mod:`sandbox.merge.decide`
set each path's verdict. Then the tree around each write is checked for obstacles
(:mod:`sandbox.merge.obstacles`), conflicts of text files are merged when ``--3way`` asks for it
(:mod:`sandbox.merge.threeway`), and the calls the plan takes whole are named. :func:`plan_moves`
does the same for undo and redo, which move paths between two known states. Nothing here writes
to the user's tree (a 3-way merge stores its result as a blob).
"""

from __future__ import annotations

from sandbox.errors import SandboxError
from sandbox.fast.pathspec import Pathspec
from sandbox.merge import brings, decide, obstacles, renames, select, threeway
from sandbox.merge.brings import Step
from sandbox.merge.planned import ApplyPlan, PlannedPath
from sandbox.models import LedgerState
from sandbox.run.run import Run
from sandbox.store import convert, journal, sparse
from sandbox.store.journal import Probe, State
from sandbox.store.snapshot import user_git_dir


class NothingToApplyError(SandboxError):
    """The selected calls changed no files."""


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
        decide.decide(planned, user_paths.get(path))
        result.paths.append(planned)
    if any(p.action == "conflict" for p in result.paths):
        decide.explain_dependencies(run, state, selected, result.paths)
        decide.whose_change(run, result.paths)
    by_path = {p.path: p for p in result.paths}
    for p in result.paths:
        obstacles.check_structure(target, p, by_path)
    obstacles.check_sparse(target, user_git_dir(target), result.paths)
    renames.follow(run, target, result.paths, three_way)
    if paths:
        renames.note_split(run, state, calls, with_deps, result.paths)
    if three_way:
        for p in result.conflicts:
            if not p.obstacle:
                threeway.merge(run, target, p)
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
        decide.decide(p, None)
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
