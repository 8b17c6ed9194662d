"""Selecting what to take from a run: calls (single names and ranges), paths (git pathspecs), and
the calls a selection depends on.

A *range* ``A..B`` is every call from A to B inclusive, in ledger order; ``..B`` starts at the
first call and ``A..`` ends at the last. The ends are resolved by the one resolver of call names
(:mod:`sandbox.run.names`: an id, ``@`` and ``@~N``, a ledger number, a unique prefix); this module
only expands ranges (``2..@``, ``@~3..``).

A selected call *depends* on an earlier call when both change a path and the earlier one is
neither selected nor already in the user's tree for that path: the selected call's before-state
for the path is (or builds on) the earlier call's after-state. :func:`dependencies` names them so
that ``apply`` can say "apply it too" instead of blaming the user
(:func:`sandbox.merge.decide.explain_dependencies`), and ``--with-deps`` adds them.
"""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.errors import SandboxError, UnknownCallError
from sandbox.fast.pathspec import Pathspec
from sandbox.models import LedgerEntry, LedgerState
from sandbox.run import names

if TYPE_CHECKING:
    from sandbox.run.run import Run

Resolver = Callable[[LedgerState, str, str], LedgerEntry]


def resolve_name(state: LedgerState, run_id: str, given: str) -> LedgerEntry:
    """One call named as everywhere else (:func:`sandbox.run.names.find_call`: an id, ``@~N``, a
    ledger number ``5``, a unique prefix)."""
    return names.find_call([state.calls[c] for c in state.order], given, run_id)


def expand(state: LedgerState, run_id: str, names: Iterable[str], resolve: Resolver = resolve_name) -> list[str]:
    """The call ids named by ``names`` (single names and ``A..B`` ranges), in ledger order, once each.

    A single name must exist; a range takes every call between its ends, inclusive (calls that
    changed no files are simply not part of any patch).
    """
    chosen: set[str] = set()
    for name in names:
        if ".." in name and name not in state.calls:
            first, _, last = name.partition("..")
            lo = state.order.index(resolve(state, run_id, first).call_id) if first else 0
            hi = state.order.index(resolve(state, run_id, last).call_id) if last else len(state.order) - 1
            if lo > hi:
                raise UnknownCallError(
                    f"The call range {name!r} runs backwards (#{state.calls[state.order[lo]].seq} comes after "
                    f"#{state.calls[state.order[hi]].seq}); write it oldest first."
                )
            chosen.update(state.order[lo : hi + 1])
        else:
            chosen.add(resolve(state, run_id, name).call_id)
    return [c for c in state.order if c in chosen]


def carried(state: LedgerState, path: str) -> list[str]:
    """The calls whose change to ``path`` the sandbox wrote into the user's tree (and still stands)."""
    record = state.data.user_paths.get(path)
    if record is None:
        return []
    if record.partial is not None:
        return [c for c in record.calls if c not in record.partial.calls]
    return list(record.calls)


@dataclass
class Dependency:
    """A call the selection needs first: ``call`` changed ``paths`` before the selected ``needed_by``."""

    call: LedgerEntry
    paths: list[str] = field(default_factory=list)
    needed_by: list[str] = field(default_factory=list)


def undone_in_run(state: LedgerState) -> set[str]:
    """The calls an undo took out of the run itself (:meth:`LedgerState.undone_in_run`)."""
    return state.undone_in_run()


def live_calls(state: LedgerState) -> list[LedgerEntry]:
    """The calls whose changes make up the run's head (:meth:`LedgerState.live_calls`)."""
    return state.live_calls()


def dependencies(state: LedgerState, selected: Iterable[str], relevant: Callable[[str], bool]) -> list[Dependency]:
    """The unselected calls the selection depends on for the ``relevant`` paths, transitively, oldest first.

    Linear in the calls' changes: each change of a call looked at needs only the nearest earlier
    live change of its path (that call's own predecessors are found when it is looked at in turn).
    """
    chosen = set(selected)
    found: dict[str, Dependency] = {}
    #: per (path, call): the live call that changed the path just before it (None: the first one).
    previous: dict[tuple[str, str], LedgerEntry | None] = {}
    last: dict[str, LedgerEntry] = {}
    for entry in live_calls(state):
        for change in entry.files:
            if relevant(change.path) and (change.path, entry.call_id) not in previous:
                previous[(change.path, entry.call_id)] = last.get(change.path)
                last[change.path] = entry
    done: dict[str, set[str]] = {}
    queue = deque(c for c in state.order if c in chosen)
    while queue:
        call_id = queue.popleft()
        for change in state.calls[call_id].files:
            prior = previous.get((change.path, call_id))
            if prior is None:
                continue
            if change.path not in done:
                done[change.path] = set(carried(state, change.path))
            if prior.call_id in done[change.path] or prior.applied or prior.call_id in chosen:
                continue  # the user's tree has it, or it is selected (its own dependencies are looked at in turn)
            dep = found.setdefault(prior.call_id, Dependency(prior))
            if change.path not in dep.paths:
                dep.paths.append(change.path)
            if call_id not in dep.needed_by:
                dep.needed_by.append(call_id)
            queue.append(prior.call_id)
            chosen.add(prior.call_id)
    return sorted(found.values(), key=lambda d: d.call.seq)


def pathspec(specs: Iterable[str], excludes: Iterable[str] = (), prefix: str = "") -> Pathspec | None:
    """The pathspec of ``specs`` and ``--exclude`` paths given from ``prefix``; None when both are empty."""
    spec = Pathspec(list(specs), prefix, list(excludes))
    return spec if spec else None


def check_matched(spec: Pathspec | None, paths: Iterable[str], run_id: str) -> None:
    """Refuse a positive pathspec that matches none of the selected changes (as git does)."""
    if spec is None:
        return
    missing = spec.unmatched(paths)
    if missing:
        raise SandboxError(
            f"The selected changes of run {run_id} do not touch {', '.join(repr(m) for m in missing)}; "
            f"see 'sandbox diff {run_id} --stat'."
        )


def exclude_arg(path: str) -> str:
    """``path`` as an ``--exclude`` argument for the shell, valid from any directory (``:/`` is the
    top of the tree), literal when the name holds glob characters."""
    if any(c in path for c in "*?[\\"):
        return shlex.quote(":(top,literal)" + path)
    return shlex.quote(":/" + path)


def with_dependencies(
    run: Run, state: LedgerState, selected: list[LedgerEntry], spec: Pathspec | None
) -> list[LedgerEntry]:
    """``selected`` and every call it depends on for the paths ``spec`` selects, in ledger order."""

    def relevant(path: str) -> bool:
        return not run.is_private(path) and (spec is None or spec.matches(path))

    deps = dependencies(state, [e.call_id for e in selected], relevant)
    return sorted([*selected, *(d.call for d in deps)], key=lambda e: e.seq)
