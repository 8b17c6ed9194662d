"""Watcher start-up time and memory on the generated tree (a run's worktree of the repository).

Each sample is a fresh process that imports :mod:`sandbox.fast.inotify` and watches the worktree as the host
and ``execute(local_watcher=True)`` do: seconds from ``watch()`` to every inotify watch in
place, and the growth of the process's resident set across it (the kernel's own memory for the
watches, about 1 KB each, is not in any process's RSS).
"""

from __future__ import annotations

import json
import sys

from bench.cases import Context, module_available
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import run_proc

CASE = "watcher"
SCRIPT = """
import json, os, sys, time
from sandbox.fast.inotify import Inotify

def rss():
    with open("/proc/self/status", "rb") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(b"VmRSS:"))

before, started = rss(), time.monotonic()
inotify = Inotify()
tree = inotify.watch(sys.argv[1])
seconds = time.monotonic() - started
after = rss()
vouching = tree.sync()
print(json.dumps({"seconds": seconds, "rss_growth_bytes": after - before, "rss_bytes": after,
                  "directories": tree.watches, "vouching": vouching, "lost_reason": tree.lost_reason}))
inotify.close()
"""


def run(ctx: Context, repo: Repo) -> None:
    """A few fresh processes, one watch of the worktree each."""
    res = ctx.results
    if not module_available("sandbox.fast.inotify"):
        res.skip(CASE, repo.size, "not available: sandbox/fast/inotify.py is missing")
        return
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    n = ctx.reps(5)
    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    # What a session watches: a run's worktree (its .git is a file, so no git directory is watched).
    worktree = Run.start(project, workdir).worktree
    for _ in range(n):
        p = run_proc([sys.executable, "-c", SCRIPT, worktree], rss=True)
        out = json.loads(p.stdout.decode().strip().splitlines()[-1])
        group = f"{out['directories']} directories"
        res.add(CASE, repo.size, group, "start() until every watch is in place", out["seconds"])
        res.add(CASE, repo.size, group, "RSS growth across start()", out["rss_growth_bytes"] / 2**20, unit="MB")
        res.add(CASE, repo.size, group, "RSS of the process after start()", out["rss_bytes"] / 2**20, unit="MB")
        if not out["vouching"]:
            res.notes.append(f"watcher at {repo.size} files did not vouch after start: {out['lost_reason']}")


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """No numeric target: reported (the issue asks for the figures)."""
    return []
