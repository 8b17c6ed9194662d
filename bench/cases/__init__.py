"""The benchmark cases. Each module has ``run(ctx, repo)`` and ``targets(results, sizes)``.

A case measures the sandbox and its alternatives side by side, alternating the variants within
each repetition so that a burst of load on the machine hits all of them alike.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from bench.genrepo import Repo
from bench.results import Results

#: Case name -> module, in the order they run for each repository size.
CASES = {
    "start": "bench.cases.start",
    "record": "bench.cases.record",
    "apply": "bench.cases.apply",
    "ledger": "bench.cases.ledger",
    "hook": "bench.cases.hook",
    "watcher": "bench.cases.watcher",
    "confine": "bench.cases.confine",
    "deepsettings": "bench.cases.deepsettings",
    "hunks": "bench.cases.hunks",
    "bigfile": "bench.cases.bigfile",
    "mcp": "bench.cases.mcp",
    "travel": "bench.cases.travel",
    "startup": "bench.cases.startup",
    "agentgit": "bench.cases.agentgit",
    "netproxy": "bench.cases.netproxy",
    "transcripts": "bench.cases.transcripts",
    "firstscreen": "bench.cases.firstscreen",
    "ports": "bench.cases.ports",
    "uipage": "bench.cases.uipage",
    "runstores": "bench.cases.runstores",
    "history": "bench.cases.history",
}


@dataclass
class Context:
    """What every case gets: where to work, how often to repeat, where to put results."""

    results: Results
    sizes: list[int]
    repeat: int | None
    log: Callable[[str], None] = print
    extra: dict[str, object] = field(default_factory=dict)

    def reps(self, default: int) -> int:
        """``--repeat`` when given, else the case's default."""
        return self.repeat if self.repeat else default

    def rounds(self, default: int, budget: float, minimum: int = 3) -> Iterator[int]:
        """Repetition numbers: ``--repeat`` exactly when given; else ``default`` of them, but no new
        one after ``budget`` seconds once ``minimum`` are done (a loaded machine stays in time)."""
        if self.repeat:
            yield from range(self.repeat)
            return
        t0 = time.perf_counter()
        for i in range(default):
            if i >= minimum and time.perf_counter() - t0 > budget:
                return
            yield i


def module_available(name: str) -> bool:
    """True when a module of the library exists (parts of it are written in parallel)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def settle() -> None:
    """Write dirty pages back before a sample (not timed), so no sample pays for an earlier one.

    Without it, the first fsync of a sandbox sample also flushes what the variant before it wrote
    (a whole-tree snapshot writes a 10 MB index and new objects): the same one-file record measured
    7 ms after a quiet variant and up to 180 ms after a snapshot. Every variant gets the same.
    """
    os.sync()
    os.sync()  # again: on a loop mount the first one leaves the backing file dirty on the host


def rotate(items: Sequence[object], i: int) -> list[object]:
    """``items`` rotated by ``i``: each repetition starts with a different variant."""
    if not items:
        return []
    k = i % len(items)
    return list(items[k:]) + list(items[:k])


def drop_runs(repo: Repo) -> None:
    """Drop every run of a repository (cleanup between measurements, not timed)."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project = Project(os.path.join(repo.path, ".git"))
    if not os.path.isdir(project.runs_dir):
        return
    for run_id in os.listdir(project.runs_dir):
        try:
            Run.open(project, run_id).drop(force=True)
        except Exception:  # noqa: BLE001 - cleanup must go on; genrepo tidies what is left
            pass


def load(name: str) -> object:
    """The module of a case."""
    return importlib.import_module(CASES[name])
