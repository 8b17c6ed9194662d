"""Renames: a path the agent deleted whose content lives on at a path it added, as git detects them.

The ledger records a rename as what it is on disk, a deletion and an addition. For review and
merge-back the pair matters: a user who edited the old path must not see their edit dropped with
it. :func:`find` pairs deleted and added paths as ``git diff -M`` does (the same blob first, then
text whose lines are at least half the same, the best match once each); it looks only at the paths
given, so it costs O(changed paths).

:func:`follow` is the apply's use of it: a path the user edited that the agent renamed is, under
``--3way``, merged into the new path (git's merge: your edit of the old path, the base, the agent's
new file) and deleted at the old one; without ``--3way`` the refusal names the rename.
"""

from __future__ import annotations

from collections.abc import Mapping

import pygit2

from sandbox.fast import renamepairs
from sandbox.merge import brings, decide, select, threeway
from sandbox.merge.planned import PlannedPath
from sandbox.models import LedgerState
from sandbox.run.run import Run
from sandbox.store import convert, objects
from sandbox.store.journal import State
from sandbox.store.objects import Entry


def find(repo: pygit2.Repository, deleted: Mapping[str, State], added: Mapping[str, State]) -> dict[str, str]:
    """Old path -> new path for each deleted path whose content lives on at an added one
    (:func:`sandbox.fast.renamepairs.pair`, reading blobs with libgit2)."""
    return renamepairs.pair(
        {path: state for path, state in deleted.items() if state is not None},
        {path: state for path, state in added.items() if state is not None},
        lambda oid: objects.read_blob(repo, oid),
    )


def follow(run: Run, root: str, paths: list[PlannedPath], three_way: bool) -> None:
    """Carry the user's edit of a path the agent renamed into the new path (``three_way``), or name the
    rename in the refusal. Only conflicts that are the user's edit of a deleted path are looked at."""
    edited = {
        p.path: p
        for p in paths
        if p.action == "conflict" and not p.obstacle and not p.waits and p.agent is None and p.base is not None
    }
    if not edited:
        return
    added = {p.path: p for p in paths if p.base is None and p.agent is not None and p.action == "write"}
    pairs = find(run.repo, {path: p.base for path, p in edited.items()}, {path: p.agent for path, p in added.items()})
    for old, new in pairs.items():
        p_old, p_new = edited[old], added[new]
        if p_old.user.kind != "file" or p_old.user.entry is None:
            continue
        if not three_way:
            decide.conflict(
                p_old,
                f"the agent renamed it to {new!r}; you edited it",
                f"take your edit along into {new!r} with --3way, or leave both out (--exclude PATH --exclude "
                f"{select.exclude_arg(new)})",
            )
            continue
        _merge(run, root, p_old, p_new)


def _merge(run: Run, root: str, p_old: PlannedPath, p_new: PlannedPath) -> None:
    """git's merge of a rename: the user's old file, the base, the agent's new file, written at the new path."""
    repo = run.repo
    assert p_old.base is not None and p_new.agent is not None
    with open(f"{root}/{p_old.path}", "rb") as fh:
        yours = convert.for_tree(root).clean_bytes(p_old.path, fh.read())
    base = objects.read_blob(repo, p_old.base.oid)
    theirs = objects.read_blob(repo, p_new.agent.oid)
    if b"\0" in yours[:8000] or b"\0" in theirs[:8000]:
        p_old.reason = f"the agent renamed it to {p_new.path!r}; you edited it (binary: --3way cannot merge it)"
        return
    merged, conflicts = threeway.merge_text(run.project, yours, base, theirs)
    decide.renamed(p_old, p_new, Entry(p_new.agent.mode, objects.write_blob(repo, merged)), conflicts > 0)


def note_split(
    run: Run, state: LedgerState, calls: list[str] | None, with_deps: bool, paths: list[PlannedPath]
) -> None:
    """A pathspec that takes one side of a rename and leaves out the other: say so on the side written
    (both files end up in the user's tree, or neither has the content)."""
    whole = brings.brings(run, state, calls, None, with_deps, check=False)
    deleted = {p: c[0].before for p, c in whole.chains.items() if c[-1].after is None and c[0].before is not None}
    added = {p: c[-1].after for p, c in whole.chains.items() if c[0].before is None and c[-1].after is not None}
    if not deleted or not added:
        return
    by_path = {p.path: p for p in paths}
    for old, new in find(run.repo, deleted, added).items():
        if (old in by_path) == (new in by_path):
            continue
        p = by_path.get(old) or by_path[new]
        if p.action != "write" or p.reason:
            continue
        if p.path == new:
            p.reason = f"renamed from {old!r} by the agent; {old!r} is left out, so both are in your tree"
        else:
            p.reason = f"renamed to {new!r} by the agent; {new!r} is left out, so its content is in neither"
