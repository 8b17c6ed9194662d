"""What a run brings to this clone: the one decision every review and every apply reads.

``diff``, ``apply`` (and its ``--dry-run``), ``conflicts``, ``--hunks``, ``branch``, ``compare``
and the MCP diff all call :func:`brings`, so the patch a user reviewed is, byte for byte, the
patch that lands. It is computed from the run's commits, never from the file lists the ledger's
events carry (a fetched ledger could list a path its commit does not hold):

* the calls that count are the *live* ones: a commit of their own, not undone in the run (an undo
  in the user's tree leaves the run as it was), not taken out of the run's head by
  ``rollback --files`` (``LedgerEntry.rolled_back``);
* each live call's change is the tree diff between its commit and its parent (only the trees on
  the changed paths are read, so the cost follows the changed paths, not the size of the tree);
* per path, the selected calls form a chain of states ``before -> ... -> after``; a path whose
  parent became a file (or the other way round) is two paths of the chain, one per side, each
  planned, checked and journaled on its own (type changes);
* pathspecs, ``--exclude`` and ``--call`` restrict it; the sandbox's own files never count.

What this clone already has is not subtracted here but decided per path by the apply plan
(:mod:`sandbox.merge.decide`): the user's file equal to the chain's end is "already applied".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sandbox.errors import PathRefusedError, SandboxError
from sandbox.fast.pathspec import Pathspec
from sandbox.merge import select
from sandbox.models import LedgerEntry, LedgerState
from sandbox.run.run import Run
from sandbox.store import objects, paths
from sandbox.store.objects import Entry

State = Entry | None


@dataclass
class Step:
    """One selected call's change to one path."""

    call_id: str
    before: State
    after: State


@dataclass
class Brings:
    """What a selection of a run brings: per path, the chain of the selected calls' changes."""

    run_id: str
    selected: list[LedgerEntry]
    chains: dict[str, list[Step]] = field(default_factory=dict)

    @property
    def calls(self) -> list[str]:
        """The selected calls, in ledger order."""
        return [e.call_id for e in self.selected]

    def first(self) -> dict[str, State]:
        """Each path's state before the first selected call that changed it."""
        return {path: steps[0].before for path, steps in self.chains.items()}

    def last(self) -> dict[str, State]:
        """Each path's state after the last selected call that changed it (what an apply writes)."""
        return {path: steps[-1].after for path, steps in self.chains.items()}

    def changed(self) -> list[str]:
        """The paths whose end state differs from their start (what a diff shows), sorted."""
        return sorted(p for p, steps in self.chains.items() if steps[0].before != steps[-1].after)


def call_changes(run: Run, entry: LedgerEntry) -> Iterator[tuple[str, State, State]]:
    """``(path, before, after)`` for each path the call's commit changed, from the trees themselves."""
    if not entry.commit:
        return
    for change in objects.commit_changes(run.repo, entry.parent_commit, entry.commit):
        yield change.path, change.old, change.new


def select_calls(run: Run, state: LedgerState, calls: list[str] | None) -> list[LedgerEntry]:
    """The live calls a ``--call`` selection names (all live calls without one), in ledger order.

    Naming an undone call refuses (redo brings it back); naming a rolled-back one refuses too.
    """
    if not calls:
        return select.live_calls(state)
    for given in calls:
        if ".." in given and given not in state.calls:
            continue  # a range: undone and rolled-back calls in it are simply not taken
        entry = select.resolve_name(state, run.run_id, given)
        if entry.call_id in select.undone_in_run(state):
            raise SandboxError(
                f"Call {entry.call_id} was undone; bring it back with 'sandbox redo {run.run_id}' instead."
            )
        if entry.rolled_back:
            raise SandboxError(
                f"Call {entry.call_id} was rolled back ('sandbox rollback --files'): the run's files no longer "
                f"hold its change; see 'sandbox log {run.run_id}'."
            )
    chosen = set(select.expand(state, run.run_id, calls))
    return [e for e in select.live_calls(state) if e.call_id in chosen]


def brings(
    run: Run,
    state: LedgerState | None = None,
    calls: list[str] | None = None,
    spec: Pathspec | None = None,
    with_deps: bool = False,
    check: bool = True,
) -> Brings:
    """What the run (or the named calls, or the paths ``spec`` selects) brings, from its commits.

    ``with_deps`` adds the earlier calls the selected ones build on; ``check`` refuses a positive
    pathspec that matches none of the changes (as git does). Raises :class:`PathRefusedError` for
    an odd path in a commit.
    """
    state = state or run.state()
    selected = select_calls(run, state, calls)
    if with_deps and calls:
        selected = select.with_dependencies(run, state, selected, spec)
    chains: dict[str, list[Step]] = {}
    for entry in selected:
        for path, before, after in call_changes(run, entry):
            if run.is_private(path):
                continue  # the sandbox's own files (hook settings) are never the agent's patch
            if paths.normalize(path) != path:
                raise PathRefusedError(f"The run's commit holds the odd path {path!r}; it is not applied.")
            chains.setdefault(path, []).append(Step(entry.call_id, before, after))
    if spec is not None:
        if check:
            select.check_matched(spec, chains, run.run_id)
        chains = {p: s for p, s in chains.items() if spec.matches(p)}
    return Brings(run.run_id, selected, dict(sorted(chains.items())))


def trees(run: Run, result: Brings) -> tuple[str, str]:
    """Two trees for a text diff of ``result``: the base with each path at its start, and at its end.

    For the whole run these are the base and the head's trees on every path a live call changed.
    """
    repo = run.repo
    base = objects.commit_tree(repo, run.base)
    with objects.git_writes():
        old = objects.edit_tree(repo, base, result.first())
        new = objects.edit_tree(repo, base, result.last())
    return old, new
