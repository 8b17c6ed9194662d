"""Runs that travel and multiply: ``sandbox push``/``fetch`` of a 100-call run against plain git of
the same refs, and ``sandbox start --count 4`` against one ``sandbox start``.

Push and fetch: a run of 100 calls (one small file each, recorded in-process) in the benchmark's
repository; the remote is a bare clone that already has the user's branch (as a real remote
would), and the receiver a clone of it without a checkout. Before each sample the run's refs are
deleted on the pushing side's remote between samples (git negotiates from refs: objects left
unreferenced there are sent again), and each fetch goes into a fresh clone without them (git skips a
fetch whose objects are all present, which would time nothing). ``sandbox push`` is a ``git
ls-remote`` plus one ``git push --atomic``; ``sandbox fetch`` an ``ls-remote``, one ``git fetch``
of the objects and the checked install of the refs. Measured at the smallest size only: the cost
follows the run, not the repository.

Best-of-N: ``start --count 4`` takes one snapshot and checks out four homes, as many at once as
there are CPUs; measured at the largest size (100k by the issue), against one ``start``.
"""

from __future__ import annotations

import json
import os
import shutil

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "travel"
CALLS = 100
REFS = ("ledger", "head", "base", "checkpoints")


def run(ctx: Context, repo: Repo) -> None:
    """Push/fetch at the smallest size, start --count at the largest."""
    if repo.size == min(ctx.sizes):
        _push_fetch(ctx.results, ctx, repo)
    if repo.size == max(ctx.sizes):
        _start_count(ctx.results, ctx, repo)


def _refspecs(run_id: str) -> list[str]:
    out = []
    for name in REFS:
        ref = f"refs/sandbox/{run_id}/{name}"
        out.append(("+" if name in ("head", "checkpoints") else "") + f"{ref}:{ref}")
    return out


def _push_fetch(res: Results, ctx: Context, repo: Repo) -> None:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    data_root = os.path.join(repo.scratch, "data")
    project, workdir, _ = Project.discover(repo.path, data_root)
    assert workdir is not None
    run = Run.start(project, workdir, label="travel")
    for i in range(CALLS):
        with run.tool_call("write_file", {"path": f"travel/{i}.txt"}) as call:
            call.write(f"travel/{i}.txt", f"call {i}\n")
    run.checkpoint("halfway")
    run_id = run.run_id
    remote = os.path.join(repo.scratch, "travel-remote.git")
    receiver = os.path.join(repo.scratch, "travel-receiver")
    for path in (remote, receiver):
        shutil.rmtree(path, ignore_errors=True)
    git(["clone", "-q", "--bare", repo.path, remote], cwd=repo.scratch)
    git(["clone", "-q", "--no-checkout", remote, receiver], cwd=repo.scratch)
    refs = [f"refs/sandbox/{run_id}/{n}" for n in REFS]
    env = {"XDG_DATA_HOME": data_root}
    group = "push/fetch of a 100-call run"

    def clear_remote() -> None:
        git(["push", "-q", remote, "--delete", *refs], cwd=repo.path)

    def clear_receiver() -> None:
        for ref in refs:
            git(["update-ref", "-d", ref], cwd=receiver)
        shutil.rmtree(os.path.join(receiver, ".git", "sandbox", "runs", run_id), ignore_errors=True)

    def sandbox_push() -> None:
        p = run_proc([SANDBOX, "-C", repo.path, "push", run_id, remote], env=env)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "sandbox push", p.seconds)
        clear_remote()

    def git_push() -> None:
        p = run_proc(["git", "push", "-q", remote, *_refspecs(run_id)], cwd=repo.path)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "git push of the same refs", p.seconds, ref=True)
        clear_remote()

    def sandbox_fetch() -> None:
        p = run_proc([SANDBOX, "-C", receiver, "fetch", "origin", run_id], env=env)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "sandbox fetch", p.seconds)
        clear_receiver()

    def git_fetch() -> None:
        p = run_proc(["git", "fetch", "-q", "origin", *_refspecs(run_id)], cwd=receiver)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "git fetch of the same refs", p.seconds)
        clear_receiver()

    def push_then(fn: object) -> object:
        def wrapped() -> None:
            # Not timed: a receiver without the run's objects (git skips a fetch whose objects are all
            # there already, which would time nothing), then the run on the remote.
            shutil.rmtree(receiver, ignore_errors=True)
            git(["clone", "-q", "--no-checkout", remote, receiver], cwd=repo.scratch)
            git(["push", "-q", remote, *_refspecs(run_id)], cwd=repo.path)
            fn()  # type: ignore[operator]
            clear_remote()

        return wrapped

    res.row(CASE, repo.size, group, "git push of the same refs", ref=True)
    variants = [sandbox_push, git_push, push_then(sandbox_fetch), push_then(git_fetch)]
    for i in ctx.rounds(7, budget=60):
        for fn in rotate(variants, i):
            settle()
            fn()  # type: ignore[operator]
    run.drop(force=True)
    shutil.rmtree(remote, ignore_errors=True)
    shutil.rmtree(receiver, ignore_errors=True)


