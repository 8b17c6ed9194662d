"""Taking 10 hunks out of a 20-hunk, 10-file patch (``apply --hunks-from``), its undo, and ``diff --json``.

One run is started from the generated repository. For each repetition a call is recorded (not
timed) that changes two lines far apart in each of 10 tracked files: 20 hunks, two per file. Then
one hunk of each file is taken, by the ids ``diff --json`` publishes, in-process
(``mergeback.apply(..., choice=...)``) or as ``sandbox apply --call ID --hunks-from FILE`` (a
process), and undone (timed); the user's files are checked after each. ``sandbox diff --call ID
--json`` (a process) lists the 20 hunk ids. The reference is ``git apply`` of exactly the taken
hunks (the user's ``git diff`` after the in-process variant) and ``git apply -R``.

Targets: the in-process partial apply stays O(patch): the 100k-file repository within 1.5x of
the 1k one.
"""

from __future__ import annotations

import os
import time

from bench.cases import Context, module_available, rotate, settle
from bench.genrepo import Repo, git, pick
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "hunks"
K = 10
V_LIB = "apply --hunks-from, 10 of 20 hunks (library, in-process)"
V_LIB_UNDO = "undo of it (library, in-process)"
V_CLI = "sandbox apply --hunks-from (CLI process)"
V_CLI_UNDO = "sandbox undo (CLI process)"
V_DIFF = "sandbox diff --call --json, 20 hunk ids (CLI process)"
V_GIT = "git apply of the same 10 hunks (process)"
V_GIT_UNDO = "git apply -R of them (process)"
G_APPLY = "10-file patch, take 10 of 20 hunks"
G_UNDO = "10-file patch, undo the 10 hunks"
G_DIFF = "10-file patch, list hunk ids"


def edited(data: bytes, n: int) -> bytes:
    """``data`` with its 3rd line and its 3rd line from the end changed (two hunks apart)."""
    lines = data.split(b"\n")
    lines[2] = f"bench hunk A {n}".encode()
    lines[-4] = f"bench hunk B {n}".encode()
    return b"\n".join(lines)


