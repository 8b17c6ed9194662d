"""Hosting a run for short-lived processes: the hook socket and the session watcher, in one process.

A hook process (``sandbox hook claude-code``) is cheap only when some long-lived process records its
event: then it imports click and the standard library, hands the event over a Unix socket and
exits. Two processes host a run that way, both through :class:`RunHost`, so they answer alike:

* ``sandbox run`` (:mod:`sandbox.agent.launch`), for the session of the agent it launched;
* ``sandbox serve`` (:func:`serve_run`), a background process of its own, for an agent the user
  started themselves: the first hook that finds no host spawns it (see
  :func:`sandbox.agent.recorder.handle`), and it exits after a spell without requests, when the run is
  dropped or its worktree disappears, and on SIGTERM.

A host holds:

* the hook socket ``<run dir>/hook.sock`` (:class:`HookService`): each connection carries one
  generic-protocol event (:mod:`sandbox.agent.hookproto`), recorded one at a time;
* the session service (:mod:`sandbox.agent.session`): a watcher on the worktree, so that a command's
  changes (a Bash call) are the paths seen between its start and its finish, and ``sandbox exec``
  costs O(changed paths) too.

Only one process hosts a run: it holds the flock of ``<run dir>/serve.lock`` for its whole life.
``sandbox serve`` also writes its pid to ``serve.pid`` (so ``sandbox drop`` can stop it: see
:func:`stop_service`); ``sandbox run`` stops a ``sandbox serve`` of the same run and takes over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.agent import hookproto, recorder
from sandbox.errors import CorruptionError

if TYPE_CHECKING:
    from sandbox.agent.session import Service
    from sandbox.agent.watcher import Watcher
    from sandbox.run.run import Run

LOCK_FILE = "serve.lock"
PID_FILE = "serve.pid"
LOG_FILE = "serve.log"
#: Touched when a hook spawns a service: no second spawn while one may still be starting.
SPAWN_STAMP = "serve.spawned"
SPAWN_BACKOFF = 10.0
#: Default seconds without a request after which ``sandbox serve`` exits.
IDLE_EXIT = 900.0


# -- who hosts the run -------------------------------------------------------------------------


class HostLock:
    """The flock on ``serve.lock``: held by the one process hosting a run."""

    def __init__(self, fd: int, run_dir: str) -> None:
        self.fd = fd
        self.run_dir = run_dir

    def release(self) -> None:
        """Let go of the lock (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def try_claim(run_dir: str) -> HostLock | None:
    """Take the run's host lock without waiting; None when another process holds it."""
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return HostLock(fd, run_dir)


def host_alive(run_dir: str) -> bool:
    """True while some process (``sandbox run`` or ``sandbox serve``) hosts the run."""
    try:
        lock = try_claim(run_dir)
    except OSError:
        return False  # no run dir: nobody hosts it
    if lock is None:
        return True
    lock.release()
    return False


def service_pid(run_dir: str) -> int | None:
    """The pid of the ``sandbox serve`` hosting the run, or None (none, or ``sandbox run`` hosts it)."""
    try:
        with open(os.path.join(run_dir, PID_FILE), "rb") as fh:
            pid = int(fh.read(32).strip() or b"0")
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and host_alive(run_dir) else None


def write_pid(run_dir: str) -> None:
    """Publish this process as the run's ``sandbox serve`` (call while holding the host lock)."""
    from sandbox.store.fsutil import atomic_write

    atomic_write(os.path.join(run_dir, PID_FILE), f"{os.getpid()}\n".encode(), 0o600)


def remove_pid(run_dir: str) -> None:
    """Remove ``serve.pid`` if it names this process."""
    path = os.path.join(run_dir, PID_FILE)
    try:
        with open(path, "rb") as fh:
            mine = fh.read(32).strip() == str(os.getpid()).encode()
    except OSError:
        return
    if mine:
        with contextlib.suppress(OSError):
            os.unlink(path)


def stop_service(run_dir: str, timeout: float = 10.0) -> bool:
    """Stop the ``sandbox serve`` hosting the run (SIGTERM), waiting up to ``timeout`` for it to go.

    Returns True when one was running. A ``sandbox run`` hosting the run is left alone.
    """
    pid = service_pid(run_dir)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while host_alive(run_dir) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def take_over(run_dir: str, timeout: float = 10.0) -> HostLock | None:
    """Stop a ``sandbox serve`` of the run and take the host lock; None when another host keeps it."""
    stop_service(run_dir, timeout)
    return try_claim(run_dir)


def claim_autostart(run_dir: str, backoff: float = SPAWN_BACKOFF) -> bool:
    """True when a hook should spawn ``sandbox serve`` now: no host, and no spawn in ``backoff`` s.

    Marks the spawn, so that hooks arriving while the service starts do not spawn more.
    """
    if host_alive(run_dir):
        return False
    stamp = os.path.join(run_dir, SPAWN_STAMP)
    try:
        if time.time() - os.stat(stamp).st_mtime < backoff:
            return False
    except FileNotFoundError:
        pass
    try:
        with open(stamp, "wb"):
            pass
        os.utime(stamp)
    except OSError:
        return False
    return True


# -- the hook socket ---------------------------------------------------------------------------


class _ServiceCalls:
    """Gives :class:`~sandbox.agent.recorder.Recorder` begin/end over an in-process session service."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def begin(self, call_id: str) -> None:
        self.service.begin(call_id)

    def end(self, call_id: str) -> set[str] | None:
        return self.service.end(call_id)[0]


class HookService:
    """Accepts hook events on the run's socket and records them, one at a time.

    ``on_event(line)`` is told of every handled request (``sandbox serve`` logs it).
    """

    def __init__(
        self, run: Run, service: Service | None, lock: threading.Lock, on_event: Callable[[str], None] | None = None
    ) -> None:
        self.run = run
        self.recorder = recorder.Recorder(run, _ServiceCalls(service) if service is not None else None)
        self.lock = lock
        self.on_event = on_event
        self.path = hookproto.socket_path(run.dir)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._busy = threading.Condition()
        self._inflight = 0
        #: Requests received and requests recorded so far.
        self.received = 0
        self.handled = 0

    def bind(self) -> bool:
        """Listen on the run's socket; False when another live process already hosts the run."""
        if os.path.exists(self.path):
            try:
                probe = hookproto.connect(self.path, 1.0)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)  # stale: left by a host that was killed
            else:
                probe.close()
                return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if len(os.fsencode(self.path)) < 100:
            sock.bind(self.path)
        else:
            # sun_path is ~100 bytes; bind by a relative name. Called before any thread starts.
            here = os.getcwd()
            os.chdir(self.run.dir)
            try:
                sock.bind(hookproto.SOCKET_NAME)
            finally:
                os.chdir(here)
        os.chmod(self.path, 0o600)
        sock.listen(64)
        self._sock = sock
        return True

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._serve, name="sandbox-hooks", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, remove the socket, and wait (up to ``timeout``) for requests in flight."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._busy:
            self._busy.wait_for(lambda: self._inflight == 0, timeout=timeout)

    def _serve(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._busy:
                self._inflight += 1
                self.received += 1
            threading.Thread(target=self._handle, args=(conn,), name="sandbox-hook", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(30)
                data = _recv_all(conn, 2 * hookproto.MAX_PAYLOAD)
                reply = self.handle_bytes(data)
                conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass  # the hook process went away; it records in-process or reports
        finally:
            with self._busy:
                self._inflight -= 1
                self._busy.notify_all()

    def handle_bytes(self, data: bytes) -> dict[str, Any]:
        """Decode one request and record it; the reply object."""
        try:
            event = hookproto.HookEvent.from_dict(json.loads(data))
        except ValueError:
            return {"ok": False, "message": "The hook request is not valid JSON; nothing recorded."}
        except hookproto.HookInputError as exc:
            return {"ok": False, "message": exc.message}
        with self.lock:
            try:
                outcome = self.recorder.record(event)
            except Exception as exc:  # the service must outlive one bad request; the hook reports it
                outcome = hookproto.Outcome(False, f"recording failed: {type(exc).__name__}: {exc}")
            self.handled += 1
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a log that cannot be written must not fail the hook
                status = "ok" if outcome.ok else "refused"
                call = event.call_id or "-"
                self.on_event(f"{event.phase} {event.tool} {call} via socket: {status}: {outcome.message}")
        return outcome.to_reply()


def _recv_all(conn: socket.socket, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise OSError("request too large")
        chunks.append(chunk)


# -- one host, used by `sandbox run` and `sandbox serve` ---------------------------------------


class RunHost:
    """The hook socket and the session watcher of one run, hosted in this process.

    ``lock`` serialises everything that records into the run from this process (hook requests,
    ``sandbox run``'s cutter).
    """

    def __init__(self, run: Run, on_event: Callable[[str], None] | None = None) -> None:
        self.run = run
        self.lock = threading.Lock()
        self.hooks = HookService(run, None, self.lock, on_event)
        self.session: Service | None = None
        self.hosted_hooks = False
        #: Why the host works in a degraded way (one line each), for the caller to show.
        self.notes: list[str] = []

    @property
    def watcher(self) -> Watcher | None:
        """The session watcher on the worktree, when this process runs one."""
        return self.session.watcher if self.session is not None else None

    def start(self) -> None:
        """Bind the hook socket, start the session watcher, then accept hook events.

        Hooks that connect while the watcher starts wait in the socket's backlog, so their
        commands get a watcher window.
        """
        from sandbox.agent import session

        self.hosted_hooks = self.hooks.bind()  # first: it may change directory, before any thread runs
        if not self.hosted_hooks:
            self.notes.append("another process already hosts this run's hooks; they are recorded there.")
        try:
            self.session = session.serve(self.run, ignore=self.run.is_private)
        except session.SessionBusyError as exc:
            self.notes.append(f"{exc.message} Its watcher is not shared with this process.")
        watcher = self.watcher
        if watcher is not None and not watcher.vouching:
            self.notes.append(f"the watcher cannot vouch ({watcher.lost_reason}); changes are found by scanning.")
        if self.session is not None:
            self.hooks.recorder.watcher = _ServiceCalls(self.session)
        if self.hosted_hooks:
            self.hooks.start()

    def stop_hooks(self) -> None:
        """Stop accepting hook events (waits for those in flight)."""
        self.hooks.stop()

    def stop(self) -> None:
        """Stop everything (idempotent)."""
        self.hooks.stop()
        if self.session is not None:
            self.session.stop()

    def activity(self) -> tuple[int, ...]:
        """Changes whenever a hook or a session client (``sandbox exec``) makes a request."""
        counts = self.session.counts if self.session is not None else {}
        return (self.hooks.received, self.hooks.handled, *counts.values())

    def gone(self) -> str | None:
        """Why there is nothing left to host (the run was dropped, its worktree is gone), or None."""
        if not os.path.isdir(self.run.dir):
            return "the run was dropped"
        if not os.path.isdir(self.run.worktree):
            return "the run's worktree is gone"
        with self.lock:  # the recorder's threads use the same repository object
            try:
                if not self.run.exists():
                    return "the run was dropped"
            except CorruptionError as exc:  # deleted or rewritten ref (sandbox.store.integrity): serve nothing
                return exc.message
        return None


def serve_run(
    run: Run,
    stop: threading.Event,
    *,
    idle_exit: float = IDLE_EXIT,
    on_event: Callable[[str], None] | None = None,
    on_ready: Callable[[RunHost], None] | None = None,
    tick: float = 1.0,
) -> str:
    """Host ``run`` (the caller holds its host lock) until ``stop`` is set, it idles or is dropped.

    Returns why it stopped. ``on_ready`` is called once the host accepts events.
    """
    host = RunHost(run, on_event)
    try:
        host.start()
        if not host.hosted_hooks:
            return "another process hosts this run's hooks"
        if on_ready is not None:
            on_ready(host)
        seen, last = host.activity(), time.monotonic()
        while not stop.wait(min(tick, idle_exit / 4)):
            reason = host.gone()
            if reason is not None:
                return reason
            now = host.activity()
            if now != seen:
                seen, last = now, time.monotonic()
            elif time.monotonic() - last >= idle_exit:
                return f"no request for {idle_exit:g} s"
        return "asked to stop"
    finally:
        host.stop()
