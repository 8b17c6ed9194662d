"""Learning which paths of a worktree changed, from inotify (through watchdog), or saying it cannot.

A :class:`Watcher` watches every directory below a root and remembers the relative paths that were
created, modified, deleted, moved (both ends) or chmod-ed. It only ever answers for intervals it can
vouch for; otherwise it answers ``None`` and the caller scans (see :mod:`sandbox.store.scan`)::

    w = Watcher(worktree)
    w.start()               # adds one inotify watch per directory; never raises for inotify trouble
    w.take()                # forget what happened so far
    ...                     # something (another process) changes files
    paths = w.take()        # sync, then every path changed since the last take, or None
    w.stop()

For calls that overlap (several tools at once, one watcher per session) use windows::

    token = w.open_window()           # before the call's tool runs
    paths = w.close_window(token)     # after it ended: sync, then the paths seen since open, or None

A window sees at least every change made between ``open_window`` returning and ``close_window``
being called, and possibly more (other calls' changes, or events from just before): callers
confirm each path by content hash (:mod:`sandbox.store.capture`), so a superset is harmless.

When the watcher cannot vouch (``None``):
- it is not running, or :meth:`sync` timed out (the event pipeline is stuck or far behind);
- the kernel's event queue overflowed: events were lost. watchdog would log "Inotify queue
  overflowed" and rebuild its watches in a loop that can spin forever on large trees, so the
  overflow event is intercepted before watchdog sees it, the watcher is marked lost and its observer
  stopped. It stays lost until :meth:`restart`;
- a directory could not be watched (the user's ``fs.inotify.max_user_watches`` is reached, which
  watchdog ignores silently below the root), at start or for a directory created later. At start the
  number of watches the kernel holds (``inotify wd:`` lines in ``/proc/self/fdinfo``) is also checked
  against the number of directories watched;
- the root itself was deleted or moved;
- a window collected more than ``max_paths`` paths (a scan is as cheap by then).

Paths are ``str`` decoded with :func:`os.fsdecode` (surrogateescape), relative to the root, with
``/`` separators. Anything inside a ``.git`` directory is ignored, as are ``ignore(rel)`` matches
and the sentinel files of :meth:`sync`. Changes to directories' own metadata are not reported (git
stores none); a created, deleted or moved directory is reported itself and so are its files.

The event filter leaves out open and close-without-write events: with them, watchdog's own start-up
(which opens every directory) overflows the queue on ~10k directories.

This relies on watchdog 7 internals (its inotify file-descriptor object) to see failed watches and
overflows; with a watchdog that lacks them the watcher starts but never vouches.
"""

from __future__ import annotations

import errno
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypedDict

#: Name prefix of :meth:`Watcher.sync`'s sentinel files (capture skips names starting with it).
SYNC_PREFIX = ".sandbox-sync"

#: How long :meth:`Watcher.sync` waits for its sentinel by default, in seconds.
SYNC_TIMEOUT = 10.0


@dataclass
class WatcherStats:
    """What a start cost and how much of the tree is watched."""

    directories: int = 0  #: directories below the root (and the root) that were watched or tried
    watches: int = 0  #: inotify watches the kernel holds for this watcher after start
    startup_seconds: float = 0.0  #: time from start() to every watch added
    failures: list[str] = field(default_factory=list)  #: why directories could not be watched


