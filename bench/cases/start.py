"""``sandbox start`` against ``git worktree add --detach`` and ``cp -a`` of the files (the floor).

The sandbox snapshots the user's working tree (with the uncommitted edit and the untracked file)
and checks the snapshot out in the run's home: a git dir of its own (alternates to the user's
objects) and its worktree. ``git worktree add`` checks out HEAD only; ``cp -a`` copies the files
without any git bookkeeping. Two ways of making a git dir of one's own are measured bare (HEAD only,
no snapshot), to choose between them: ``git init`` + alternates + ``read-tree -u`` (what the sandbox
does) and ``git clone --shared --no-checkout`` + ``checkout``. The floor of the design is measured too:
the same work as ``sandbox start`` done by git alone, with git's defaults and no Python (the checkout of
HEAD beside ``git add -A`` into a copy of the index, the snapshot's commit, then the changed paths
checked out on top). A parallel checkout there was slower (1.43x against 1.16x sequential, 2026-12-07):
its second worker competes with the add. Every variant writes on the same file
system (the data root is put in the scratch directory). Each variant's product is removed after it
is timed (not timed).

With ``BENCH_BASELINE`` set to a directory holding another tree's ``sandbox`` package (``git archive
REV sandbox | tar -x -C DIR``), ``sandbox start`` as a process is also run by that code, in the same
rounds: a change's before and after side by side on one load.
"""

from __future__ import annotations

