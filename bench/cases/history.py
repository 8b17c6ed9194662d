"""Your committed history as runs see it (issue #31 item 6, ``sandbox/store/history.py``): what it costs.

- **First build**: the history store made from nothing (``history.shown`` after its directory is removed:
  ``git pack-objects --revs`` of what your branches and tags reach), against ``git clone --bare
  --no-local`` of the repository into a scratch directory (the cost of copying your history through git's
  own transport, which packs the same objects).
- **Per confined command, nothing new**: ``history.shown`` when your tips have not moved (the ref files
  read, the store's tips compared, its lock taken), against the spawn of one ``git rev-parse HEAD``.
- **After one new commit**: the pack of what it adds appended (a commit on a scratch branch, then
  ``history.shown``), reported only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from bench.cases import Context, rotate
from bench.genrepo import Repo, git
from bench.results import Results, Target

CASE = "history"


def run(ctx: Context, repo: Repo) -> None:
    """First build against a bare clone; the per-command check against one git spawn; one commit's pack."""
    from sandbox.store import history, layout

    res = ctx.results
    common = os.path.join(repo.path, ".git")
    os.makedirs(layout.locks_dir(common), exist_ok=True)
    first = "first build of the history store"
    res.row(CASE, repo.size, first, "git clone --bare --no-local", ref=True)

    def build(i: int) -> None:
        shutil.rmtree(history.root(common), ignore_errors=True)
        t0 = time.perf_counter()
        history.shown(common)
        res.add(CASE, repo.size, first, "history.shown (pack-objects --revs)", time.perf_counter() - t0)

    def clone(i: int) -> None:
        dest = os.path.join(repo.scratch, f"history-clone{i}")
        t0 = time.perf_counter()
        subprocess.run(["git", "clone", "-q", "--bare", "--no-local", repo.path, dest], check=True)
        res.add(CASE, repo.size, first, "git clone --bare --no-local", time.perf_counter() - t0, ref=True)
        shutil.rmtree(dest)

    for i in ctx.rounds(5, budget=60):
        for fn in rotate([build, clone], i):
            fn(i)  # type: ignore[operator]
    _steady(ctx, res, repo, common)


def _steady(ctx: Context, res: Results, repo: Repo, common: str) -> None:
    from sandbox.store import history

    group = "per confined command, your tips unchanged"
    res.row(CASE, repo.size, group, "one git rev-parse HEAD", ref=True)

    def ours(_i: int) -> None:
        t0 = time.perf_counter()
        history.shown(common)
        res.add(CASE, repo.size, group, "history.shown", time.perf_counter() - t0)

    def spawn(_i: int) -> None:
        t0 = time.perf_counter()
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo.path, capture_output=True, check=True)
        res.add(CASE, repo.size, group, "one git rev-parse HEAD", time.perf_counter() - t0, ref=True)

    for i in ctx.rounds(30, budget=20):
        for fn in rotate([ours, spawn], i):
            fn(i)  # type: ignore[operator]
    group = "after one new commit"
    head = git(["rev-parse", "HEAD"], cwd=repo.path).decode().strip()
    for i in ctx.rounds(5, budget=20):  # each on the last: a branch moved forward, never rewound
        tree = git(["rev-parse", "HEAD^{tree}"], cwd=repo.path).decode().strip()
        env = {"GIT_AUTHOR_DATE": f"{1700000000 + i} +0000", "GIT_COMMITTER_DATE": f"{1700000000 + i} +0000"}
        commit = git(["commit-tree", "-p", head, "-m", f"bench {i}", tree], cwd=repo.path, env=env).decode().strip()
        git(["update-ref", "refs/heads/bench-history", commit], cwd=repo.path)
        head = commit
        t0 = time.perf_counter()
        history.shown(common)
        res.add(CASE, repo.size, group, "history.shown (one pack appended)", time.perf_counter() - t0)
    git(["update-ref", "-d", "refs/heads/bench-history"], cwd=repo.path)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """No number was set: reported only."""
    return []