def _start_count(res: Results, ctx: Context, repo: Repo) -> None:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    data_root = os.path.join(repo.scratch, "data")
    env = {"XDG_DATA_HOME": data_root}
    group = "start --count 4"
    project = Project(os.path.join(repo.path, ".git"))

    def drop(ids: list[str]) -> None:
        for run_id in ids:
            Run.open(project, run_id).drop(force=True)

    def one() -> None:
        p = run_proc([SANDBOX, "-C", repo.path, "start", "--json"], env=env, rss=True)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "sandbox start (one run)", p.seconds, ref=True, rss_kb=p.max_rss_kb)
        drop([json.loads(p.stdout)["run"]])

    def four() -> None:
        p = run_proc([SANDBOX, "-C", repo.path, "start", "--count", "4", "--json"], env=env, rss=True)
        assert p.returncode == 0, p.stderr
        res.add(CASE, repo.size, group, "sandbox start --count 4", p.seconds, rss_kb=p.max_rss_kb)
        drop([r["run"] for r in json.loads(p.stdout)["runs"]])

    res.row(CASE, repo.size, group, "sandbox start (one run)", ref=True)
    for i in ctx.rounds(3, budget=180):
        for fn in rotate([one, four], i):
            settle()
            fn()  # type: ignore[operator]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """start --count 4 within 4x one start at the largest size; push/fetch in seconds (reported)."""
    out = []
    small, big = min(sizes), max(sizes)
    group = "push/fetch of a 100-call run"
    ref = results.find(CASE, small, group, "git push of the same refs")
    for label in ("sandbox push", "sandbox fetch"):
        row = results.find(CASE, small, group, label)
        if row is None or ref is None:
            out.append(Target(f"`{label}` of a 100-call run", "seconds, near git's own", "-", None))
            continue
        m = row.stats.median
        out.append(
            Target(
                f"`{label}` of a 100-call run vs `git push` of the same refs",
                "seconds, dominated by git",
                f"{m:.2f} s vs {ref.stats.median:.2f} s",
                m < 5.0,
            )
        )
    one = results.find(CASE, big, "start --count 4", "sandbox start (one run)")
    four = results.find(CASE, big, "start --count 4", "sandbox start --count 4")
    if one is None or four is None:
        out.append(Target("`start --count 4` vs one `start`", "<= 4x", "-", None))
    else:
        ratio = four.stats.median / one.stats.median
        out.append(
            Target(
                f"`start --count 4` at {big // 1000}k vs one `start`",
                "<= 4x",
                f"{four.stats.median:.2f} s vs {one.stats.median:.2f} s = {ratio:.2f}x",
                ratio <= 4.0,
            )
        )
    return out