import json
import os
import shutil
import time

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "start"
GROUP = "start"


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant, interleaved."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    dest = os.path.join(repo.scratch, "start-dest")
    data_root = os.path.join(repo.scratch, "data")  # the runs' homes, on the benchmark's file system
    objects_dir = os.path.join(repo.path, ".git", "objects")
    head = git(["rev-parse", "HEAD"], cwd=repo.path).decode().strip()
    names = sorted(os.listdir(repo.path))
    names.remove(".git")

    def lib() -> None:
        t0 = time.perf_counter()
        project, workdir, _ = Project.discover(repo.path, data_root)
        assert workdir is not None
        run = Run.start(project, workdir)
        res.add(CASE, repo.size, GROUP, "sandbox start (library, in-process)", time.perf_counter() - t0)
        run.drop(force=True)

    baseline = os.environ.get("BENCH_BASELINE")

    def cli(base: bool = False) -> None:
        env = {"XDG_DATA_HOME": data_root, **({"PYTHONPATH": baseline} if base and baseline else {})}
        p = run_proc([SANDBOX, "-C", repo.path, "start", "--json"], rss=True, env=env)
        label = "sandbox start (CLI process" + (", baseline code: BENCH_BASELINE)" if base else ")")
        res.add(CASE, repo.size, GROUP, label, p.seconds, rss_kb=p.max_rss_kb)
        run_id = json.loads(p.stdout)["run"]
        project = Project(os.path.join(repo.path, ".git"))
        Run.open(project, run_id).drop(force=True)

    def worktree(workers: str | None) -> None:
        extra = ["-c", f"checkout.workers={workers}"] if workers is not None else []
        p = run_proc(["git", *extra, "worktree", "add", "-q", "--detach", dest, "HEAD"], cwd=repo.path, rss=True)
        label = "git worktree add --detach" + (f" (checkout.workers={workers})" if workers is not None else "")
        res.add(CASE, repo.size, GROUP, label, p.seconds, ref=workers is None, rss_kb=p.max_rss_kb)
        shutil.rmtree(dest)
        git(["worktree", "prune"], cwd=repo.path)

    def own_git_dir(gd: str, wt: str) -> None:
        # A git dir of the run's own at HEAD, as the sandbox makes it: alternates to your objects, a branch.
        git(["init", "-q", "--template=", f"--separate-git-dir={gd}", wt], cwd=repo.path)
        with open(os.path.join(gd, "objects", "info", "alternates"), "w", encoding="utf-8") as fh:
            fh.write(objects_dir + "\n")
        git(["update-ref", "refs/heads/run", head], cwd=wt)
        git(["symbolic-ref", "HEAD", "refs/heads/run"], cwd=wt)

    def own_init() -> None:
        gd, wt = os.path.join(dest, "git"), os.path.join(dest, "worktree")
        t0 = time.perf_counter()
        own_git_dir(gd, wt)
        git(["-c", "checkout.workers=0", "read-tree", "-u", "--reset", "HEAD"], cwd=wt)
        seconds = time.perf_counter() - t0
        res.add(CASE, repo.size, GROUP, "own git dir: git init + alternates + read-tree -u", seconds)
        shutil.rmtree(dest)

    def own_clone() -> None:
        t0 = time.perf_counter()
        git(["clone", "-q", "--shared", "--no-checkout", repo.path, dest], cwd=repo.scratch)
        git(["-c", "checkout.workers=0", "checkout", "-q", "--detach", head], cwd=dest)
        seconds = time.perf_counter() - t0
        res.add(CASE, repo.size, GROUP, "own git dir: git clone --shared --no-checkout + checkout", seconds)
        shutil.rmtree(dest)

    def git_alone() -> None:
        # The same work as ``sandbox start`` done by git alone, with no Python: the run's own git dir,
        # the checkout of HEAD beside ``git add -A`` into a copy of the index, the snapshot's tree and
        # commit, then only the paths the snapshot changes written on top. The floor of the design.
        import subprocess

        gd, wt = os.path.join(dest, "git"), os.path.join(dest, "worktree")
        index = os.path.join(repo.scratch, "floor-index")
        t0 = time.perf_counter()
        own_git_dir(gd, wt)
        shutil.copyfile(os.path.join(repo.path, ".git", "index"), index)
        env = {**os.environ, "GIT_INDEX_FILE": index}
        checkout = subprocess.Popen(["git", "-c", "core.fsync=none", "read-tree", "-u", "--reset", "HEAD"], cwd=wt)
        add = subprocess.Popen(["git", "add", "-A", "--", "."], cwd=repo.path, env=env)
        add.wait()
        tree = git(["write-tree"], cwd=repo.path, env={"GIT_INDEX_FILE": index}).decode().strip()
        snap = git(["commit-tree", "-p", head, "-m", "snapshot", tree], cwd=repo.path).decode().strip()
        checkout.wait()
        changed = git(["diff-tree", "-r", "-z", "--name-only", head, snap], cwd=wt).split(b"\0")
        spec = b"\0".join(p for p in changed if p)
        git(
            ["checkout", "-q", "--no-overlay", snap, "--pathspec-from-file=-", "--pathspec-file-nul"],
            cwd=wt,
            input=spec,
        )
        seconds = time.perf_counter() - t0
        res.add(
            CASE,
            repo.size,
            GROUP,
            "floor: the same work by git alone (checkout beside add -A, then the changes)",
            seconds,
        )
        shutil.rmtree(dest)
        os.unlink(index)

    def copy() -> None:
        os.makedirs(dest)
        p = run_proc(["cp", "-a", *names, dest], cwd=repo.path, rss=True)
        res.add(CASE, repo.size, GROUP, "cp -a of the files (floor)", p.seconds, rss_kb=p.max_rss_kb)
        shutil.rmtree(dest)

    variants = [
        lib,
        cli,
        *([lambda: cli(base=True)] if baseline else []),
        lambda: worktree(None),
        lambda: worktree("0"),
        own_init,
        own_clone,
        git_alone,
        copy,
    ]
    # Declare rows in a stable order (the reference first) before the interleaved samples.
    res.row(CASE, repo.size, GROUP, "git worktree add --detach", ref=True)
    res.row(CASE, repo.size, GROUP, "sandbox start (library, in-process)")
    res.row(CASE, repo.size, GROUP, "sandbox start (CLI process)")
    for i in ctx.rounds(3 if repo.size >= 100_000 else 5, budget=120):
        for fn in rotate(variants, i):
            settle()
            fn()  # type: ignore[operator]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Start within 1.0x of ``git worktree add --detach`` at the largest size (100k; issue #30, item 5)."""
    size = 100_000 if 100_000 in sizes else max(sizes)
    ref = results.find(CASE, size, GROUP, "git worktree add --detach")
    out = []
    for label in ("sandbox start (library", "sandbox start (CLI"):
        row = results.find(CASE, size, GROUP, label)
        if row is None or ref is None:
            out.append(Target(f"{label.split('(')[1]} start vs git worktree add", "<= 1.0x", "-", None))
            continue
        ratio = row.stats.median / ref.stats.median
        out.append(
            Target(
                f"`sandbox start` ({label.split('(')[1]}) at {size // 1000}k vs `git worktree add --detach`",
                "<= 1.0x",
                f"{row.stats.median:.2f} s vs {ref.stats.median:.2f} s = {ratio:.2f}x",
                ratio <= 1.0,
            )
        )
    # The design's floor (see the module): the snapshot is work ``git worktree add`` does not do.
    floor = results.find(CASE, size, GROUP, "floor: the same work by git alone")
    lib = results.find(CASE, size, GROUP, "sandbox start (library")
    if floor is not None and lib is not None:
        ratio = lib.stats.median / floor.stats.median
        out.append(
            Target(
                f"`sandbox start` (library) at {size // 1000}k vs the same work by git alone (floor)",
                "<= 1.0x",
                f"{lib.stats.median:.2f} s vs {floor.stats.median:.2f} s = {ratio:.2f}x",
                ratio <= 1.0,
            )
        )
    return out
