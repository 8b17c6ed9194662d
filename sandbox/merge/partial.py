"""A plan cut down to the chosen hunks (``apply --hunks``, ``--hunks-from``, the ui's picked hunks).

:mod:`sandbox.merge.hunks` says what a file's hunks are and what a choice takes from them; this
module applies that to an apply's plan: a path none of whose hunks was chosen is left out
(:func:`sandbox.merge.decide.left_out`), a path taken in part gets a new blob (the base with the
chosen changes) and a ``user_paths`` record carrying the :class:`~sandbox.models.PartialApply`, and
a call stays "fully applied" only when none of its paths was cut.
"""

from __future__ import annotations

import pygit2

from sandbox.merge import decide, hunks
from sandbox.merge.planned import ApplyPlan, PlannedPath
from sandbox.models import HunkTaken, PartialApply
from sandbox.store import objects


def for_path(repo: pygit2.Repository, p: PlannedPath) -> hunks.FileHunks:
    """The hunks a planned write offers: from the chain's start (or an earlier partial's base) to the agent."""
    fh = hunks.file_hunks(repo, p.path, p.base, p.agent)
    if p.partial_from is not None:
        fh.taken = [h.id for h in p.partial_from.hunks]
    return fh


def offered(repo: pygit2.Repository, plan: ApplyPlan) -> list[hunks.FileHunks]:
    """Every planned write's hunks, in path order (what ``apply --hunks`` asks about)."""
    return [for_path(repo, p) for p in plan.writes]


def restrict(repo: pygit2.Repository, plan: ApplyPlan, choice: hunks.Choice) -> None:
    """Cut ``plan`` down to what ``choice`` takes: whole paths, partial paths (a new blob), or none.

    Raises :class:`~sandbox.merge.hunks.HunkSelectionError` for ids that name nothing this apply would
    write, and when the rest of a file holding an edited hunk would be taken only in part.
    """
    with objects.batch(repo):  # the new blobs in one pack: one fsync'd write, not one per file
        _restrict(repo, plan, choice)


def _restrict(repo: pygit2.Repository, plan: ApplyPlan, choice: hunks.Choice) -> None:
    known: set[str] = set()
    left_out: set[str] = set()
    for p in plan.writes:
        fh = for_path(repo, p)
        known |= fh.all_ids() | set(choice.edits)
        taken = hunks.take(fh, choice)
        if taken is None:
            decide.left_out(p, "left out: none of its hunks was chosen")
            left_out.add(p.path)
            continue
        if taken.whole:
            continue
        partial = p.partial_from
        if partial is not None and partial.edited:
            raise hunks.HunkSelectionError(
                f"{p.path!r} holds a hunk you edited in an earlier 'apply --hunks'; take the rest of it whole "
                "(apply without --hunks) or undo that apply first."
            )
        wrote = hunks.write_taken(repo, fh, taken)
        assert p.record is not None and wrote is not None
        base = fh.before
        partial = PartialApply(
            base_mode=base.mode if base else None,
            base_oid=base.oid if base else None,
            agent_mode=fh.after.mode if fh.after else None,
            agent_oid=fh.after.oid if fh.after else None,
            calls=p.calls,
            hunks=[HunkTaken(id=i, header=h) for i, h in zip(taken.ids, taken.headers, strict=True)],
            edited=taken.edited,
        )
        record = p.record.model_copy(
            update={
                "mode": wrote.mode,
                "oid": wrote.oid,
                "target_mode": wrote.mode,
                "target_oid": wrote.oid,
                "partial": partial,
            }
        )
        total = len(fh.changes)
        reason = f"partly: {len([i for i in taken.ids if i in {c.id for c in fh.changes}])} of {total} change(s)"
        if taken.edited:
            reason += ", with an edited hunk"
        decide.taken_in_part(p, wrote, record, taken.ids, reason)
        left_out.add(p.path)
    unknown = sorted(choice.ids - known)
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise hunks.HunkSelectionError(
            f"No change this apply would write has the hunk id(s) {shown} (already applied, left out by the "
            f"selection, or from another diff); list the ids with 'sandbox diff {plan.run_id} --json' and the "
            "same --call and paths. Nothing was written."
        )
    if left_out:
        plan.fully_applied = [c for c in plan.fully_applied if not _touches(plan, c, left_out)]


def _touches(plan: ApplyPlan, call_id: str, paths: set[str]) -> bool:
    return any(call_id in p.calls for p in plan.paths if p.path in paths)
