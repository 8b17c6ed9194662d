"""Where a call's file changes come from: one interface, three sources, one function that picks.

A command (a Bash call, ``sandbox exec``) may change any file of the worktree. Its changes are the
paths a :class:`ChangeSource` saw between the call's ``begin`` and ``end``:

* :class:`TreeSource`: a window on a watched tree, inside the process that watches it (the
  repository's host, :mod:`sandbox.agent.host`, or an :class:`~sandbox.fast.inotify.Inotify` of this
  process);
* :class:`sandbox.agent.wire.RunChanges`: the same, asked of the host over its socket;
* :class:`Scan`: nobody watches; ``end`` answers None and the recorder scans the worktree.

``end`` answering None always means "scan": a source that cannot vouch for a call (its watcher
lost events, hit the user's inotify limits, or its host died) never makes a call's record wrong,
only slower. :func:`pick` is the one place that decides which source a caller gets.
Standard library only (the hook fast path may import it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol


class ChangeSource(Protocol):
    """Tells which paths changed during a call (see the module docstring)."""

    #: "watcher", "host" or "scan": for logs and ``sandbox exec``'s report.
    name: str

    def begin(self, call_id: str) -> None:
        """A call starts: collect its changes from now on."""
        ...

    def end(self, call_id: str) -> set[str] | None:
        """The call ended: the paths changed since its ``begin``, or None (scan)."""
        ...


class Windows(Protocol):
    """What :class:`TreeSource` needs of a watcher: windows (an inotify tree or a Watcher)."""

    def open_window(self) -> int:
        """Start a window; its token."""
        ...

    def close_window(self, token: int) -> set[str] | None:
        """Sync, then the paths seen since the window opened, or None."""
        ...

    def discard_window(self, token: int) -> None:
        """Forget a window."""
        ...


class Scan:
    """Nobody watches: every call's changes are found by scanning the worktree."""

    name = "scan"

    def __init__(self, reason: str | None = None) -> None:
        #: Why (one line), when scanning is not the caller's own choice.
        self.reason = reason

    def begin(self, call_id: str) -> None:
        """Nothing to do."""

    def end(self, call_id: str) -> set[str] | None:
        """Always None: scan."""
        return None


class TreeSource:
    """Calls' windows on a watcher in this process; at most ``max_calls`` open (the oldest go)."""

    name = "watcher"

    def __init__(self, windows: Windows, max_calls: int = 1024) -> None:
        self.windows = windows
        self.max_calls = max_calls
        self._calls: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, call_id: str) -> None:
        """Open the call's window; a repeated begin keeps the first one.

        Anyone in the sandbox can send a ``begin``: a second one must not forget what the call
        changed since it began (the call would be recorded with none of it).
        """
        token = self.windows.open_window()
        with self._lock:
            stale = [token] if call_id in self._calls else []
            if not stale:
                self._calls[call_id] = token
            while len(self._calls) > self.max_calls:  # calls whose end never came
                stale.append(self._calls.popitem(last=False)[1])
        for old in stale:
            self.windows.discard_window(old)

    def end(self, call_id: str) -> set[str] | None:
        """Close the call's window; None when it has none or the watcher cannot vouch."""
        with self._lock:
            token = self._calls.pop(call_id, None)
        return None if token is None else self.windows.close_window(token)

    def replace(self, windows: Windows) -> None:
        """Use another watcher from now on (after a restart); open windows answer None."""
        with self._lock:
            self._calls.clear()
            self.windows = windows


def pick(
    *,
    tree: Windows | None = None,
    host: tuple[str, str, str] | None = None,
    host_timeout: float = 15.0,
) -> ChangeSource:
    """The change source for a caller: its own watcher, else the repository's host, else a scan.

    ``tree``: a watched tree of this process (the host's, or a local Watcher). ``host``:
    ``(common_dir, run_id, run_dir)`` when the caller may ask the repository's host (it is asked
    only when it lives).
    """
    if tree is not None:
        return TreeSource(tree)
    if host is not None:
        from sandbox.agent import wire

        common_dir, run_id, run_dir = host
        if wire.host_alive(common_dir):
            return wire.run_ops(common_dir, run_id, run_dir, timeout=host_timeout)
    return Scan()
