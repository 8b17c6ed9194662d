"""Runs' private object stores (issue #31 item 6): what they add to opening a repository, to a start
and to a drop.

- Opening the repository (``Project()``, on every command's full path, not on the hook's fast one) with
  0, 10 and 30 live runs: each live run's store is added to libgit2's object database at open (libgit2
  does not follow the hub's relative alternates lines). Each sample is the mean of 20 opens.
- A run's store made at start (``runstore.create``: the directory, then the hub's list rewritten
  under its lock) and retired at drop (``runstore.retire`` of an empty store: folded into your
  objects, then the hub relisted), against ``os.mkdir`` and ``os.rmdir`` of the same directory, the
  floor of any per-run directory.

Measured at the smallest size only: the cost follows the number of runs, not the repository.
"""

from __future__ import annotations

import os
import time

from bench.cases import Context, rotate
from bench.genrepo import Repo
from bench.results import Results, Target

CASE = "runstores"
LIVE = (0, 10, 30)
OPENS = 20
STORES = 30


def run(ctx: Context, repo: Repo) -> None:
    """Open with 0/10/30 live runs; create and retire a store against mkdir/rmdir."""
    if repo.size != min(ctx.sizes):
        return
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    data_root = os.path.join(repo.scratch, "runstores-data")
    project, workdir, _ = Project.discover(repo.path, data_root)
    assert workdir is not None
    runs: list[Run] = []
    try:
        for live in LIVE:
            while len(runs) < live:
                runs.append(Run.start(project, workdir, label=f"store{len(runs)}"))
            group = "Project() open (mean of 20)"
            for _ in ctx.rounds(15, budget=20):
                t0 = time.perf_counter()
                for _ in range(OPENS):
                    Project(project.common_dir, data_root)
                res.add(CASE, repo.size, group, f"{live} live runs", (time.perf_counter() - t0) / OPENS, ref=live == 0)
        _create_retire(ctx, res, repo, project.common_dir)
    finally:
        for r in runs:
            r.drop(force=True)


def _create_retire(ctx: Context, res: Results, repo: Repo, common_dir: str) -> None:
    from sandbox.store import layout, runstore

    group = f"a run's store made and retired ({STORES} in turn)"
    res.row(CASE, repo.size, group, "mkdir + rmdir of the same directory", ref=True)

    def ours(i: int) -> None:
        run_id = f"bench{i:04d}"
        t0 = time.perf_counter()
        runstore.create(common_dir, run_id)
        made = time.perf_counter()
        runstore.retire(common_dir, run_id)
        done = time.perf_counter()
        res.add(CASE, repo.size, group, "runstore.create", made - t0)
        res.add(CASE, repo.size, group, "runstore.retire (empty)", done - made)

    def plain(i: int) -> None:
        store = layout.run_store(common_dir, f"floor{i:04d}")  # the same two levels a store has
        t0 = time.perf_counter()
        os.makedirs(store)
        os.rmdir(store)
        os.rmdir(os.path.dirname(store))
        res.add(CASE, repo.size, group, "mkdir + rmdir of the same directory", time.perf_counter() - t0, ref=True)

    for i in ctx.rounds(STORES, budget=20):
        for fn in rotate([ours, plain], i):
            fn(i)  # type: ignore[operator]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """No number was set for the stores: reported only."""
    return []
