"""A watcher service for one run, so that every recorded call costs O(changed paths).

One long-lived process (normally ``sandbox run``) hosts a :class:`~sandbox.agent.watcher.Watcher` on the
run's worktree and answers short-lived processes (``sandbox exec``, ``sandbox hook claude-code`` for
Bash calls) over a Unix socket: which paths changed during this call?

Hosting it, in a thread of the current process::

    with session.serve(run) as service:     # watcher started, socket bound, session.json written
        ...                                 # launch the agent
        service.begin(call_id)              # the same API in-process
        service.end(call_id)
        service.watcher.take()              # everything since the last take (cut unhooked changes
        service.watcher.last_event          #   at quiet points, by monotonic time of the last change)

or as a process of its own: ``service = session.serve(run); service.serve_forever()`` (returns after
:meth:`Service.request_stop`, e.g. from a SIGTERM handler, having stopped the service).

Asking it, from any process::

    client = session.client_for(run)        # None when no live service: scan instead
    if client is not None:
        client.begin(call_id)               # before the tool runs (a PreToolUse hook)
    ...                                     # the tool runs, maybe in another process
    paths = client.end(call_id) if client else None   # may be another process (PostToolUse)
    run.finish_call(call_id, status, paths=paths)      # None: the finish scans

``end`` answers the set of paths changed since that call's ``begin`` (a superset when calls overlap,
confirmed by hash at capture), or None when the service cannot vouch: no ``begin`` seen for that
call, the watcher lost events meanwhile (it is then restarted, with back-off, for later calls), or
the service is gone, hung or slow. The client never raises and never waits long: a dead service
refuses the connection at once; a hung one costs at most the client's timeout.

Finding the service: ``<run dir>/session.json`` (:class:`~sandbox.models.SessionInfo`) names the
service's pid and socket. The socket is in Linux's abstract namespace (no file to go stale, no
108-byte path limit), named from a hash of the run dir. The service answers only peers of its own
uid (``SO_PEERCRED``).

Protocol: one JSON line per connection each way. Requests ``{"op": "begin"|"end"|"ping", "call":
ID}``; answers ``{"ok": true, "marker": ...}``, ``{"ok": true, "paths": [...] | null, "reason":
...}``, ``{"ok": true, "service_id": ..., "pid": ..., "vouching": ...}`` or ``{"ok": false, "error":
...}``. Paths are JSON strings (non-UTF-8 names as lone surrogates, escaped).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sandbox.errors import SandboxError

if TYPE_CHECKING:
    import socketserver

    from sandbox.agent.watcher import Watcher
    from sandbox.run.run import Run

SESSION_FILE = "session.json"

#: Seconds a client waits to connect and for ``begin``/``ping`` answers.
CLIENT_TIMEOUT = 2.0
#: Seconds a client waits for an ``end`` answer (the service syncs first; see SYNC_TIMEOUT).
END_TIMEOUT = 12.0
#: Seconds the service waits for its watcher to catch up before answering ``end`` with None.
SYNC_TIMEOUT = 10.0

_MAX_REQUEST = 64 * 1024


class SessionBusyError(SandboxError):
    """Another live service already watches this run."""


def socket_name(run_dir: str) -> str:
    """The abstract socket name (``@``-prefixed for display) of a run dir's service."""
    digest = hashlib.sha256(os.path.realpath(run_dir).encode(errors="surrogateescape")).hexdigest()
    return "@sandbox-session-" + digest[:32]


def _address(name: str) -> str:
    return "\0" + name[1:] if name.startswith("@") else name


def _run_dir(run: Run | str) -> str:
    # Only the run dir: ``run.worktree`` folds the ledger, which costs more than this whole module.
    return run if isinstance(run, str) else run.dir


# -- client -------------------------------------------------------------------------------------


