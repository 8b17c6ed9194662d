"""The host's front door: connections accepted under caps, requests read under a deadline, handled fairly.

A confined agent can connect to its repository's host socket as often as it likes (its hooks must
reach it). A thread per connection, a timeout per ``recv`` and no cap let one agent holding ~1,100
idle connections exhaust the host's 1,024 descriptors: the host died, and with it every other
run's hooks (issue 25). So:

* **One thread reads every connection** (``selectors``, non-blocking): an idle connection costs a
  descriptor and a few hundred bytes, never a thread.
* **Caps.** At most :attr:`Limits.max_connections` connections are open at once (far below the
  usual 1,024 descriptors), and at most :attr:`Limits.per_peer` for one *peer*: a confined process's
  PID namespace (every ``sandbox exec``/``run`` sandbox has its own, so a flood from inside counts
  against that sandbox only), or the process itself outside any sandbox. Past its cap a peer's new
  connection is closed at once; past the overall cap the oldest connection still being read of the
  peer holding the most is closed to make room, so a new peer always gets in.
* **A deadline per request**, not per ``recv``: the whole request must arrive within
  :attr:`Limits.request_deadline` seconds of the accept (a hook sends it at once), and the reply
  be sent within :attr:`Limits.reply_deadline`; at most :attr:`Limits.max_request` bytes.
* **Descriptors running out** (``EMFILE``/``ENFILE``, or the kernel short of memory) pause the
  accepting with a growing backoff and shed the oldest connection being read, instead of killing
  the host; the reason is said once in the host's notes.
* **Fairness.** Complete requests queue per *lane* (the run a request names, read from its first
  bytes by ``lane``; a request naming none is a lane of its own peer's), and within a lane per peer.
  A few workers take them round-robin over the lanes, then over a lane's peers, at most
  :attr:`Limits.per_run_workers` of one lane and :attr:`Limits.per_peer_workers` of one peer at
  once. A run's requests are recorded one after another anyway (each holds the run's own lock), so
  three workers keep one run's pipeline full (one recording, one decoding the next, one answering)
  and more only wait; with a cap per peer alone, one run's flood from many processes (an agent's
  concurrent hooks: a peer each) held every worker waiting on that run's lock, and another run's hook
  waited for every flooding process's turn (669 ms against 9 ms quiet, 48 processes;
  tests/agent/test_host_fairness.py). A request that names a run it has no token of is
  refused by the handler; it lands in that run's lane under its own peer's queue, one turn among
  the run's peers.

A client whose connection is closed without a reply does what it does when no host lives: it
records in its own process (recording again is idempotent).
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

#: errno values of ``accept`` that mean "out of descriptors or memory for now", not "stop".
_SCARCE = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(frozen=True)
class Limits:
    """The host's bounds on what its clients may hold (see the module docstring)."""

    max_connections: int = 256
    per_peer: int = 32
    request_deadline: float = 10.0
    reply_deadline: float = 30.0
    max_request: int = 4 * 1024 * 1024
    workers: int = 8
    per_peer_workers: int = 2
    per_run_workers: int = 3


@dataclass
class _Conn:
    sock: socket.socket
    peer: tuple[int, int] | None
    key: str
    deadline: float
    lane: str = ""
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    too_large: bool = False


