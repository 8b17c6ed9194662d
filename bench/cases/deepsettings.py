"""Where a run from elsewhere holds agent settings deep in its tree: what a launch pays to mask them.

Every command started on a run holding work from another clone gets the worktree's agent settings
masked (:mod:`sandbox.confine.foreign`), deep ones included: where they are comes from the run's
recorded tree (:mod:`sandbox.confine.settingstree`), searched once per tree and kept in the run's
directory. On one run of the generated repository with three deep settings paths recorded
(``.claude/``, ``.mcp.json``, ``.env`` in directories spread over the tree), in-process, alternating:

- cold: the run's head tree searched whole (pygit2, every subtree), and the result kept;
- a moved head (one call changed one file since): the search from the kept tree, only the subtrees
  whose id changed read;
- warm: a launch's whole cost, the kept result read and an ``lstat`` per name where it names
  (:func:`~sandbox.confine.foreign.settings_paths` with it), the reference;
- the rule before (root and start directory only): :func:`~sandbox.confine.foreign.settings_paths`;
- the peers' ways: a walk of the worktree for the names (``os.walk``, what each launch would pay
  without the tree), and ``git ls-tree -r -t`` of the head with the names filtered (one git process).
"""

from __future__ import annotations

import os
import subprocess
import time

from bench.cases import Context, rotate
from bench.genrepo import Repo, pick
from bench.results import Results, Target

CASE = "deepsettings"
GROUP = "a launch's agent settings of a run from elsewhere (in-process)"
V_COLD = "cold: search of the head's trees (pygit2), kept in the run's directory"
V_MOVED = "moved head (one file changed): search of the changed subtrees only"
V_WARM = "warm: kept paths read + lstat where they name (a launch)"
V_BEFORE = "the rule before: lstat at the root only (deep ones unmasked)"
V_WALK = "peer: os.walk of the worktree for the names (per launch)"
V_LSTREE = "peer: git ls-tree -r -t of the head, names filtered (process)"


def run(ctx: Context, repo: Repo) -> None:
    """Measure the cold search, the moved head, the warm launch, and the walks it replaces."""
    import pygit2

    from sandbox.confine import foreign, settingstree
    from sandbox.models import SettingsFound
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    try:
        deep = [os.path.dirname(p) for p in pick(repo.size, 3)]
        planted = [f"{deep[0]}/.claude/settings.json", f"{deep[1]}/.mcp.json", f"{deep[2]}/.env"]
        with run_.tool_call("Write", {"paths": planted}) as call:
            for rel in planted:
                call.write(rel, b"{}")
        before_tree = str(run_.repo[run_.head()].peel(pygit2.Tree).id)
        found = settingstree.recorded(run_)
        assert len(found) == 3, found
        other = pick(repo.size, 5)[4]
        with run_.tool_call("Write", {"paths": [other]}) as call:
            call.write(other, b"one more change\n")
        tree = str(run_.repo[run_.head()].peel(pygit2.Tree).id)
        kept = os.path.join(run_.dir, settingstree.CACHE)
        names = frozenset(foreign.AGENT_SETTINGS)

        def cold() -> None:
            os.unlink(kept)
            assert settingstree.recorded(run_) == found

        def moved() -> None:
            assert settingstree.search(run_.repo, tree, SettingsFound(tree=before_tree, paths=found)) == found

        def warm() -> None:
            assert len(foreign.settings_paths(run_.worktree, "", settingstree.recorded(run_))) == 3

        def before() -> None:
            foreign.settings_paths(run_.worktree, "")

        def walk() -> None:
            hits = []
            for _top, dirs, files in os.walk(run_.worktree):
                hits += [n for n in dirs + files if n in names]
            assert len(hits) == 3, hits

        def lstree() -> None:
            out = subprocess.run(
                ["git", "-C", run_.worktree, "ls-tree", "-r", "-t", "-z", "--name-only", tree],
                capture_output=True,
                check=True,
            ).stdout
            hits = [p for p in out.split(b"\0") if os.path.basename(p).decode() in names]
            assert len(hits) == 3, hits

        variants = [(V_COLD, cold), (V_MOVED, moved), (V_WARM, warm), (V_BEFORE, before), (V_WALK, walk)]
        variants.append((V_LSTREE, lstree))
        res.row(CASE, repo.size, GROUP, V_WARM, ref=True)
        warm()
        for i in ctx.rounds(11, budget=60):
            for name, fn in rotate(variants, i):  # type: ignore[misc]
                t0 = time.perf_counter()
                fn()
                res.add(CASE, repo.size, GROUP, name, time.perf_counter() - t0)
            settingstree.recorded(run_)  # kept again after a cold one
    finally:
        run_.drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """A warm launch costs at most 5 ms at the largest size, whatever the tree holds (reported, median)."""
    size = max(sizes)
    row = results.find(CASE, size, GROUP, V_WARM)
    name = f"warm launch on a run from elsewhere with deep agent settings, at {size // 1000}k"
    if row is None:
        return [Target(name, "<= 5 ms median", "-", None)]
    median = row.stats.median
    return [Target(name, "<= 5 ms median", f"{median * 1e3:.2f} ms", median <= 0.005)]