class Client:
    """Talks to a run's service; every method answers None instead of raising."""

    def __init__(self, name: str, *, timeout: float = CLIENT_TIMEOUT, end_timeout: float = END_TIMEOUT) -> None:
        self.name = name
        self.timeout = timeout
        self.end_timeout = end_timeout

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                self._connect(sock)
                sock.settimeout(timeout)
                sock.sendall(json.dumps(message).encode() + b"\n")
                sock.shutdown(socket.SHUT_WR)
                chunks = []
                while True:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
            answer = json.loads(b"".join(chunks))
        except (OSError, ValueError):
            return None
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            return None
        return answer

    def _connect(self, sock: socket.socket) -> None:
        # A Unix socket whose backlog is full refuses with EAGAIN instead of waiting: retry a little.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock.connect(_address(self.name))
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def ping(self) -> dict[str, Any] | None:
        """The service's id, pid and whether its watcher vouches; None when it does not answer."""
        return self._request({"op": "ping"}, self.timeout)

    def begin(self, call_id: str) -> str | None:
        """Tell the service a call starts (before its tool runs); its marker, or None."""
        answer = self._request({"op": "begin", "call": call_id}, self.timeout)
        marker = answer.get("marker") if answer else None
        return marker if isinstance(marker, str) else None

    def end(self, call_id: str) -> set[str] | None:
        """The paths changed since ``begin(call_id)``, or None when nobody can vouch for them."""
        answer = self._request({"op": "end", "call": call_id}, self.end_timeout)
        paths = answer.get("paths") if answer else None
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            return None
        return set(paths)


def read_info(run: Run | str) -> Any:
    """The run's ``session.json`` as a SessionInfo, or None when absent or unreadable."""
    run_dir = _run_dir(run)
    try:
        with open(os.path.join(run_dir, SESSION_FILE), "rb") as fh:
            data = fh.read(_MAX_REQUEST)
    except OSError:
        return None
    from pydantic import ValidationError

    from sandbox.models import FORMAT_VERSION, SessionInfo

    try:
        info = SessionInfo.model_validate_json(data)
    except ValidationError:
        return None
    return info if info.version == FORMAT_VERSION else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def client_for(run: Run | str, *, timeout: float = CLIENT_TIMEOUT, end_timeout: float = END_TIMEOUT) -> Client | None:
    """A client for the run's live service (``run`` or its run dir), or None when there is none.

    Cheap: reads ``session.json`` and checks the pid; does not connect. A service that died after
    this check makes the client's calls answer None.
    """
    info = read_info(run)
    if info is None or not _pid_alive(info.pid):
        return None
    return Client(info.socket, timeout=timeout, end_timeout=end_timeout)


# -- service ------------------------------------------------------------------------------------


