"""The ledger's durable write: objects, then the ref, with the fsyncs that need no order issued together.

An append must be on disk before it is acknowledged, and an object must be on disk before any ref
that names it. Done one fsync at a time (libgit2's way), that is four waits for one loose object and
a ref: the object's file, its fan-out directory, the ref's file, the ref's directory. Only three of
them depend on each other, a chain that no reordering can shorten:

1. the object's content (in its temp file) and the ref's new content (in ``<ref>.lock``, which no
   reader takes for the ref), synced **together**: neither is visible under its final name yet;
2. the object linked to its final name, and its directory synced: the object is now durable;
3. the lock file renamed over the ref, and the ref's directory synced: the event is durable.

A content is never given its final name before it is synced, so a crash never leaves a torn object
or ref that a later write would take for a whole one. :func:`sync_together` issues the fsyncs of a
phase at once (the caller's thread and a small pool kept by the process): the disk then serves them
in one flush, or one journal commit (measured in bench/results/2026-12-06-hook.md).

Writers of a ref take git's lock protocol (``<ref>.lock``, created exclusively), so ``git`` itself
never interleaves with them, and the update is a compare-and-swap on the ref's value under that lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
import zlib
from collections.abc import Callable, Sequence

import pygit2

from sandbox import faults
from sandbox.store import packs
from sandbox.store.fsutil import sync_together

faults.POINTS.update({"ledger.append.after_objects", "ledger.append.after_ref_rename"})


class RefMovedError(ValueError):
    """The ref's value was not the expected one when its lock was taken (another writer moved it)."""


def _open_dir(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


class RefUpdate:
    """A ref about to move from ``old`` to ``new`` under git's lock (``<ref>.lock``), not yet synced.

    Made by :func:`lock_ref`; :meth:`commit` renames the lock over the ref and syncs its directory,
    :meth:`abort` gives the lock up. The lock's content is synced with the objects (see :func:`flush_with`).
    """

    def __init__(self, path: str, fd: int, made: list[int]) -> None:
        self.path = path
        self.fd = fd
        #: Directories whose entries changed because the ref's directories were made (git's
        #: ``pack-refs`` removes empty ones): synced with the lock's content.
        self.made = made

    @property
    def fds(self) -> list[int]:
        """What must be synced before the ref moves: the lock's content, the new directories' entries."""
        return [self.fd, *self.made] if self.fd >= 0 else list(self.made)

    def commit(self) -> None:
        """Move the ref (rename its lock over it) and make that durable."""
        self._close()
        os.replace(self.path + ".lock", self.path)
        faults.point("ledger.append.after_ref_rename")
        dfd = _open_dir(os.path.dirname(self.path))
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def abort(self) -> None:
        """Give the lock up; the ref keeps its value."""
        self._close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path + ".lock")

    def _close(self) -> None:
        for fd in [self.fd, *self.made]:
            if fd >= 0:
                os.close(fd)
        self.fd, self.made = -1, []


def lock_ref(repo: pygit2.Repository, common_dir: str, ref: str, old: str | None, new: str) -> RefUpdate:
    """Take ``ref``'s lock and write ``new`` into it, if the ref's value is ``old`` (None: if there is
    no such ref), else :class:`RefMovedError`.

    ``ref`` is a shared ref (``refs/...``), so it lives in the common git directory ``common_dir``.
    """
    path = os.path.join(common_dir, ref)
    made: list[int] = []
    try:
        for attempt in range(3):
            try:
                fd = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                break
            except FileNotFoundError:  # a new ref, or git's pack-refs removed its empty directory
                if attempt == 2:
                    raise
                made += _make_dirs(common_dir, os.path.dirname(ref))
    except BaseException:
        for made_fd in made:
            os.close(made_fd)
        raise
    update = RefUpdate(path, fd, made)
    try:
        found = repo.references.get(ref)  # under the lock: a loose file or a packed-refs line
        if (None if found is None else str(found.target)) != old:
            where = "exists already" if old is None else f"is no longer at {old[:12]}"
            raise RefMovedError(f"{ref} {where} (another writer moved it)")
        _write_all(fd, new.encode("ascii") + b"\n")
    except BaseException:
        update.abort()
        raise
    return update


def _make_dirs(root: str, rel: str) -> list[int]:
    """Make the missing directories of ``rel`` under ``root``; descriptors of the directories whose
    entries changed (each new directory's parent), for the caller to sync and close."""
    made: list[int] = []
    parent = root
    for part in rel.split("/"):
        here = os.path.join(parent, part)
        try:
            os.mkdir(here)
        except FileExistsError:
            pass
        except BaseException:
            for fd in made:
                os.close(fd)
            raise
        else:
            made.append(_open_dir(parent))
        parent = here
    return made


def write_loose(objects_dir: str, kind: int, data: bytes, also: Sequence[int] = ()) -> str:
    """Store one object as a loose object, durably, syncing the descriptors ``also`` with its content; its id.

    An object already stored loose is synced again where it is (``git`` writes loose objects without
    fsync by default), never rewritten.
    """
    oid = packs.object_id(kind, data)
    fan = os.path.join(objects_dir, oid[:2])
    final = os.path.join(fan, oid[2:])
    new_fan = False
    try:
        os.mkdir(fan)
        new_fan = True
    except FileExistsError:
        pass
    opened: list[int] = []
    tmp: str | None = None
    try:
        if os.path.exists(final):
            opened.append(os.open(final, os.O_RDONLY | os.O_CLOEXEC))
        else:
            tmp = os.path.join(objects_dir, f"{packs.TEMP_PREFIX}{os.urandom(8).hex()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
            opened.append(fd)
            header = b"%s %d\0" % (packs.TYPE_NAMES[kind], len(data))
            _write_all(fd, zlib.compress(header + data, 1))
        if new_fan:
            opened.append(_open_dir(objects_dir))  # the new fan-out directory's own entry
        sync_together([*opened, *also])
        if tmp is not None:
            _link(tmp, final)
        fan_fd = _open_dir(fan)
        try:
            os.fsync(fan_fd)
        finally:
            os.close(fan_fd)
    finally:
        for fd in opened:
            os.close(fd)
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return oid


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _link(tmp: str, final: str) -> None:
    """Give the synced temp file its final name (kept if another writer stored the same object first)."""
    try:
        os.link(tmp, final)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise


def flush_with(flush: Callable[[Sequence[int]], None], update: RefUpdate) -> None:
    """Make the objects durable with ``flush`` (given the ref lock's descriptor to sync alongside), then
    move the ref durably; the ref's lock is given up if anything fails before it moves."""
    try:
        flush(update.fds)
        faults.point("ledger.append.after_objects")
    except BaseException:
        update.abort()
        raise
    update.commit()
