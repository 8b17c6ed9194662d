"""One inotify instance for many worktrees: the host's watcher, with its watches counted.

watchdog gives every watched tree an inotify instance of its own, and a user gets 128 of them
(``fs.inotify.max_user_instances``): a hundred runs would not fit. The host of a repository
(:mod:`sandbox.agent.host`) therefore watches every run's worktree through one :class:`Inotify`
(one instance, one reader thread), each worktree a :class:`Tree`; ``execute(local_watcher=True)``
(:mod:`sandbox.agent.execute`) watches its one worktree the same way, with an instance of its own.
The kernel's interface only: no private part of a library (watchdog's inotify reader, read before,
changed in 7.1.1 and stopped the watcher vouching)::

    inotify = Inotify(max_watches=...)        # None when the instance cannot be had (see .error)
    tree = inotify.watch(worktree, ignore)    # one watch per directory, counted
    token = tree.open_window()                # before a call's tool runs
    paths = tree.close_window(token)          # sync, then the paths seen since, or None (scan)
    inotify.unwatch(tree)

A tree only answers for intervals it can vouch for; otherwise ``None`` and the caller scans:

- its directories did not all get a watch: the user's ``fs.inotify.max_user_watches`` (or the
  host's own ``max_watches`` budget) would be exceeded. Then the tree holds no watch at all and
  :attr:`Tree.lost_reason` says so in one line: the run's changes are found by scanning;
- the kernel's event queue overflowed (every tree of the instance loses: events were lost);
- its root was deleted or moved, or a sync timed out.

Paths are relative to the root, ``/``-separated, decoded with :func:`os.fsdecode`. Anything in a
``.git`` directory and ``ignore(rel)`` matches are dropped; a created directory is walked and its
files reported (they may have been written before its watch was added); a moved or deleted
directory is reported itself (capture expands it). Callers confirm every path by content hash, so
a superset is harmless. Only the standard library (ctypes) is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import select
import struct
import threading
import time
from collections.abc import Callable

#: Name prefix of the sync sentinel files (capture skips names starting with it).
SYNC_PREFIX = ".sandbox-sync"
SYNC_TIMEOUT = 10.0

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")
_PROC = "/proc/sys/fs/inotify/"


def user_limit(name: str) -> int | None:
    """``fs.inotify.<name>`` (``max_user_watches``, ``max_user_instances``), or None when unknown."""
    try:
        with open(_PROC + name, "rb") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    """The C library with the inotify calls; None when none can be loaded.

    Not ``ctypes.util.find_library``: it runs ``ldconfig -p`` (and on some systems gcc) in a
    subprocess at first use. ``CDLL(None)`` is the running process's own symbols, libc's among them.
    """
    global _libc
    if _libc is None:
        for name in (None, "libc.so.6"):
            try:
                lib = ctypes.CDLL(name, use_errno=True)
            except OSError:
                continue
            if all(hasattr(lib, f) for f in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch")):
                _libc = lib
                break
    return _libc


def _loaded() -> ctypes.CDLL:
    """The C library of an instance that has a descriptor (it has one only when the library loaded)."""
    assert _libc is not None
    return _libc


class Tree:
    """One watched directory tree (a run's worktree) inside an :class:`Inotify`; thread-safe."""

    def __init__(self, owner: Inotify, root: str, ignore: Callable[[str], bool] | None) -> None:
        self.owner = owner
        self.root = os.path.abspath(root)
        self.ignore = ignore
        #: Why the tree does not vouch (None while it does).
        self.lost_reason: str | None = None
        #: ``time.monotonic()`` of the last change seen (0.0: none yet).
        self.last_event = 0.0
        #: Watches this tree holds.
        self.watches = 0
        self._windows: dict[int, set[str] | None] = {}
        self._next = 1
        #: Sync sentinels awaited, by name; the watch descriptors this tree holds (both under the owner's lock).
        self.waiters: dict[str, threading.Event] = {}
        self.wds: set[int] = set()
        self.active = False

    @property
    def vouching(self) -> bool:
        """True while every directory is watched and nothing was lost."""
        return self.active and self.lost_reason is None

    def open_window(self) -> int:
        """Start collecting changed paths for one call; a token for :meth:`close_window`."""
        with self.owner.lock:
            token = self._next
            self._next += 1
            self._windows[token] = set() if self.vouching else None
            return token

    def close_window(self, token: int, *, sync: bool = True, timeout: float = SYNC_TIMEOUT) -> set[str] | None:
        """Sync (unless told not to), then the paths changed since the window opened, or None."""
        synced = self.sync(timeout) if sync else self.vouching
        with self.owner.lock:
            paths = self._windows.pop(token, None)
        return paths if synced and self.vouching else None

    def discard_window(self, token: int) -> None:
        """Forget a window without reading it."""
        with self.owner.lock:
            self._windows.pop(token, None)

    def sync(self, timeout: float = SYNC_TIMEOUT) -> bool:
        """Wait until every event up to now is seen (a sentinel file's deletion comes back)."""
        if not self.vouching:
            return False
        name = f"{SYNC_PREFIX}-{secrets.token_hex(6)}"
        waiter = threading.Event()
        with self.owner.lock:
            self.waiters[name] = waiter
        path = os.path.join(self.root, name)
        try:
            with open(path, "xb"):
                pass
            os.unlink(path)
        except OSError as exc:
            with self.owner.lock:
                self.waiters.pop(name, None)
            self.lose(f"the watcher could not sync in {self.root} ({exc.strerror or exc})")
            return False
        got = waiter.wait(timeout)
        with self.owner.lock:
            self.waiters.pop(name, None)
        if not got:
            self.lose(f"the watcher did not catch up within {timeout:g} s")
        return got and self.vouching

    def lose(self, reason: str) -> None:
        """Stop vouching (every open window answers None) until the tree is watched again."""
        with self.owner.lock:
            self.lose_locked(reason)

    def lose_locked(self, reason: str) -> None:
        """:meth:`lose`, for a caller holding the owner's lock (the reader)."""
        if self.lost_reason is None:
            self.lost_reason = reason
        for token in self._windows:
            self._windows[token] = None
        for waiter in self.waiters.values():
            waiter.set()

    def report_locked(self, rels: list[str]) -> None:
        """Add changed paths to every open window (the caller holds the owner's lock)."""
        kept = [r for r in rels if not _in_git_dir(r) and not (self.ignore is not None and self.ignore(r))]
        if not kept:
            return
        self.last_event = time.monotonic()
        for token, paths in self._windows.items():
            if paths is not None:
                paths.update(kept)
                if len(paths) > self.owner.max_paths:
                    self._windows[token] = None


class Inotify:
    """One inotify instance and its reader thread, shared by many :class:`Tree` objects.

    ``max_watches`` caps the watches this instance may hold (a budget below the user's limit, or a
    test harness's); ``max_trees`` caps how many trees are watched (the rest answer None: scan).
    When the instance cannot be created (``fs.inotify.max_user_instances`` reached), :attr:`error`
    says so and every tree is refused.
    """

    def __init__(
        self, *, max_watches: int | None = None, max_trees: int | None = None, max_paths: int = 500_000
    ) -> None:
        self.lock = threading.RLock()
        self.max_watches = max_watches
        self.max_trees = max_trees
        self.max_paths = max_paths
        self.trees: list[Tree] = []
        #: Watches held by every tree together.
        self.watches = 0
        self.error: str | None = None
        self._wd: dict[int, tuple[Tree, str]] = {}
        self._fd = -1
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        lib = _lib()
        fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if lib is not None else -1
        if fd < 0:
            err = ctypes.get_errno() if lib is not None else errno.ENOSYS
            if err == errno.EMFILE:
                limit = user_limit("max_user_instances")
                self.error = (
                    f"the user's inotify instances are used up (fs.inotify.max_user_instances = {limit}); "
                    "changes are found by scanning"
                )
            else:
                self.error = f"inotify is not available ({os.strerror(err)}); changes are found by scanning"
            return
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._read_loop, name="sandbox-inotify", daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """The inotify file descriptor (-1 when there is none)."""
        return self._fd

    def watch(self, root: str, ignore: Callable[[str], bool] | None = None) -> Tree:
        """Watch every directory below ``root``; a tree that does not vouch when it cannot."""
        tree = Tree(self, root, ignore)
        with self.lock:
            if self.error is not None:
                tree.lost_reason = self.error
                return tree
            if self.max_trees is not None and sum(1 for t in self.trees if t.active) >= self.max_trees:
                tree.lost_reason = (
                    f"the host watches {self.max_trees} runs already (its limit); "
                    "this run's changes are found by scanning"
                )
                return tree
            self.trees.append(tree)
            tree.active = True
        failure = self._add_tree(tree, "")
        if failure is not None:
            self.unwatch(tree)  # a tree that does not fit holds no watch and takes no place
            tree.lost_reason = failure
        return tree

    def unwatch(self, tree: Tree) -> None:
        """Stop watching ``tree`` (idempotent); its windows answer None."""
        self._drop_watches(tree)
        with self.lock:
            tree.active = False
            tree.lose_locked("the run is no longer watched")
            if tree in self.trees:
                self.trees.remove(tree)

    def rewatch(self, tree: Tree) -> Tree:
        """Watch ``tree``'s root again from scratch (after it lost events); the new tree."""
        self.unwatch(tree)
        return self.watch(tree.root, tree.ignore)

    def close(self) -> None:
        """Stop the reader and close the instance (every watch goes with it)."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        for tree in list(self.trees):
            with self.lock:
                tree.active = False
                tree.lose_locked("the host stopped watching")
        os.close(fd)
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- watches ---------------------------------------------------------------------------------

    def _add_tree(self, tree: Tree, rel: str) -> str | None:
        """Add watches for ``rel`` (a directory of the tree) and everything below; why not, or None.

        Returns the relative paths of the files found below (for a directory created after start).
        """
        stack = [rel]
        while stack:
            here = stack.pop()
            if not tree.active:
                return None
            why = self._add_one(tree, here)
            if why is not None:
                if why == "gone":
                    continue
                return why
            full = os.path.join(tree.root, here) if here else tree.root
            try:
                with os.scandir(full) as entries:
                    for entry in entries:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            continue
                        if not is_dir or entry.name.lower() == ".git":
                            continue
                        child = f"{here}/{entry.name}" if here else entry.name
                        if tree.ignore is not None and tree.ignore(child):
                            continue
                        stack.append(child)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                return f"could not read {full} ({exc.strerror or exc}); changes are found by scanning"
        return None

    def _add_one(self, tree: Tree, rel: str) -> str | None:
        with self.lock:
            if self.max_watches is not None and self.watches >= self.max_watches:
                return (
                    f"the host's inotify watch budget ({self.max_watches}) is used up; "
                    "this run's changes are found by scanning"
                )
        path = os.fsencode(os.path.join(tree.root, rel) if rel else tree.root)
        wd = _loaded().inotify_add_watch(self._fd, path, _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR) and rel:
                return "gone"  # vanished meanwhile: nothing to watch
            if err == errno.ENOSPC:
                limit = user_limit("max_user_watches")
                return (
                    f"the user's inotify watches are used up (fs.inotify.max_user_watches = {limit}); "
                    "this run's changes are found by scanning"
                )
            return f"could not watch {os.fsdecode(path)} ({os.strerror(err)}); changes are found by scanning"
        with self.lock:
            known = self._wd.get(wd)
            if known is not None and known[0] is not tree:
                return f"{os.fsdecode(path)} is watched for another run already; changes are found by scanning"
            if known is None:
                tree.watches += 1
                self.watches += 1
                tree.wds.add(wd)
            self._wd[wd] = (tree, rel)  # a directory moved within the tree keeps its wd: new name
        return None

    def _drop_watches(self, tree: Tree) -> None:
        with self.lock:
            wds = list(tree.wds)
            tree.wds.clear()
            for wd in wds:
                self._wd.pop(wd, None)
            self.watches -= tree.watches
            tree.watches = 0
        if self._fd >= 0:
            for wd in wds:
                _loaded().inotify_rm_watch(self._fd, wd)

    # -- events ----------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            try:
                ready = poller.poll()
            except InterruptedError:
                continue
            if any(fd == self._wake_r for fd, _ in ready) or self._fd < 0:
                return
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                return
            try:
                self._dispatch(data)
            except Exception as exc:  # never let the reader die silently: nobody could vouch any more
                with self.lock:
                    for tree in self.trees:
                        tree.lose_locked(f"the watcher failed on an event ({type(exc).__name__}: {exc})")

    def _dispatch(self, data: bytes) -> None:
        # Sync waiters are woken after the walks of directories created in the same read: a window
        # closed on that sync then holds the files of a directory moved in before it, not the next one.
        synced: list[threading.Event] = []
        try:
            self._dispatch_read(data, synced)
        finally:
            for waiter in synced:
                waiter.set()

    def _dispatch_read(self, data: bytes, synced: list[threading.Event]) -> None:
        offset = 0
        created: list[tuple[Tree, str]] = []
        with self.lock:
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size : offset + _HEADER.size + size].rstrip(b"\0")
                offset += _HEADER.size + size
                if mask & IN_Q_OVERFLOW:
                    for tree in self.trees:
                        tree.lose_locked("the inotify event queue overflowed; events were lost")
                    continue
                known = self._wd.get(wd)
                if known is None:
                    continue
                tree, rel_dir = known
                if mask & IN_IGNORED:
                    self._wd.pop(wd, None)
                    if wd in tree.wds:
                        tree.wds.discard(wd)
                        tree.watches -= 1
                        self.watches -= 1
                    continue
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    if not rel_dir:
                        tree.lose_locked(f"the watched directory {tree.root} was deleted or moved")
                    continue
                name = os.fsdecode(raw)
                if not name:
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if not rel_dir and name.startswith(SYNC_PREFIX):
                    if mask & IN_DELETE:
                        waiter = tree.waiters.get(name)
                        if waiter is not None:
                            synced.append(waiter)
                    continue
                tree.report_locked([rel])
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    created.append((tree, rel))
        for tree, rel in created:  # outside the lock: a walk can take a while
            if _in_git_dir(rel) or (tree.ignore is not None and tree.ignore(rel)) or not tree.active:
                continue
            failure = self._add_tree(tree, rel)
            if failure is not None:
                self._drop_watches(tree)
                tree.lose(failure)
                continue
            found = _files_below(os.path.join(tree.root, rel), rel)
            with self.lock:
                tree.report_locked(found)


def _files_below(full: str, rel: str) -> list[str]:
    out: list[str] = []
    for here, dirs, files in os.walk(full):
        sub = os.path.relpath(here, full)
        base = rel if sub == "." else f"{rel}/{sub.replace(os.sep, '/')}"
        dirs[:] = [d for d in dirs if d.lower() != ".git"]
        out.extend(f"{base}/{name}" for name in files)
    return out


def _in_git_dir(rel: str) -> bool:
    return any(part.lower() == ".git" for part in rel.split("/"))


def instances_of(pid: int) -> tuple[int, int]:
    """(inotify instances, watches) held by process ``pid``, read from ``/proc`` (for tests and bench/)."""
    instances = watches = 0
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return 0, 0
    for name in names:
        try:
            if os.readlink(f"{base}/{name}") != "anon_inode:inotify":
                continue
            with open(f"/proc/{pid}/fdinfo/{name}", "rb") as fh:
                watches += sum(1 for line in fh if line.startswith(b"inotify wd:"))
            instances += 1
        except OSError:
            continue
    return instances, watches