class Service:
    """The watcher service of one run; see the module docstring. Start with :func:`serve`."""

    def __init__(
        self,
        run_dir: str,
        worktree: str,
        *,
        ignore: Callable[[str], bool] | None = None,
        sync_timeout: float = SYNC_TIMEOUT,
        max_calls: int = 1024,
    ) -> None:
        from sandbox.agent.watcher import Watcher

        self.run_dir = run_dir
        self.worktree = worktree
        self.name = socket_name(run_dir)
        self.service_id = secrets.token_hex(8)
        self.sync_timeout = sync_timeout
        self.max_calls = max_calls
        #: The watcher on the worktree (restarted in place after it lost events).
        self.watcher: Watcher = Watcher(worktree, ignore)
        self.restarts = 0
        #: How many calls began, ended with paths, and ended without (cannot vouch).
        self.counts = {"begin": 0, "vouched": 0, "not_vouched": 0}
        self._calls: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._server: socketserver.BaseServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._started = False

    # -- in-process API ------------------------------------------------------------------------

    def begin(self, call_id: str) -> str:
        """A call starts: collect its changes from now on. Returns a marker (for logs)."""
        token = self.watcher.open_window()
        with self._lock:
            old = self._calls.pop(call_id, None)
            self._calls[call_id] = token
            self.counts["begin"] += 1
            evicted = []
            while len(self._calls) > self.max_calls:  # calls whose end never came
                evicted.append(self._calls.popitem(last=False)[1])
        for stale in ([old] if old is not None else []) + evicted:
            self.watcher.discard_window(stale)
        return f"{self.service_id}:{token}"

    def end(self, call_id: str) -> tuple[set[str] | None, str | None]:
        """A call ended: (the paths changed since its begin, None) or (None, why not)."""
        with self._lock:
            token = self._calls.pop(call_id, None)
            if token is None:
                self.counts["not_vouched"] += 1
        if token is None:
            return None, f"no begin was seen for call {call_id}"
        paths = self.watcher.close_window(token, timeout=self.sync_timeout)
        with self._lock:
            self.counts["vouched" if paths is not None else "not_vouched"] += 1
        if paths is None:
            return None, self.watcher.lost_reason or "the watcher did not catch up in time"
        return paths, None

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Watch the worktree, bind the socket and publish ``session.json``.

        :class:`SessionBusyError` when another live service answers for this run.
        """
        if self._started:
            return
        existing = read_info(self.run_dir)
        if existing is not None and _pid_alive(existing.pid) and Client(existing.socket).ping() is not None:
            raise SessionBusyError(f"A session watcher (pid {existing.pid}) already serves this run; stop it first.")
        server = _make_server(self)
        try:
            self.watcher.start()
            self._publish()
        except BaseException:
            server.server_close()
            self.watcher.stop()
            raise
        self._server = server
        self._started = True
        self._stopped.clear()
        for target, name in ((server.serve_forever, "sandbox-session"), (self._supervise, "sandbox-supervisor")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _publish(self) -> None:
        from sandbox.models import SessionInfo
        from sandbox.store.fsutil import write_json_file

        info = SessionInfo(service_id=self.service_id, pid=os.getpid(), socket=self.name, worktree=self.worktree)
        write_json_file(os.path.join(self.run_dir, SESSION_FILE), info.model_dump_json())

    def stop(self) -> None:
        """Stop answering, stop the watcher and remove ``session.json`` if it is still ours.

        Idempotent; a second caller waits until the first one is done.
        """
        with self._stop_lock:
            if not self._started:
                return
            self._started = False
            self._stopped.set()
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
            for thread in self._threads:  # the supervisor first: it must not restart a stopped watcher
                thread.join(timeout=30)
            self._threads.clear()
            self.watcher.stop()
            info = read_info(self.run_dir)
            if info is not None and info.service_id == self.service_id:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.run_dir, SESSION_FILE))

    def request_stop(self) -> None:
        """Ask :meth:`serve_forever` to stop and return (safe in a signal handler)."""
        self._stopped.set()

    def serve_forever(self) -> None:
        """Serve until :meth:`request_stop` (e.g. from a SIGTERM handler), then stop."""
        self.start()
        while not self._stopped.wait(1.0):
            pass
        self.stop()

    def __enter__(self) -> Service:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _supervise(self) -> None:
        """Restart the watcher after it lost events, backing off when it keeps losing them."""
        delay = 1.0
        last_restart = 0.0
        while not self._stopped.wait(0.25):
            if self.watcher.vouching:
                continue
            now = time.monotonic()
            if now - last_restart < delay:
                continue
            delay = min(delay * 2, 60.0) if now - last_restart < 60.0 else 1.0
            last_restart = now
            if self._stopped.is_set():
                return
            self.watcher.restart()
            self.restarts += 1

    # -- requests ------------------------------------------------------------------------------

    def handle(self, request: Any) -> dict[str, Any]:
        """Answer one decoded request."""
        if not isinstance(request, dict):
            return {"ok": False, "error": "a request is a JSON object"}
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "service_id": self.service_id, "pid": os.getpid(), "vouching": self.watcher.vouching}
        call_id = request.get("call")
        if not isinstance(call_id, str) or not call_id or len(call_id) > 512:
            return {"ok": False, "error": "a call id is a non-empty string"}
        if op == "begin":
            return {"ok": True, "marker": self.begin(call_id), "vouching": self.watcher.vouching}
        if op == "end":
            paths, reason = self.end(call_id)
            return {"ok": True, "paths": sorted(paths) if paths is not None else None, "reason": reason}
        return {"ok": False, "error": f"unknown op {op!r}"}


def _make_server(service: Service) -> socketserver.BaseServer:
    import socketserver

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline(_MAX_REQUEST)
            try:
                answer = service.handle(json.loads(line))
            except ValueError:
                answer = {"ok": False, "error": "malformed request"}
            with contextlib.suppress(OSError):
                self.wfile.write(json.dumps(answer).encode() + b"\n")

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True
        request_queue_size = 128  # many hooks at once: a full backlog fails a Unix connect at once

        def verify_request(self, request: Any, client_address: Any) -> bool:
            try:
                creds = request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            except OSError:
                return False
            _pid, uid, _gid = struct.unpack("3i", creds)
            return bool(uid == os.getuid())

    try:
        return Server(_address(service.name), Handler)
    except OSError as exc:
        raise SessionBusyError(
            f"Cannot open the session socket for this run ({exc.strerror or exc}); another service may be running."
        ) from exc


def serve(run: Run, *, ignore: Callable[[str], bool] | None = None) -> Service:
    """Start a watcher service for ``run`` (use as a context manager to stop it)."""
    service = Service(run.dir, run.worktree, ignore=ignore)
    service.start()
    return service