class Watcher:
    """Watches a directory tree with inotify and reports changed paths; see the module docstring.

    ``ignore(rel)`` returns True for relative paths whose events should be dropped (``.git`` is
    always dropped). ``take_window=False`` skips the window behind :meth:`take` (a service that only
    uses explicit windows). Thread-safe.
    """

    def __init__(
        self,
        root: str,
        ignore: Callable[[str], bool] | None = None,
        *,
        max_paths: int = 500_000,
        take_window: bool = True,
    ) -> None:
        self.root = os.path.abspath(root)
        self._prefix = self.root.rstrip("/") + "/"
        self.ignore = ignore
        self.max_paths = max_paths
        self.stats = WatcherStats()
        #: Why the watcher stopped vouching (None while it vouches or before start).
        self.lost_reason: str | None = None
        #: ``time.monotonic()`` of the last recorded change (for quiet-point detection).
        self.last_event: float = 0.0
        self._take_window = take_window
        self._lock = threading.Lock()
        self._windows: dict[int, set[str] | None] = {}
        self._next_token = 1
        self._take_token = 0
        self._sync_waiters: dict[str, threading.Event] = {}
        self._observer: Any = None
        self._running = False
        self._ready = False
        self._generation = 0
        self._stop_lock = threading.Lock()
        self._starting_paths: set[bytes] | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def __enter__(self) -> Watcher:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def vouching(self) -> bool:
        """True while the watcher runs and has lost no event since it started."""
        return self._running and self._ready and self.lost_reason is None

    def start(self) -> None:
        """Watch every directory below the root. Returns when all watches are in place.

        Never raises for inotify trouble (instance or watch limits, an unreadable tree): the watcher
        then does not vouch, and :attr:`lost_reason` says why.
        """
        if self._running:
            return
        started = time.monotonic()
        with self._lock:
            self.lost_reason = None
            self._generation += 1
            self._ready = False
            self._windows = {}
            if self._take_window:
                # Promises the changes made after start() returns; after a restart, the interval
                # since the last take had a gap.
                self._take_token = self._next_token
                self._next_token += 1
                self._windows[self._take_token] = set() if self._generation == 1 else None
            self.stats = WatcherStats()
            self._starting_paths = set()
        self._running = True
        try:
            self._observer = self._start_observer()
        except OSError as exc:
            self._lose(f"inotify could not watch {self.root}: {exc.strerror or exc}")
            return
        finally:
            self.stats.startup_seconds = time.monotonic() - started
        if self.lost_reason is not None:
            self._shutdown_observer()  # lost while starting: the background stop ran too early
            return
        with self._lock:
            watched = self._starting_paths or set()
            self._starting_paths = None
        self.stats.directories = len(watched)
        self.stats.watches = kernel_watch_count(self._observer)
        if self.stats.watches < len(watched):
            self._lose(
                f"the kernel holds {self.stats.watches} inotify watches for {len(watched)} directories "
                "(is fs.inotify.max_user_watches reached?)"
            )
            return
        with self._lock:
            self._ready = True

    def _start_observer(self) -> Any:
        from watchdog.events import (
            DirCreatedEvent,
            DirDeletedEvent,
            DirMovedEvent,
            FileAttribEvent,
            FileClosedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
            FileSystemEvent,
            FileSystemEventHandler,
        )
        from watchdog.observers.inotify import InotifyObserver

        watcher = self

        class Handler(FileSystemEventHandler):
            """Hands every event to the watcher, never raising."""

            def dispatch(self, event: FileSystemEvent) -> None:
                try:
                    watcher._event(event)
                except Exception as exc:  # an exception would end watchdog's dispatch thread silently
                    watcher._lose(f"the watcher failed on an event ({type(exc).__name__}: {exc})")

        # watchdog warns when a directory's watch is added twice (by its walk and by the directory's
        # creation event racing it): expected and harmless, and it would print in the agent's terminal.
        warnings.filterwarnings("ignore", message="Callback with id .* already exists", category=RuntimeWarning)
        observer = InotifyObserver()
        fd = getattr(observer, "_inotify_fd", None)
        if fd is None or not hasattr(fd, "add_callback") or not hasattr(fd, "handle_event"):
            self._lose("this watchdog version does not let the sandbox detect lost events")
        else:
            self._instrument(fd)
        observer.schedule(
            Handler(),
            self.root,
            recursive=True,
            event_filter=[
                FileCreatedEvent,
                FileModifiedEvent,
                FileAttribEvent,
                FileClosedEvent,
                FileDeletedEvent,
                FileMovedEvent,
                DirCreatedEvent,
                DirDeletedEvent,
                DirMovedEvent,
            ],
        )
        try:
            observer.start()  # adds every watch in this thread before returning
        except BaseException:
            _stop_quietly(observer)
            raise
        return observer

    def _instrument(self, fd: Any) -> None:
        """Hook watchdog's inotify fd object: see every failed watch and every queue overflow."""
        add_callback = fd.add_callback
        handle_event = fd.handle_event

        def checked_add_callback(path: bytes, *args: Any, **kwargs: Any) -> Any:
            try:
                wd = add_callback(path, *args, **kwargs)
            except OSError as exc:
                # A directory that vanished meanwhile needs no watch; anything else (ENOSPC at the
                # user's watch limit, ENOMEM) leaves part of the tree unwatched.
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    self._failed_watch(path, exc.strerror or str(exc))
                raise
            if wd is None or wd < 0:  # watchdog lets EACCES through as watch -1
                self._failed_watch(path, "permission denied")
            else:
                with self._lock:
                    if self._starting_paths is not None:
                        self._starting_paths.add(path)
            return wd

        def checked_handle_event(event: Any) -> None:
            if getattr(event, "is_queue_overflow", False):
                # Not passed on: watchdog would rebuild every watch, which on a large tree
                # overflows the queue again, forever.
                self._lose("the inotify event queue overflowed; events were lost")
                return
            handle_event(event)

        fd.add_callback = checked_add_callback
        fd.handle_event = checked_handle_event

    def _failed_watch(self, path: bytes, why: str) -> None:
        self.stats.failures.append(f"{os.fsdecode(path)}: {why}")
        self._lose(f"could not watch {os.fsdecode(path)} ({why}; see fs.inotify.max_user_watches)")

    def stop(self) -> None:
        """Stop watching (idempotent). Windows still open answer None."""
        self._running = False
        with self._lock:
            self._ready = False
            for token in self._windows:
                self._windows[token] = None
            for waiter in self._sync_waiters.values():
                waiter.set()
        self._shutdown_observer()

    def restart(self) -> None:
        """Stop, then start again: the watcher vouches again from now on if it can.

        Windows opened before answer None; the next :meth:`take` answers None once.
        """
        self.stop()
        self.start()

    def _shutdown_observer(self, only: Any = None) -> None:
        """Stop the current observer (only if it is still ``only``, when given)."""
        with self._stop_lock:
            if only is not None and self._observer is not only:
                return  # a restart replaced it meanwhile
            observer, self._observer = self._observer, None
            if observer is not None:
                _stop_quietly(observer)

    def _lose(self, reason: str) -> None:
        """Stop vouching, forever until restart; the observer is stopped in the background."""
        with self._lock:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
            for token in self._windows:
                self._windows[token] = None
            for waiter in self._sync_waiters.values():
                waiter.set()
        observer = self._observer
        if observer is None:
            return  # still starting: start() stops it
        # Stopped from another thread: this may run on one of the observer's own threads.
        threading.Thread(
            target=self._shutdown_observer, args=(observer,), name="sandbox-watcher-stop", daemon=True
        ).start()

    # -- windows -------------------------------------------------------------------------------

    def _new_window_locked(self) -> int:
        token = self._next_token
        self._next_token += 1
        self._windows[token] = set() if self.vouching else None
        return token

    def open_window(self) -> int:
        """Start collecting changed paths for one call; returns a token for :meth:`close_window`."""
        with self._lock:
            return self._new_window_locked()

    def close_window(self, token: int, *, sync: bool = True, timeout: float = SYNC_TIMEOUT) -> set[str] | None:
        """Sync (unless told not to), then the paths changed since the window opened, or None."""
        synced = self.sync(timeout) if sync else self.vouching
        with self._lock:
            paths = self._windows.pop(token, None)
        return paths if synced else None

    def discard_window(self, token: int) -> None:
        """Forget a window without reading it."""
        with self._lock:
            self._windows.pop(token, None)

    def take(self, *, sync: bool = True, timeout: float = SYNC_TIMEOUT) -> set[str] | None:
        """The paths changed since the last take (or the start), or None when it cannot vouch.

        Syncs first unless told not to. Collecting starts again either way.
        """
        synced = self.sync(timeout) if sync else self.vouching
        with self._lock:
            paths = self._windows.pop(self._take_token, None)
            self._take_token = self._new_window_locked()
        return paths if synced else None

    # -- sync ----------------------------------------------------------------------------------

    def sync(self, timeout: float = SYNC_TIMEOUT) -> bool:
        """Wait until every event up to now has been processed; False when the watcher cannot vouch.

        Creates and deletes a sentinel file in the root and waits for its deletion event: inotify
        delivers one watcher's events in order, and watchdog keeps that order.
        """
        if not self.vouching:
            return False
        name = f"{SYNC_PREFIX}-{secrets.token_hex(8)}"
        waiter = threading.Event()
        with self._lock:
            self._sync_waiters[name] = waiter
        try:
            path = os.path.join(self.root, name)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.close(fd)
                os.unlink(path)
            except OSError:
                return False
            done = waiter.wait(timeout)
        finally:
            with self._lock:
                self._sync_waiters.pop(name, None)
        if not done:
            # Stuck or far behind: either way later answers would wait as long; a restart helps.
            self._lose(f"the watcher did not process its events within {timeout:g} s")
        return done and self.vouching

    # -- events --------------------------------------------------------------------------------

    def _rel(self, path: str | bytes) -> str | None:
        text = os.fsdecode(path)
        if not text.startswith(self._prefix):
            return None
        return text[len(self._prefix) :]

    def _event(self, event: Any) -> None:
        kind: str = event.event_type
        is_dir: bool = event.is_directory
        if is_dir and kind in ("modified", "attrib", "closed"):
            return  # a directory's own metadata: git stores none, and its entries report themselves
        found: list[str] = []
        for attr in ("src_path", "dest_path") if kind == "moved" else ("src_path",):
            raw = getattr(event, attr, "")
            if not raw:
                continue
            if os.fsdecode(raw).rstrip("/") == self.root.rstrip("/"):
                if kind in ("deleted", "moved"):
                    self._lose(f"the watched directory {self.root} was deleted or moved")
                continue
            rel = self._rel(raw)
            if rel is None:
                continue
            if rel.startswith(SYNC_PREFIX) and "/" not in rel:
                if kind == "deleted":
                    with self._lock:
                        waiter = self._sync_waiters.get(rel)
                    if waiter is not None:
                        waiter.set()
                continue
            if _in_git_dir(rel) or (self.ignore is not None and self.ignore(rel)):
                continue
            found.append(rel)
        if not found:
            return
        self.last_event = time.monotonic()
        with self._lock:
            for token, paths in self._windows.items():
                if paths is None:
                    continue
                paths.update(found)
                if len(paths) > self.max_paths:
                    self._windows[token] = None


