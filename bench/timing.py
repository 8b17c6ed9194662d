"""Timing helpers: wall-clock samples, whole-process runs with their peak memory, and statistics."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: The sandbox console script of the venv this benchmark runs in.
SANDBOX = os.path.join(os.path.dirname(sys.executable), "sandbox")
GNU_TIME = "/usr/bin/time"


@dataclass
class Proc:
    """One finished whole-process run: wall time, max RSS of its process tree, exit code, output."""

    seconds: float
    max_rss_kb: int | None
    returncode: int
    stdout: bytes
    stderr: bytes


def run_proc(
    argv: Sequence[str],
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    rss: bool = False,
) -> Proc:
    """Run a command to completion, timing it from spawn to reap.

    With ``rss``, the command runs under GNU ``time`` for its peak memory: the largest resident set
    of the command or of any child it waited for (for ``sandbox start``, the ``git worktree add``
    it runs), not a sum. ``wait4`` on a direct child would not do: a forked child's high-water mark
    starts at the size of this (large) benchmark process. The wrapper costs about a millisecond.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    rss_file = None
    if rss and os.path.exists(GNU_TIME):
        fd, rss_file = tempfile.mkstemp(prefix="bench-rss-")
        os.close(fd)
        argv = [GNU_TIME, "-q", "-f", "%M", "-o", rss_file, *argv]
    # Output goes to temp files, not pipes: nothing to drain while the child runs, no deadlock.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        if input is not None and proc.stdin is not None:
            try:
                proc.stdin.write(input)
            except BrokenPipeError:
                pass
            proc.stdin.close()
        _pid, status = os.waitpid(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])}... exited {proc.returncode}: {stderr.decode(errors='replace').strip()[-500:]}"
        )
    max_rss_kb = None
    if rss_file is not None:
        with open(rss_file, encoding="utf-8") as fh:
            text = fh.read().split()
        os.unlink(rss_file)
        max_rss_kb = int(text[-1]) if text and text[-1].isdigit() else None
    return Proc(seconds, max_rss_kb, proc.returncode, stdout, stderr)


def timed(fn: Callable[[], object]) -> float:
    """Seconds taken by one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@dataclass
class Stats:
    """Samples of one measurement and their summary."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def n(self) -> int:
        return len(self.samples)
