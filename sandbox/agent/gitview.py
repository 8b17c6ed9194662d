"""Your ``.git`` as a run sees it: default deny, only the objects its git borrows.

A run's git is a repository of its own (:mod:`sandbox.store.worktree`): its own HEAD, refs, index,
config, hooks and logs in the run's ``git/`` directory, with ``commondir`` naming that directory
itself, and your objects reached through ``objects/info/alternates``. So of your common git
directory it needs ``objects/`` alone (and, for Git LFS, ``lfs/objects``, which git-lfs finds beside
an alternate). Everything else there is yours or another run's: your branches, tags and stash
(``refs/``, ``packed-refs``), reflogs (``logs/``), ``ORIG_HEAD``, ``FETCH_HEAD``, the commit message
you are writing, the admin directories of your linked worktrees (``worktrees/``), hooks, ``info/``,
submodules' git dirs (``modules/``, with their configs), and every run's refs (``refs/sandbox/<run>``).

Inside a run's sandbox the common directory is an empty read-only directory, with ``objects/`` (and
``lfs/objects``) bound back read-only; the sandbox's own files in ``.git/sandbox`` keep their rule
(this run's directory and the host's socket directory bound back, :mod:`sandbox.agent.sandboxpolicy`).

A run made before homes existed (``legacy``) is a linked worktree of your repository: its git reads
your refs and config through ``commondir``. It keeps the older view (the whole ``.git`` read-only,
configs masked) until ``sandbox gc`` moves it into a home.

What this does not make private: the objects themselves. Every object in your store is readable by
id and listed by ``git cat-file --batch-all-objects``, and the host records every run's calls into
that store, so run a can list and read run b's recorded files (docs/confinement.md, "What is not
private yet"). Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import os

from sandbox.store import layout

#: What of your common git dir a run's git reads (read-only), relative to it.
BORROWED = ("objects", os.path.join("lfs", "objects"))

WHY = "your repository's git directory (refs, stash, reflogs, hooks, other runs' refs): the run's git has its own"


def user_git_view(common_dir: str, run_id: str) -> tuple[dict[str, str], list[str]]:
    """(directories to hide, each with why; paths below them to bind back read-only) for a command of
    run ``run_id``: your common git dir hidden but for :data:`BORROWED`. Nothing for a legacy run,
    whose git is a linked worktree of yours and reads your refs and config."""
    if layout.place_of(common_dir, run_id).legacy:
        return {}, []
    real = os.path.realpath(common_dir)
    if real == "/" or not os.path.isdir(real):
        return {}, []
    borrowed = [os.path.join(real, rel) for rel in BORROWED]
    return {real: WHY}, [os.path.realpath(p) for p in borrowed if os.path.isdir(p)]
