"""Sparse checkouts: a path the checkout excludes (skip-worktree) is absent on disk but not deleted.

git keeps such a path in the index with its skip-worktree bit and leaves it out of the working
tree (``git sparse-checkout set --cone DIR``); a run's worktree (its own git dir) starts fully
checked out, and the agent may narrow it the same way. A missing file there means "not checked
out", never "you deleted it": the snapshot
(``git add -A`` keeps skip-worktree entries), capture (:mod:`sandbox.store.capture`) and apply planning
(:mod:`sandbox.merge.planning`) ask this module before reading absence as a deletion.

libgit2 does not expose the skip-worktree bit, so the index is listed with ``git ls-files -t``;
that costs O(index), paid only in trees whose git dir has a sparse-checkout file, and only when
an absent tracked path is met.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from sandbox.store.gitcli import git
from sandbox.store.objects import Entry


def _git_dir(workdir: str) -> str | None:
    dotgit = os.path.join(workdir, ".git")
    if os.path.isdir(dotgit):
        return dotgit
    try:
        with open(dotgit, encoding="utf-8") as fh:
            line = fh.read().strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return os.path.join(workdir, line[len("gitdir:") :].strip())


def may_be_sparse(workdir: str) -> bool:
    """True when the working tree has sparse-checkout patterns (cheap: one stat)."""
    gitdir = _git_dir(workdir)
    return gitdir is not None and os.path.exists(os.path.join(gitdir, "info", "sparse-checkout"))


def excluded(workdir: str, rels: Iterable[str] | None = None) -> dict[str, Entry]:
    """The paths (of ``rels``, or all) that the tree's sparse checkout excludes, with their index entries."""
    wanted = sorted(set(rels)) if rels is not None else None
    if wanted == [] or not may_be_sparse(workdir):
        return {}
    spec = [":(literal)" + r for r in wanted] if wanted is not None else []
    proc = git(["ls-files", "-t", "-s", "-z", "--", *spec], cwd=workdir, check=False)
    if proc.returncode != 0:
        return {}
    out: dict[str, Entry] = {}
    for record in proc.stdout.split(b"\0"):
        # "S <mode> <oid> <stage>\t<path>"; S marks a skip-worktree entry
        if not record.startswith(b"S "):
            continue
        meta, _, path = record.partition(b"\t")
        parts = meta.split()
        if len(parts) == 4 and parts[3] == b"0":
            out[os.fsdecode(path)] = Entry(int(parts[1], 8), parts[2].decode())
    return out
