"""Picked hunks of one 10,000-line file (issue 34): against the apply of the whole file.

At the smallest size only (the cost is the file's, not the repository's): a repository of its own in
the scratch directory holds one 10,000-line text file; a call (not timed) changes 20 lines spread
over it (20 hunks). Timed, in-process, each followed by its undo (not timed):

* the apply of the whole call (``mergeback.apply(run, calls=[id])``): the reference, what apply did
  before hunks could land on an edited file;
* 10 of the 20 hunks by id (``choice=``) onto the untouched file;
* the same 10 hunks onto the file after the user edited 5 other lines of it (placed where their
  context matches, as ``git apply`` places them).

The hunk ids are listed before each apply (not timed), and the hunks the listing parsed are
forgotten (``hunks.forget()``) before the timed apply: it costs what ``sandbox apply --hunks-from``
costs in a process of its own. A second group, "hunks shown first", times the listing and the apply
together in one process, the way the page and ``apply --hunks`` are used (the apply then finds the
file's hunks parsed): beside the same listing followed by the apply of the whole file.

Each group is timed twice: by the clock (the table's target) and in CPU time of the process, which
the load of a shared machine moves much less (fsyncs are waited for, not counted).

Target: both picked-hunk applies <= 1.5x the whole-file apply.
"""

from __future__ import annotations

import os
import time

from bench.cases import Context, module_available, rotate, settle
from bench.genrepo import Repo, git
from bench.results import Results, Target

CASE = "bigfile"
LINES = 10_000
CHANGED = 20
V_WHOLE = "apply of the whole file (library, in-process)"
V_PICK = "10 of 20 hunks by id (library, in-process)"
V_ONTO = "10 of 20 hunks onto your edited file (library, in-process)"
GROUP = "10,000-line file, 20 hunks"
GROUP_SHOWN = "10,000-line file, 20 hunks, hunks shown first"
CPU = ", CPU time"
NAME = "big.txt"


def original() -> bytes:
    return b"".join(f"line {i} of a long file\n".encode() for i in range(LINES))


def edited(data: bytes, n: int, every: int, start: int, word: str) -> bytes:
    lines = data.split(b"\n")
    for k in range(start, LINES, every):
        lines[k] = f"{word} {n} at {k}".encode()
    return b"\n".join(lines)


class _Bench:
    def __init__(self, ctx: Context, repo: Repo) -> None:
        from sandbox.run.run import Run
        from sandbox.store.project import Project

        self.res = ctx.results
        self.size = repo.size
        self.root = os.path.join(repo.scratch, "bigfile")
        if not os.path.isdir(os.path.join(self.root, ".git")):
            os.makedirs(self.root, exist_ok=True)
            git(["init", "-q"], cwd=self.root)
            with open(os.path.join(self.root, NAME), "wb") as fh:
                fh.write(original())
            git(["add", NAME], cwd=self.root)
            env = {
                "GIT_AUTHOR_NAME": "b",
                "GIT_AUTHOR_EMAIL": "b@x",
                "GIT_COMMITTER_NAME": "b",
                "GIT_COMMITTER_EMAIL": "b@x",
            }
            git(["commit", "-qm", "big file"], cwd=self.root, env=env)
        project, workdir, _ = Project.discover(self.root)
        assert workdir is not None
        self.run = Run.start(project, workdir)
        self.counter = 0
        self.warming = False

    def record(self, back: bool = False) -> str:
        self.counter += 1
        data = original() if back else edited(original(), self.counter, LINES // CHANGED, 250, "agent")
        with self.run.tool_call("Edit", {"n": self.counter}) as call:
            call.write(NAME, data)
        assert call.call_id is not None
        return call.call_id

    def ids(self, call_id: str) -> set[str]:
        from sandbox.merge.preview import diff_files, preview_range

        (f,) = diff_files(self.run, preview_range(self.run, call_id))
        assert len(f["hunks"]) == CHANGED, len(f["hunks"])
        return {h["id"] for h in f["hunks"][::2]}

    def one(self, variant: str, shown: bool = False) -> None:
        from sandbox.merge import hunks, mergeback, undo

        call_id = self.record()
        forget = getattr(hunks, "forget", lambda: None)  # (a tree from before the cache: nothing kept)
        forget()
        path = os.path.join(self.root, NAME)
        if variant == V_ONTO:
            with open(path, "wb") as fh:  # the user's own 5 lines, away from every hunk
                fh.write(edited(original(), self.counter, LINES // 5, 1000, "yours"))
        t0, c0 = time.perf_counter(), time.process_time()
        if not shown:
            choice = None if variant == V_WHOLE else hunks.Choice(ids=self.ids(call_id))
            forget()  # listed, not timed, and forgotten: the apply as a process of its own
            t0, c0 = time.perf_counter(), time.process_time()
        else:
            ids = self.ids(call_id)
            choice = None if variant == V_WHOLE else hunks.Choice(ids=ids)
        report = mergeback.apply(self.run, calls=[call_id], choice=choice)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if not self.warming:
            group = GROUP_SHOWN if shown else GROUP
            self.res.add(CASE, self.size, group, variant, wall)
            self.res.add(CASE, self.size, group + CPU, variant, cpu)
        assert report.applied == [NAME], report
        undo.undo(self.run)
        if variant == V_ONTO:
            with open(path, "wb") as fh:
                fh.write(original())
        self.record(back=True)


def run(ctx: Context, repo: Repo) -> None:
    """Measure the three variants, interleaved, at the smallest size."""
    res = ctx.results
    if not module_available("sandbox.merge.hunks"):
        res.skip(CASE, repo.size, "not available: sandbox/merge/hunks.py is missing")
        return
    if repo.size != min(ctx.sizes):
        return
    b = _Bench(ctx, repo)
    for group in (GROUP, GROUP + CPU, GROUP_SHOWN, GROUP_SHOWN + CPU):
        res.row(CASE, repo.size, group, V_WHOLE, ref=True)
    variants = [(v, shown) for shown in (False, True) for v in (V_WHOLE, V_PICK, V_ONTO)]
    b.warming = True
    for variant, shown in variants:
        settle()
        b.one(variant, shown)
    b.warming = False
    for i in ctx.rounds(9, budget=60):
        for variant, shown in rotate(variants, i):
            settle()
            b.one(variant, shown)  # type: ignore[has-type]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Picked hunks of the 10,000-line file within 1.5x of the whole file's apply (by the clock)."""
    size = min(sizes)
    out = []
    for group, first in ((GROUP, ""), (GROUP_SHOWN, ", hunks shown first")):
        out += _targets(results, size, group, first)
    return out


def _targets(results: Results, size: int, group: str, first: str) -> list[Target]:
    whole = results.find(CASE, size, group, V_WHOLE)
    out = []
    for variant, short in ((V_PICK, "picked hunks"), (V_ONTO, "picked hunks onto your edited file")):
        row = results.find(CASE, size, group, variant)
        name = f"apply of {short}, 10,000-line file, vs the whole file{first}"
        if row is None or whole is None:
            out.append(Target(name, "<= 1.5x", "-", None))
            continue
        ratio = row.stats.median / whole.stats.median
        shown = f"{row.stats.median * 1e3:.1f} ms / {whole.stats.median * 1e3:.1f} ms = {ratio:.2f}x"
        out.append(Target(name, "<= 1.5x", shown, ratio <= 1.5))
    return out