def _in_git_dir(rel: str) -> bool:
    return any(part.lower() == ".git" for part in rel.split("/"))


def _stop_quietly(observer: Any) -> None:
    try:
        observer.stop()
        observer.join(timeout=10)
    except (RuntimeError, OSError):
        pass  # already stopped, or its inotify fd is gone: nothing left to release


def kernel_watch_count(observer: Any) -> int:
    """How many inotify watches the kernel holds on ``observer``'s inotify fd (-1 if unknown)."""
    fd_obj = getattr(observer, "_inotify_fd", None)
    fd = getattr(fd_obj, "_inotify_fd", None)
    if not isinstance(fd, int):
        return -1
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            return sum(1 for line in fh if line.startswith(b"inotify wd:"))
    except OSError:
        return -1


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class StartupFigures(TypedDict):
    """What :func:`measure_startup` measured (a bench case prints it as JSON)."""

    seconds: float
    rss_growth_bytes: int
    rss_bytes: int
    directories: int
    watches: int
    vouching: bool
    lost_reason: str | None


def measure_startup(root: str) -> StartupFigures:
    """Start and stop a watcher on ``root``: start-up seconds, RSS growth, watches (for bench/).

    Includes the import of watchdog on the first call in a process.
    """
    rss_before = _rss_bytes()
    started = time.monotonic()
    watcher = Watcher(root)
    watcher.start()
    ready = time.monotonic() - started
    rss_after = _rss_bytes()
    synced = watcher.sync()
    result: StartupFigures = {
        "seconds": ready,
        "rss_growth_bytes": rss_after - rss_before,
        "rss_bytes": rss_after,
        "directories": watcher.stats.directories,
        "watches": watcher.stats.watches,
        "vouching": watcher.vouching and synced,
        "lost_reason": watcher.lost_reason,
    }
    watcher.stop()
    return result
