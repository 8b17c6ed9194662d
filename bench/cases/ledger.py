"""Durable ledger events per second: ``Ledger.append`` with fsync on, one writer and 8 processes.

Measured once, on the smallest repository (an append costs the same at any repository size: it
writes one commit object and moves one ref). Each event is a small ``note`` event. The concurrent
writers are separate processes on the same run, started first and released together once each has
imported the library and opened the run; afterwards the ledger must hold exactly every event.

``python -m bench.cases.ledger GIT_DIR RUN N`` is one concurrent writer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from bench.cases import Context
from bench.genrepo import Repo, pick
from bench.results import Results, Target

CASE = "ledger"
SINGLE = 200
WRITERS = 8
PER_WRITER = 40
#: The one-file record is sampled over the last HISTORY_SAMPLES calls before each of these counts.
HISTORY = (10, 100, 200)
HISTORY_SAMPLES = 7


def run(ctx: Context, repo: Repo) -> None:
    """Single writer, then 8 concurrent writers; events/s as the median of repetitions."""
    from sandbox.models import EventKind
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    if repo.size != min(ctx.sizes):
        return
    res = ctx.results
    n = ctx.reps(3)
    git_dir = os.path.join(repo.path, ".git")
    for _ in range(n):
        project, workdir, _ = Project.discover(repo.path)
        assert workdir is not None
        run_ = Run.start(project, workdir)
        before = run_.load().count
        t0 = time.perf_counter()
        for i in range(SINGLE):
            run_.record(EventKind.note, data={"i": i})
        dt = time.perf_counter() - t0
        res.add(CASE, None, "events/s", "Ledger.append, fsync on, 1 writer (in-process)", SINGLE / dt, unit="events/s")
        res.add(CASE, None, "latency", "Ledger.append, fsync on, 1 writer (per event)", dt / SINGLE)

        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.cases.ledger", git_dir, run_.run_id, str(PER_WRITER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for _ in range(WRITERS)
        ]
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError("a ledger writer did not start")
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.close()
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError("a ledger writer failed")
        dt = time.perf_counter() - t0
        total = WRITERS * PER_WRITER
        count = Run.open(Project(git_dir), run_.run_id).load().count - before - SINGLE
        if count != total:
            raise AssertionError(f"the ledger holds {count} events from the writers, expected {total}")
        res.add(
            CASE,
            None,
            "events/s",
            f"Ledger.append, fsync on, {WRITERS} concurrent processes (total)",
            total / dt,
            unit="events/s",
        )
        run_.drop(force=True)
    _history(ctx, repo)
    res.notes.append(
        f"ledger: {SINGLE} events by one writer; {WRITERS} processes x {PER_WRITER} events on one run, "
        "all events found in the ledger afterwards (none lost or duplicated)."
    )


def _history(ctx: Context, repo: Repo) -> None:
    """A one-file ``tool_call`` on a fresh run, sampled as the run's ledger grows to 200 calls."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    files = pick(repo.size, 1)
    windows = {c: f"1-file tool_call after {c} calls" for c in HISTORY}
    for count in range(1, max(HISTORY) + 1):
        t0 = time.perf_counter()
        with run_.tool_call("Write", {"paths": files}) as call:
            call.write(files[0], f"history {count}\n".encode())
        dt = time.perf_counter() - t0
        window = next((c for c in HISTORY if c - HISTORY_SAMPLES < count <= c), None)
        if window is not None:
            ctx.results.add(CASE, None, "history", windows[window], dt)
    _open_cost(ctx, project, run_.run_id)
    run_.drop(force=True)


def _open_cost(ctx: Context, project: Any, run_id: str) -> None:
    """What a new process pays to read a long run's state: the verified cache, or a rebuild of every event.

    The cache is sealed with a MAC keyed from the ledger (sandbox.store.integrity); verifying it costs
    O(cache bytes), a rebuild O(events). Object caches are emptied so the rebuild reads from git.
    """
    from sandbox.run.run import Run
    from sandbox.store import objects
    from sandbox.store.project import Project

    cache = os.path.join(project.run_dir(run_id), "ledger-cache.json")
    from sandbox.run.fold import FOLD
    from sandbox.store.ledger import Ledger

    ledger = Ledger(project.repo, run_id, project.run_dir(run_id), FOLD)
    state = ledger.state()
    n = state.count
    ledger.save_cache(state)  # a cache at the tip, as a command finds it after a busy run
    for label, rebuild in (("verified cache", False), ("no cache: every event re-read", True)):
        for _ in range(HISTORY_SAMPLES):
            with open(cache, "rb") as fh:
                saved = fh.read()
            if rebuild:
                os.unlink(cache)
            objects.clear_caches()
            t0 = time.perf_counter()
            Run.open(Project(project.common_dir), run_id).load()
            dt = time.perf_counter() - t0
            with open(cache, "wb") as fh:
                fh.write(saved)
            ctx.results.add(CASE, None, "open", f"state() in a new Run, {n} events, {label}", dt)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """No target was set for the ledger: reported only."""
    return []


def _writer() -> None:
    from sandbox.models import EventKind
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    git_dir, run_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run = Run.open(Project(git_dir), run_id)
    run.load()
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        run.record(EventKind.note, data={"writer": os.getpid(), "i": i})


if __name__ == "__main__":
    _writer()
