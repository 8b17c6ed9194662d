"""Apply and undo of 1-, 10- and 100-file patches against ``git apply`` of the same patch.

One run is started from the generated repository. For each repetition and variant a call changing
k tracked files is recorded in the run (not timed), then applied to the user's tree with
``--call`` and undone (both timed), then a call writing the original contents back is recorded (not
timed) so that the next call's before state equals the user's file again. ``git apply`` applies the
patch ``git diff <call's parent> <call's commit>`` of the in-process variant's call to the user's
tree, and ``git apply -R`` takes it back out.
"""

from __future__ import annotations

import os
import time

from bench.cases import Context, module_available, rotate, settle
from bench.genrepo import Repo, git, pick
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "apply"
KS = (1, 10, 100)
V_LIB_APPLY = "sandbox apply --call (library, in-process)"
V_LIB_UNDO = "sandbox undo (library, in-process)"
V_CLI_APPLY = "sandbox apply --call (CLI process)"
V_CLI_UNDO = "sandbox undo (CLI process)"
V_GIT_APPLY = "git apply of the same patch (process)"
V_GIT_UNDO = "git apply -R of the same patch (process)"
UNDO_VARIANTS = (V_LIB_UNDO, V_CLI_UNDO, V_GIT_UNDO)


def group(k: int, op: str) -> str:
    """The group of a patch size and an operation (apply or undo)."""
    return f"{k}-file patch, {op}"


class _Bench:
    """One run on the repository, the patch file, and the variants."""

    def __init__(self, ctx: Context, repo: Repo) -> None:
        from sandbox.run.run import Run
        from sandbox.store.project import Project

        self.res = ctx.results
        self.repo = repo
        project, workdir, _ = Project.discover(repo.path)
        assert workdir is not None
        self.run = Run.start(project, workdir)
        self.patch_file = os.path.join(repo.scratch, "bench.patch")
        self.counter = 0
        self.last_lib_call: str | None = None
        self.warming = False

    def record(self, files: list[str], original: dict[str, bytes] | None = None) -> str:
        """Record one call writing new contents (or the original ones back) to ``files``."""
        self.counter += 1
        with self.run.tool_call("Write", {"paths": files, "n": self.counter}) as call:
            for rel in files:
                call.write(rel, original[rel] if original else f"bench apply {self.counter}\n".encode() * 40)
        assert call.call_id is not None
        return call.call_id

    def add(self, files: list[str], variant: str, seconds: float, rss: int | None = None) -> None:
        if self.warming:
            return
        op = "undo" if variant in UNDO_VARIANTS else "apply"
        self.res.add(CASE, self.repo.size, group(len(files), op), variant, seconds, rss_kb=rss)

    def lib(self, files: list[str], original: dict[str, bytes]) -> None:
        from sandbox.merge import mergeback, undo

        call_id = self.record(files)
        t0 = time.perf_counter()
        mergeback.apply(self.run, calls=[call_id])
        self.add(files, V_LIB_APPLY, time.perf_counter() - t0)
        _check(self.repo.path, files, original, changed=True)
        t0 = time.perf_counter()
        undo.undo(self.run)
        self.add(files, V_LIB_UNDO, time.perf_counter() - t0)
        _check(self.repo.path, files, original, changed=False)
        self.record(files, original)
        self.last_lib_call = call_id

    def cli(self, files: list[str], original: dict[str, bytes]) -> None:
        call_id = self.record(files)
        base = [SANDBOX, "-C", self.repo.path]
        p = run_proc([*base, "apply", self.run.run_id, "--call", call_id], rss=True)
        self.add(files, V_CLI_APPLY, p.seconds, p.max_rss_kb)
        _check(self.repo.path, files, original, changed=True)
        p = run_proc([*base, "undo", self.run.run_id], rss=True)
        self.add(files, V_CLI_UNDO, p.seconds, p.max_rss_kb)
        _check(self.repo.path, files, original, changed=False)
        self.record(files, original)

    def git_apply(self, files: list[str], original: dict[str, bytes]) -> None:
        assert self.last_lib_call is not None
        entry = self.run.entry(self.last_lib_call)
        patch = git(["diff", "--binary", str(entry.parent_commit), str(entry.commit)], cwd=self.repo.path)
        with open(self.patch_file, "wb") as fh:
            fh.write(patch)
        p = run_proc(["git", "apply", self.patch_file], cwd=self.repo.path)
        self.add(files, V_GIT_APPLY, p.seconds)
        _check(self.repo.path, files, original, changed=True)
        p = run_proc(["git", "apply", "-R", self.patch_file], cwd=self.repo.path)
        self.add(files, V_GIT_UNDO, p.seconds)
        _check(self.repo.path, files, original, changed=False)


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant for each patch size, interleaved."""
    from functools import partial

    res = ctx.results
    if not (module_available("sandbox.merge.mergeback") and module_available("sandbox.merge.undo")):
        res.skip(CASE, repo.size, "not available: sandbox/merge/mergeback.py or sandbox/merge/undo.py is missing")
        return
    b = _Bench(ctx, repo)
    for k in KS:
        files = pick(repo.size, k)
        original = {}
        for rel in files:
            with open(os.path.join(repo.path, rel), "rb") as fh:
                original[rel] = fh.read()
        res.row(CASE, repo.size, group(k, "apply"), V_GIT_APPLY, ref=True)
        res.row(CASE, repo.size, group(k, "undo"), V_GIT_UNDO, ref=True)
        b.warming = True
        b.lib(files, original)  # warm-up (not counted), and the call whose patch git apply uses
        b.warming = False
        variants = [
            partial(b.lib, files, original),
            partial(b.cli, files, original),
            partial(b.git_apply, files, original),
        ]
        for i in ctx.rounds(9 if repo.size < 100_000 else 5, budget=25):
            for fn in rotate(variants, i):
                settle()
                fn()  # type: ignore[operator]


def _check(root: str, files: list[str], original: dict[str, bytes], changed: bool) -> None:
    """The user's files hold the patch (``changed``) or their original bytes: else stop the case."""
    for rel in files:
        with open(os.path.join(root, rel), "rb") as fh:
            same = fh.read() == original[rel]
        if same == changed:
            raise AssertionError(f"{rel} is {'unchanged' if same else 'changed'} after the operation")


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """10-file apply/undo: < 100 ms in-process, and within 1.5x between 1k and 100k."""
    small, large = min(sizes), (100_000 if 100_000 in sizes else max(sizes))
    out = []
    for variant, verb in ((V_LIB_APPLY, "apply"), (V_LIB_UNDO, "undo")):
        big = results.find(CASE, large, group(10, verb), variant)
        little = results.find(CASE, small, group(10, verb), variant)
        name = f"in-process {verb} of a 10-file patch at {large // 1000}k"
        if big is None:
            out.append(Target(name, "< 100 ms median", "-", None))
        else:
            out.append(Target(name, "< 100 ms median", f"{big.stats.median * 1e3:.1f} ms", big.stats.median < 0.1))
        name = f"in-process {verb} of a 10-file patch, {large // 1000}k vs {small // 1000}k files"
        if big is None or little is None or large == small:
            out.append(Target(name, "<= 1.5x", "-", None))
        else:
            ratio = big.stats.median / little.stats.median
            out.append(
                Target(
                    name,
                    "<= 1.5x",
                    f"{big.stats.median * 1e3:.1f} ms / {little.stats.median * 1e3:.1f} ms = {ratio:.2f}x",
                    ratio <= 1.5,
                )
            )
    return out