class _Bench:
    def __init__(self, ctx: Context, repo: Repo) -> None:
        from sandbox.run.run import Run
        from sandbox.store.project import Project

        self.res = ctx.results
        self.repo = repo
        project, workdir, _ = Project.discover(repo.path)
        assert workdir is not None
        self.run = Run.start(project, workdir)
        self.files = pick(repo.size, K)
        self.original: dict[str, bytes] = {}
        for rel in self.files:
            with open(os.path.join(repo.path, rel), "rb") as fh:
                self.original[rel] = fh.read()
        self.counter = 0
        self.warming = False
        self.ids_file = os.path.join(repo.scratch, "hunk-ids.txt")
        self.patch_file = os.path.join(repo.scratch, "hunks.patch")

    def record(self, back: bool = False) -> str:
        """A call changing two lines of each file (or writing the originals back)."""
        self.counter += 1
        with self.run.tool_call("Edit", {"n": self.counter}) as call:
            for rel in self.files:
                call.write(rel, self.original[rel] if back else edited(self.original[rel], self.counter))
        assert call.call_id is not None
        return call.call_id

    def first_hunks(self, call_id: str) -> set[str]:
        """The id of the first hunk of every file, as ``diff --json`` publishes them (not timed)."""
        from sandbox.merge.preview import diff_files, preview_range

        files = diff_files(self.run, preview_range(self.run, call_id))
        assert all(len(f["hunks"]) == 2 for f in files), "expected two hunks per file"
        return {f["hunks"][0]["id"] for f in files}

    def add(self, group: str, variant: str, seconds: float, rss: int | None = None) -> None:
        if not self.warming:
            self.res.add(CASE, self.repo.size, group, variant, seconds, rss_kb=rss)

    def check(self, taken: bool) -> None:
        for rel in self.files:
            with open(os.path.join(self.repo.path, rel), "rb") as fh:
                data = fh.read()
            has = b"bench hunk A" in data
            if has != taken or b"bench hunk B" in data:
                raise AssertionError(f"{rel} does not hold exactly the {'taken' if taken else 'original'} hunks")

    def lib(self) -> None:
        from sandbox.merge import hunks, mergeback, undo

        call_id = self.record()
        ids = self.first_hunks(call_id)
        t0 = time.perf_counter()
        report = mergeback.apply(self.run, calls=[call_id], choice=hunks.Choice(ids=ids))
        self.add(G_APPLY, V_LIB, time.perf_counter() - t0)
        assert len(report.partial) == K
        self.check(taken=True)
        patch = git(["diff", "--", *self.files], cwd=self.repo.path)
        with open(self.patch_file, "wb") as fh:
            fh.write(patch)
        t0 = time.perf_counter()
        undo.undo(self.run)
        self.add(G_UNDO, V_LIB_UNDO, time.perf_counter() - t0)
        self.check(taken=False)
        self.record(back=True)

    def cli(self) -> None:
        call_id = self.record()
        base = [SANDBOX, "-C", self.repo.path]
        p = run_proc([*base, "diff", self.run.run_id, "--call", call_id, "--json"], rss=True)
        self.add(G_DIFF, V_DIFF, p.seconds, p.max_rss_kb)
        with open(self.ids_file, "w", encoding="utf-8") as fh:
            fh.write("\n".join(sorted(self.first_hunks(call_id))) + "\n")
        p = run_proc([*base, "apply", self.run.run_id, "--call", call_id, "--hunks-from", self.ids_file], rss=True)
        self.add(G_APPLY, V_CLI, p.seconds, p.max_rss_kb)
        self.check(taken=True)
        p = run_proc([*base, "undo", self.run.run_id], rss=True)
        self.add(G_UNDO, V_CLI_UNDO, p.seconds, p.max_rss_kb)
        self.check(taken=False)
        self.record(back=True)

    def git_apply(self) -> None:
        p = run_proc(["git", "apply", self.patch_file], cwd=self.repo.path)
        self.add(G_APPLY, V_GIT, p.seconds)
        self.check(taken=True)
        p = run_proc(["git", "apply", "-R", self.patch_file], cwd=self.repo.path)
        self.add(G_UNDO, V_GIT_UNDO, p.seconds)
        self.check(taken=False)


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant, interleaved."""
    res = ctx.results
    if not module_available("sandbox.merge.hunks"):
        res.skip(CASE, repo.size, "not available: sandbox/merge/hunks.py is missing")
        return
    b = _Bench(ctx, repo)
    res.row(CASE, repo.size, G_APPLY, V_GIT, ref=True)
    res.row(CASE, repo.size, G_UNDO, V_GIT_UNDO, ref=True)
    res.row(CASE, repo.size, G_DIFF, V_DIFF, ref=True)
    b.warming = True
    b.lib()  # warm-up (not counted), and the patch git apply uses
    b.warming = False
    variants = [b.lib, b.cli, b.git_apply]
    for i in ctx.rounds(9 if repo.size < 100_000 else 5, budget=25):
        for fn in rotate(variants, i):
            settle()
            fn()  # type: ignore[operator]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """In-process apply of 10 hunks: 100k within 1.5x of 1k."""
    small, large = min(sizes), (100_000 if 100_000 in sizes else max(sizes))
    big = results.find(CASE, large, G_APPLY, V_LIB)
    little = results.find(CASE, small, G_APPLY, V_LIB)
    name = f"in-process apply of 10 hunks, {large // 1000}k vs {small // 1000}k files"
    if big is None or little is None or large == small:
        return [Target(name, "<= 1.5x", "-", None)]
    ratio = big.stats.median / little.stats.median
    return [
        Target(
            name,
            "<= 1.5x",
            f"{big.stats.median * 1e3:.1f} ms / {little.stats.median * 1e3:.1f} ms = {ratio:.2f}x",
            ratio <= 1.5,
        )
    ]