class Intake:
    """Accepts on ``listener`` and answers each request with ``handle(data, peer) -> reply``.

    ``peer_key(peer)`` names the peer a connection counts against; ``lane(data)`` the run a whole
    request is for (None: the peer's own lane); ``note(line)`` gets one line the first time each
    kind of trouble happens. Run :meth:`run` in a thread; :meth:`stop` ends it.
    """

    def __init__(
        self,
        listener: socket.socket,
        handle: Callable[[bytes | None, tuple[int, int] | None], bytes],
        *,
        peer_key: Callable[[tuple[int, int] | None], str],
        lane: Callable[[bytes], str | None] | None = None,
        limits: Limits = Limits(),
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.listener = listener
        self.handle = handle
        self.peer_key = peer_key
        self.lane = lane
        self.limits = limits
        self.note = note
        self.received = 0
        self.handled = 0
        #: Connections closed by a cap, a deadline or a shortage (a test reads them).
        self.shed = 0
        self._noted: set[str] = set()
        self._lock = threading.Condition()
        self._open: dict[str, int] = {}  # per peer key: connections open (read or being handled)
        self._total = 0
        self._reading: dict[int, _Conn] = {}  # by descriptor
        self._lanes: dict[str, _Lane] = {}  # per lane: its peers' queued requests
        self._turns: deque[str] = deque()  # lanes with queued requests, round-robin
        self._busy: dict[str, int] = {}  # per peer key: requests being handled
        self._lane_busy: dict[str, int] = {}  # per lane: requests being handled
        self._inflight = 0
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._workers = [
            threading.Thread(target=self._work, name="sandbox-host-worker", daemon=True) for _ in range(limits.workers)
        ]

    # -- life cycle ----------------------------------------------------------------------------

    def run(self) -> None:
        """Accept and read until :meth:`stop`; then close what is still being read."""
        for worker in self._workers:
            worker.start()
        self.listener.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        paused_until = 0.0
        backoff = 0.05
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                if paused_until and now >= paused_until:
                    paused_until = 0.0
                    sel.register(self.listener, selectors.EVENT_READ, None)
                try:
                    ready = sel.select(timeout=0.25)
                except OSError as exc:  # never seen; a loop that died would leave a host that never answers
                    self._say("select", f"waiting for connections failed ({exc.strerror or exc})")
                    time.sleep(0.1)
                    continue
                for key, _mask in ready:
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 4096)
                    elif key.data is None:
                        if self._accept(sel):
                            backoff = 0.05
                        else:  # out of descriptors: stop accepting for a while, shed one
                            sel.unregister(self.listener)
                            paused_until = time.monotonic() + backoff
                            backoff = min(backoff * 2, 2.0)
                            self._shed_oldest(sel)
                    else:
                        self._read(sel, key.data)
                self._expire(sel, time.monotonic())
        finally:
            for conn in list(self._reading.values()):
                self._drop(sel, conn)
            sel.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop reading; requests queued but not started are dropped (their clients record by
        themselves); wait up to ``timeout`` s for the ones being handled."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        with self._lock:
            for lane in self._lanes.values():
                for conn, _data in lane.drain():
                    self._inflight -= 1  # never handled: not waited for below
                    self._release(conn)
            self._lanes.clear()
            self._turns.clear()
            self._lock.notify_all()
            self._lock.wait_for(lambda: self._inflight == 0, timeout=timeout)

    def close(self) -> None:
        """Release the wake-up pipe (after :meth:`run` returned)."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def inflight(self) -> int:
        """Requests read and not yet answered."""
        return self._inflight

    def open_connections(self) -> dict[str, int]:
        """Connections open now, per peer key (for the host's status)."""
        with self._lock:
            return dict(self._open)

    # -- the reading thread --------------------------------------------------------------------

    def _say(self, kind: str, line: str) -> None:
        if kind not in self._noted and self.note is not None:
            self._noted.add(kind)
            with contextlib.suppress(Exception):
                self.note(line)

    def _accept(self, sel: selectors.BaseSelector) -> bool:
        """Accept what is waiting (a bounded batch); False when descriptors or memory ran out."""
        for _ in range(64):
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as exc:
                if exc.errno in _SCARCE:
                    self._say(
                        "scarce",
                        f"the host ran short of descriptors or memory ({exc.strerror}); it backs off and sheds "
                        "the oldest connections instead of stopping",
                    )
                    return False
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                self._say("accept", f"accepting a connection failed ({exc.strerror or exc}); it backs off")
                return False
            self.received += 1
            peer = _peer(sock)
            key = self.peer_key(peer)
            with self._lock:
                if self._open.get(key, 0) >= self.limits.per_peer:
                    over_peer = True
                else:
                    over_peer = False
                    self._open[key] = self._open.get(key, 0) + 1
                    self._total += 1
                total = self._total
            if over_peer:
                self.shed += 1
                self._say(
                    "per-peer",
                    f"a client ({key}) held more than {self.limits.per_peer} connections; "
                    "its extra connections are closed at once",
                )
                sock.close()
                continue
            if total > self.limits.max_connections:
                self._say(
                    "overall",
                    f"more than {self.limits.max_connections} connections were open; the oldest "
                    "of the client holding most are closed",
                )
                self._shed_oldest(sel)
            sock.setblocking(False)
            conn = _Conn(sock, peer, key, time.monotonic() + self.limits.request_deadline)
            self._reading[sock.fileno()] = conn
            try:
                sel.register(sock, selectors.EVENT_READ, conn)
            except (OSError, ValueError):
                del self._reading[sock.fileno()]
                self._release(conn)
        return True

    def _read(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sel, conn)
            return
        if chunk:
            conn.size += len(chunk)
            if conn.size > self.limits.max_request:
                conn.too_large = True  # answered with a refusal, not read any further
            else:
                conn.chunks.append(chunk)
                return
        sel.unregister(conn.sock)
        del self._reading[conn.sock.fileno()]
        self._enqueue(conn, None if conn.too_large else b"".join(conn.chunks))

    def _expire(self, sel: selectors.BaseSelector, now: float) -> None:
        for conn in [c for c in self._reading.values() if c.deadline <= now]:
            self._say(
                "deadline",
                f"a client sent no whole request within {self.limits.request_deadline:g} s; its connection was closed",
            )
            self._drop(sel, conn)

    def _shed_oldest(self, sel: selectors.BaseSelector) -> None:
        """Close the oldest connection being read of the peer that holds the most."""
        if not self._reading:
            return
        with self._lock:
            counts = dict(self._open)
        conn = min(self._reading.values(), key=lambda c: (-counts.get(c.key, 0), c.deadline))
        self._drop(sel, conn)

    def _drop(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        self.shed += 1
        with contextlib.suppress(KeyError, ValueError, OSError):
            sel.unregister(conn.sock)
        self._reading.pop(conn.sock.fileno(), None)
        self._release(conn)

    def _release(self, conn: _Conn) -> None:
        """Close a connection and give its place back (any thread)."""
        with contextlib.suppress(OSError):
            conn.sock.close()
        self._give_back(conn)

    def _give_back(self, conn: _Conn) -> None:
        """Give a connection's place back (it is closed by whoever holds it)."""
        with self._lock:
            left = self._open.get(conn.key, 0) - 1
            if left > 0:
                self._open[conn.key] = left
            else:
                self._open.pop(conn.key, None)
            self._total -= 1

    # -- the workers ---------------------------------------------------------------------------

    def _lane_of(self, conn: _Conn, data: bytes | None) -> str:
        named = None
        if data is not None and self.lane is not None:
            with contextlib.suppress(Exception):  # a lane that cannot be told: the peer's own
                named = self.lane(data)
        return f"run {named}" if named else f"peer {conn.key}"

    def _enqueue(self, conn: _Conn, data: bytes | None) -> None:
        conn.lane = self._lane_of(conn, data)
        with self._lock:
            if self._stopping.is_set():
                pass
            else:
                lane = self._lanes.get(conn.lane)
                if lane is None:
                    lane = self._lanes[conn.lane] = _Lane()
                    self._turns.append(conn.lane)
                lane.put(conn, data)
                self._inflight += 1
                self._lock.notify()
                return
        self._release(conn)

    def _next(self) -> tuple[_Conn, bytes | None] | None:
        """The next request to handle, round-robin over lanes, then over a lane's peers (called with
        the lock held); None while every lane with requests is at its cap, or its peers at theirs."""
        for _ in range(len(self._turns)):
            name = self._turns.popleft()
            lane = self._lanes.get(name)
            if lane is None:
                continue
            if self._lane_busy.get(name, 0) >= self.limits.per_run_workers:
                self._turns.append(name)
                continue
            item = lane.take(lambda key: self._busy.get(key, 0) < self.limits.per_peer_workers)
            if item is None:
                self._turns.append(name)
                continue
            if lane.empty():
                del self._lanes[name]
            else:
                self._turns.append(name)
            key = item[0].key
            self._busy[key] = self._busy.get(key, 0) + 1
            self._lane_busy[name] = self._lane_busy.get(name, 0) + 1
            return item
        return None

    def _work(self) -> None:
        while True:
            with self._lock:
                item = self._next()
                while item is None:
                    if self._stopping.is_set():
                        return
                    self._lock.wait(0.5)
                    item = self._next()
            conn, data = item
            try:
                reply = self.handle(data, conn.peer)
            except Exception:  # noqa: BLE001 - a handler that failed: never the worker
                reply = None
            # Its place is given back before the answer is sent: a client that reads the answer and
            # at once connects again must find room (a sending connection is held by a worker, and
            # a peer has at most ``per_peer_workers`` of those).
            self._give_back(conn)
            try:
                if reply is not None:
                    conn.sock.setblocking(True)
                    conn.sock.settimeout(self.limits.reply_deadline)
                    conn.sock.sendall(reply)
            except Exception:  # noqa: BLE001 - a client gone: never the worker
                pass
            finally:
                with contextlib.suppress(OSError):
                    conn.sock.close()
                with self._lock:
                    for counts, key in ((self._busy, conn.key), (self._lane_busy, conn.lane)):
                        counts[key] -= 1
                        if not counts[key]:
                            del counts[key]
                    self._inflight -= 1
                    self.handled += 1
                    self._lock.notify_all()


class _Lane:
    """One lane's queued requests: a queue per peer, taken round-robin (called with the intake's lock held)."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[tuple[_Conn, bytes | None]]] = {}
        self.turns: deque[str] = deque()  # peer keys with queued requests

    def put(self, conn: _Conn, data: bytes | None) -> None:
        queue = self.queues.get(conn.key)
        if queue is None:
            queue = self.queues[conn.key] = deque()
            self.turns.append(conn.key)
        queue.append((conn, data))

    def take(self, free: Callable[[str], bool]) -> tuple[_Conn, bytes | None] | None:
        """The first request of the next peer that is ``free`` (below its cap), or None."""
        for _ in range(len(self.turns)):
            key = self.turns.popleft()
            if not free(key):
                self.turns.append(key)
                continue
            queue = self.queues[key]
            item = queue.popleft()
            if queue:
                self.turns.append(key)
            else:
                del self.queues[key]
            return item
        return None

    def empty(self) -> bool:
        return not self.turns

    def drain(self) -> list[tuple[_Conn, bytes | None]]:
        out = [item for queue in self.queues.values() for item in queue]
        self.queues.clear()
        self.turns.clear()
        return out


def _peer(conn: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end (``SO_PEERCRED``), or None."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid
