"""The plan of an apply, undo or redo: what it will do with each path, and the reports made of it.

A :class:`PlannedPath` carries one path's evidence (the chain of the selected calls' states, the
user's file as probed) and its verdict (``action``: write, merge, skip or conflict, with a reason
and a hint). Only :mod:`sandbox.merge.decide` sets the verdict; planning
(:mod:`sandbox.merge.planning`), the obstacles found in the tree (:mod:`sandbox.merge.obstacles`),
a choice of hunks (:mod:`sandbox.merge.partial`) and the writing (:mod:`sandbox.merge.writing`)
read and pass these types around. The ``user_paths`` records an apply leaves in the ledger are
built here too, from the states a plan names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sandbox.merge import select
from sandbox.merge.brings import Step
from sandbox.models import (
    ApplyAction,
    ApplyReport,
    ConflictReport,
    PartialApply,
    PathMove,
    PathRecordUpdate,
    UserPathRecord,
)
from sandbox.store.journal import Probe, State


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
                    if p.action == "skip" or p.path in merged or (p.path in applied and p.reason)
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
