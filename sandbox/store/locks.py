"""Advisory file locks (``flock``) that die with their holder.

A lock held by a process that was killed is released by the kernel, so a stale lock cannot block
anyone; the lock file records the holder's pid only to say who is waiting on whom.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import threading
import time

from sandbox.errors import LockedError

TYPE_CHECKING = False  # no typing at run time: sandbox start's early part takes a run's lock
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

#: Wider than any pid (Linux's largest is 7 digits), so a holder's pid always covers the last one's.
_PID_WIDTH = 12


@contextlib.contextmanager
def file_lock(path: str, what: str, timeout: float = 30.0) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Waits up to ``timeout`` seconds, then raises :class:`LockedError` naming ``what`` and the
    holder's pid. A holder killed with SIGKILL releases the lock at once.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except (FileNotFoundError, FileExistsError):
            # The directory was removed (remove_locked_dir, by gc) between makedirs' mkdir and its
            # own is-a-directory check, or between makedirs and open: make it again.
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            if time.monotonic() >= deadline:
                holder = _holder(path)
                raise LockedError(
                    f"{what} is locked by another sandbox process{holder}; wait for it to finish "
                    "(a killed holder releases the lock by itself)."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        # The holder before us may have removed the lock file (gc removing a dead run's directory):
        # a lock on an unlinked file excludes no one, so take the lock again on the file now there.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        # The pid padded to a fixed width, written over the last holder's: no truncation, which
        # measured 1.3 ms per lock on a busy disk (two locks on every recorded hook).
        os.pwrite(fd, str(os.getpid()).encode().ljust(_PID_WIDTH), 0)
        yield
    finally:
        os.close(fd)


def _holder(path: str) -> str:
    try:
        with open(path) as fh:
            pid = fh.read().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid else ""


def remove_locked_dir(directory: str, lock_name: str = "lock") -> None:
    """Remove ``directory`` while holding the lock on ``directory/lock_name``; call it last under the lock.

    Everything else goes first and the lock file last: until it is unlinked, every newcomer waits on
    it; once it is gone, a newcomer locks a fresh file (see :func:`file_lock`), and whatever it then
    writes in the directory is left alone (the final rmdir fails on a non-empty directory).
    """
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in entries:
        if name == lock_name:
            continue
        full = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, lock_name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


@contextlib.contextmanager
def released(lock: threading.Lock) -> Iterator[None]:
    """Let go of ``lock`` (held by the caller) for the body, and take it again after."""
    lock.release()
    try:
        yield
    finally:
        lock.acquire()


class ReentrantFileLock:
    """A run's file lock, re-entrant within one process (nested appends inside a finish, a start
    taken over from its early part: :mod:`sandbox.run.prestart`)."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what
        self._depth = 0
        self._thread_lock = threading.RLock()
        self._cm: Any = None

    @contextlib.contextmanager
    def hold(self, timeout: float = 30.0) -> Iterator[None]:
        """Hold the lock for the block (taken on the file only by the outermost hold)."""
        with self._thread_lock:
            if self._depth == 0:
                cm = file_lock(self.path, self.what, timeout)
                cm.__enter__()
                self._cm = cm
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._cm is not None:
                    held, self._cm = self._cm, None
                    held.__exit__(None, None, None)


_LOCKS: dict[str, ReentrantFileLock] = {}
_LOCKS_GUARD = threading.Lock()


def run_lock(path: str, what: str) -> ReentrantFileLock:
    """The process-wide re-entrant lock object for one run's lock file."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(path)
        if lock is None:
            lock = _LOCKS[path] = ReentrantFileLock(path, what)
        return lock
