"""Which paths a process was about to write in a run's worktree: one appended line per write.

A crash in the middle of a call leaves files half-written in the worktree; the run's head commit
already holds what they were before (every write goes through a recorded call), so what would be lost
is only *which* paths the call had begun to touch. Each write helper appends (pid, path) first, and
``sandbox resume`` reads the hints back to attribute such drift to the call that was writing; the
files themselves decide.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

from sandbox.run.core import RunCore

BEFORE_WRITE_LOG = "before-write.log"


def capture_before_write(run: RunCore, path: str) -> None:
    """Record that this process is about to write ``path`` in the run's worktree: O(1).

    The before state itself needs no copy: every write goes through a recorded call, so the run's
    head commit already holds it. What a crash would lose is *which* paths an in-flight call had
    begun to touch; one appended line (pid, path) keeps that, so a resume can attribute drift to
    the call that was writing. The line is a hint; the resume verifies the files themselves.
    """
    line = json.dumps([os.getpid(), path]) + "\n"
    try:
        fd = os.open(os.path.join(run.dir, BEFORE_WRITE_LOG), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def before_writes(run: RunCore) -> Iterator[tuple[int, str]]:
    """The (pid, path) hints left by :func:`capture_before_write`, oldest first."""
    try:
        with open(os.path.join(run.dir, BEFORE_WRITE_LOG), encoding="utf-8") as fh:
            lines = fh.readlines()
    except OSError:
        return
    for line in lines:
        try:
            pid, path = json.loads(line)
        except (ValueError, TypeError):
            continue  # a torn last line after a crash
        if isinstance(pid, int) and isinstance(path, str):
            yield pid, path


def keep_before_writes(run: RunCore, pids: set[int]) -> None:
    """Rewrite the hint log keeping only the lines of ``pids`` (the calls still uncertain)."""
    from sandbox.store.fsutil import atomic_write

    kept = [json.dumps([pid, path]) + "\n" for pid, path in before_writes(run) if pid in pids]
    path = os.path.join(run.dir, BEFORE_WRITE_LOG)
    if not kept:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    atomic_write(path, "".join(kept).encode())
