"""Finding the paths that may differ between a worktree and the run's head, without a watcher.

This is the fallback when no watcher can vouch for a call (none running, or its queue overflowed).
It must be correct, not fast: every path where the worktree may differ from the run's head is
returned, and :mod:`sandbox.capture` confirms each one by content hash.

It asks ``git status`` in the worktree (index vs. files, with git's stat cache, and untracked files
not ignored) and adds the paths where the worktree's own HEAD tree differs from the run's head tree.
Together these cover every difference even after the agent ran ``git commit``, ``git add`` or
``git reset`` in the worktree. git's status is used over libgit2's because it is about twice as
fast on large trees (see docs/design.md).
"""

from __future__ import annotations

import os

import pygit2

from sandbox import objects
from sandbox.gitcli import git


def candidates(repo: pygit2.Repository, worktree: str, run_head_tree: str | None) -> set[str]:
    """Every path that may differ between the files of ``worktree`` and ``run_head_tree``."""
    out: set[str] = set()
    proc = git(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=all",
        ],
        cwd=worktree,
        # The run's own worktree index may be refreshed (when no git of the agent's holds its lock):
        # otherwise every scan re-hashes the files git cannot trust by timestamp.
        optional_locks=True,
    )
    for record in proc.stdout.split(b"\0"):
        if len(record) > 3:
            out.add(os.fsdecode(record[3:]))
    wt, wt_head_tree = _worktree_head_tree(worktree)
    if wt_head_tree != run_head_tree:
        # A commit the agent made in the run is in the run's own object store, which reaches the
        # user's store through its alternates; anything else is read (verified) from the user's.
        source = repo if wt is None or wt_head_tree is None or repo.odb.exists(wt_head_tree) else wt
        for change in objects.diff_trees(source, wt_head_tree, run_head_tree):
            out.add(change.path)
    return out


def _worktree_head_tree(worktree: str) -> tuple[pygit2.Repository | None, str | None]:
    try:
        wt = pygit2.Repository(worktree)
        if wt.head_is_unborn:
            return wt, None
        return wt, str(wt.head.peel(pygit2.Tree).id)
    except (pygit2.GitError, KeyError):
        return None, None
