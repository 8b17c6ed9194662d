"""A plan cut down to the chosen hunks (``apply --hunks``, ``--hunks-from``, the ui's picked hunks).

:mod:`sandbox.merge.hunks` says what a file's hunks are and what a choice takes from them; this
module applies that to an apply's plan: a path none of whose hunks was chosen is left out
(:func:`sandbox.merge.decide.left_out`), a path taken in part gets a new blob (the base with the
chosen changes) and a ``user_paths`` record carrying the :class:`~sandbox.models.PartialApply`, and
a call stays "fully applied" only when none of its paths was cut.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pygit2

from sandbox.merge import decide, hunks, threeway
from sandbox.merge.planned import ApplyPlan, PlannedPath, state_record
from sandbox.models import HunkTaken, PartialApply, UserPathRecord
from sandbox.run.run import Run
from sandbox.store import convert, journal, objects
from sandbox.store.journal import State
from sandbox.store.objects import Entry


def for_path(repo: pygit2.Repository, p: PlannedPath) -> hunks.FileHunks:
    """The hunks a planned write offers: from the chain's start (or an earlier partial's base) to the agent."""
    fh = hunks.file_hunks(repo, p.path, p.base, p.agent)
    if p.partial_from is not None:
        fh.taken = [h.id for h in p.partial_from.hunks]
    return fh


def offered(repo: pygit2.Repository, plan: ApplyPlan) -> list[hunks.FileHunks]:
    """The hunks of every planned write and of every file the user edited that hunks can be placed
    on, in path order (what ``apply --hunks`` asks about)."""
    out = []
    for p in plan.paths:
        if p.action in ("write", "merge") or p.action == "conflict":
            fh = for_path(repo, p)
            if p.action != "conflict" or onto_yours_possible(p, fh):
                out.append(fh)
    return out


def restrict(
    run: Run,
    plan: ApplyPlan,
    choice: hunks.Choice,
    user_paths: Mapping[str, UserPathRecord],
    three_way: bool = False,
) -> None:
    """Cut ``plan`` down to what ``choice`` takes: whole paths, partial paths (a new blob), or none.

    Only paths with a chosen hunk are looked at: every other path is left out, whatever its verdict.
    A chosen hunk of a file the user edited is placed on the user's file where its context still
    matches (:func:`~sandbox.merge.hunks.onto_yours`); one that touches the user's change makes the
    path a conflict naming it, or, with ``three_way``, a 3-way merge with conflict markers.

    Raises :class:`~sandbox.merge.hunks.HunkSelectionError` for ids that name nothing this apply would
    write, and when the rest of a file holding an edited hunk would be taken only in part.
    """
    with objects.batch(run.repo):  # the new blobs in one pack: one fsync'd write, not one per file
        _restrict(run, plan, choice, user_paths, three_way)


def _restrict(
    run: Run, plan: ApplyPlan, choice: hunks.Choice, user_paths: Mapping[str, UserPathRecord], three_way: bool
) -> None:
    repo = run.repo
    known: set[str] = set()
    left_out: set[str] = set()
    for p in [p for p in plan.paths if p.action != "skip"]:
        fh = for_path(repo, p)
        known |= fh.all_ids() | set(choice.edits)
        if not (fh.all_ids() & (choice.ids | set(choice.edits))):
            decide.left_out(p, "left out: none of its hunks was chosen")
            left_out.add(p.path)
            continue
        if p.action == "conflict":
            if onto_yours_possible(p, fh):
                _onto_yours(run, p, fh, choice, user_paths.get(p.path), three_way)
                if p.record is None or p.record.partial is not None:
                    left_out.add(p.path)
            continue
        taken = hunks.take(fh, choice)
        if taken is None:
            decide.left_out(p, "left out: none of its hunks was chosen")
            left_out.add(p.path)
            continue
        if taken.whole:
            continue
        _in_part(repo, p, fh, taken)
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


def _in_part(repo: pygit2.Repository, p: PlannedPath, fh: hunks.FileHunks, taken: hunks.Taken) -> None:
    """Write the base with the chosen changes (the user's file is the base, or an earlier partial apply)."""
    partial = p.partial_from
    if partial is not None and partial.edited:
        raise hunks.HunkSelectionError(
            f"{p.path!r} holds a hunk you edited in an earlier 'apply --hunks'; take the rest of it whole "
            "(apply without --hunks) or undo that apply first."
        )
    wrote = hunks.write_taken(repo, fh, taken)
    assert p.record is not None and wrote is not None
    base = fh.before
    record = _partial_record(p.record, p, fh, wrote, base, taken.ids, taken.headers, taken.edited)
    decide.taken_in_part(p, wrote, record, taken.ids, _reason(fh, taken.ids, taken.edited))


def _reason(fh: hunks.FileHunks, ids: list[str], edited: bool, where: str = "") -> str:
    changes = {c.id for c in fh.changes}
    reason = f"partly: {len([i for i in ids if i in changes])} of {len(changes)} change(s){where}"
    return reason + (", with an edited hunk" if edited else "")


def _partial_record(
    record: UserPathRecord,
    p: PlannedPath,
    fh: hunks.FileHunks,
    wrote: State,
    base: State,
    ids: list[str],
    headers: list[str],
    edited: bool,
) -> UserPathRecord:
    """The ``user_paths`` record of a partial apply: ``base`` is what undoing it puts back."""
    partial = PartialApply(
        base_mode=base.mode if base else None,
        base_oid=base.oid if base else None,
        agent_mode=fh.after.mode if fh.after else None,
        agent_oid=fh.after.oid if fh.after else None,
        calls=p.calls,
        hunks=[HunkTaken(id=i, header=h) for i, h in zip(ids, headers, strict=True)],
        edited=edited,
    )
    assert wrote is not None
    update = {"mode": wrote.mode, "oid": wrote.oid, "target_mode": wrote.mode, "target_oid": wrote.oid}
    return record.model_copy(update={**update, "partial": partial})


def onto_yours_possible(p: PlannedPath, fh: hunks.FileHunks) -> bool:
    """True for a conflict that is only the user's own edit of a text file both sides keep: chosen
    hunks can be placed on the user's file (``git apply``'s way) instead of refusing it whole."""
    gaps = any(p.steps[j].after != p.steps[j + 1].before for j in range(len(p.steps) - 1))
    user = p.user.entry
    return (
        fh.text
        and not (gaps or p.obstacle or p.waits)
        and p.user.kind == "file"
        and user is not None
        and fh.before is not None
        and user.mode == fh.before.mode
    )


def _onto_yours(
    run: Run,
    p: PlannedPath,
    fh: hunks.FileHunks,
    choice: hunks.Choice,
    prior: UserPathRecord | None,
    three_way: bool,
) -> None:
    """Place the chosen hunks of ``fh`` on the user's edited file, or refuse naming the one in the way."""
    repo, user = run.repo, p.user.entry
    assert user is not None and fh.before is not None
    earlier = prior.partial if prior is not None and decide.written_state(prior) == user else None
    if earlier is not None:
        fh.taken = [h.id for h in earlier.hunks]  # taken before: in the file already, and not offered again
    fresh = hunks.FileHunks(fh.path, fh.before, fh.after, fh.id, fh.text, fh.old, fh.hunks)
    # Only the replacements are placed on the user's file: the base with them made is not needed.
    taken = hunks.take(fresh, hunks.Choice(ids=choice.ids - set(fh.taken), edits=choice.edits), content=False)
    if taken is None:
        decide.left_out(p, "left out: the chosen hunks are in your file already")
        return
    with open(os.path.join(run.user_workdir, p.path), "rb") as f:
        yours = convert.for_tree(run.user_workdir).clean_bytes(p.path, f.read())
    if not hunks.is_text(yours):
        decide.conflict(p, "your file is binary now; the agent's hunks are text", "leave this path out")
        return
    placed = hunks.onto_yours(fh.old, yours, taken.parts)
    markers = False
    if isinstance(placed, hunks.Overlap):
        if not three_way:
            header, hunk_id = taken.headers[placed.index], taken.ids[placed.index]
            decide.conflict(
                p,
                f"the chosen hunk {header} ({hunk_id}) touches your change to line(s) {placed.first}-{placed.last}",
                "take it with conflict markers (--3way), leave that hunk out, or see both with 'sandbox conflicts'",
            )
            return
        theirs = hunks.assemble(fh.old, taken.parts)
        placed, conflicts = threeway.merge_text(run.project, yours, b"".join(fh.old), theirs)
        markers = conflicts > 0
    # Your file as it is, in the same pack as the result (undo puts it back; keep_users_files then has it).
    objects.write_blob(repo, yours)
    wrote = Entry(user.mode, objects.write_blob(repo, placed))
    ids = [h.id for h in earlier.hunks] + taken.ids if earlier else taken.ids
    headers = [h.header for h in earlier.hunks] + taken.headers if earlier else taken.headers
    if {c.id for c in fh.changes} <= set(ids) and not taken.edited:
        record = state_record(wrote, fh.after, p.calls)  # all of the agent's change, and the user's edit kept
    else:
        base = journal.entry_state(earlier.base_mode, earlier.base_oid) if earlier else user
        edited = taken.edited or bool(earlier and earlier.edited)
        record = _partial_record(state_record(wrote, wrote, p.calls), p, fh, wrote, base, ids, headers, edited)
    reason = _reason(fh, ids, taken.edited, " onto your edits")
    if record.partial is None:
        reason = "all of the agent's change, placed on your edits"
    decide.onto_yours(p, wrote, record, taken.ids if record.partial else None, reason, markers)


def _touches(plan: ApplyPlan, call_id: str, paths: set[str]) -> bool:
    return any(call_id in p.calls for p in plan.paths if p.path in paths)
