"""The host's wire protocol and its one client: standard library only (the hook fast path uses it).

One process hosts every run of a repository (:mod:`sandbox.agent.host`). It listens on one Unix
socket named by a path, ``<common>/sandbox/sock/host.sock``, in a directory only the user can
open (mode 0700; never an abstract socket, which a confined agent with the network on could reach).
That directory is all a confined process sees of the host's files (read-only; the rest are in
``<common>/sandbox/host/``, hidden): not the lock, which it
could hold (``flock`` works on a read-only descriptor) so that no host starts again, nor the
liveness record or the log. A client connects only to a socket of the user's in a directory only
the user may open, through the descriptor it checked (:func:`connect` with ``checked``).
Each connection carries one request, a JSON object on one line, and gets one reply, a JSON object::

    {"v": 1, "op": "hook",  "run": RUN, "token": T, "event": {...generic hook event...}}
        -> {"ok": bool, "message": str, "strict": bool, "decision": "allow"|"deny"|null,
            "reason": str, "call": CALL|null, "status": STATUS|null, "files": N|null, "note": str|null,
            "foreign": bool|null, "settings": [str]|null}
            (foreign: a start's run holds events from another clone; settings: where its recorded tree
            holds agent settings, worktree-relative)
    {"v": 1, "op": "begin", "run": RUN, "token": T, "call": CALL}    -> {"ok": true, "watched": bool}
    {"v": 1, "op": "end",   "run": RUN, "token": T, "call": CALL}
        -> {"ok": true, "paths": [...]|null, "reason": str|null}
    {"v": 1, "op": "quiet", "run": RUN, "token": T}                  -> {"ok": true, "last_change": SECONDS_AGO|null}
    {"v": 1, "op": "ping"}                                           -> {"ok": true, "pid": PID, "runs": N}
    {"v": 1, "op": "status"}   (control)
        -> {"ok": true, "pid": PID, "runs": {RUN: {...}}, "inotify": {...}, "notes": [...],
            "connections": {PEER: N}}
    {"v": 1, "op": "forget", "run": RUN}  (control)                  -> {"ok": true}
    {"v": 1, "op": "stop"}     (control)                             -> {"ok": true}
    any refusal                                                      -> {"ok": false, "error": str}

The ``hook`` operation carries one generic hook event (:class:`sandbox.agent.hookproto.HookEvent`).
Its senders: the agents' hooks, and ``sandbox mcp`` running inside the sandbox of ``sandbox run``
(Codex's tools), whose run directory is read-only there: each changing tool call is a ``start``
(with the tool's ``kind``, ``idempotency``, ``replay``, ``summary`` and the client's ``_meta`` ids
as ``call_id`` and ``agent_session``) before the tool acts, and a ``finish`` after it
(:mod:`sandbox.mcp.hosted`). One operation for both: the host records them with the same recorder,
so a denial, a repeated start, the watcher's window and the session binding are the same.

Who may ask what:

* an operation on a run carries the run's token, ``<run dir>/host.token`` (0600, created by
  whoever needs it first). A confined agent sees only its own run's directory (the others are
  hidden, :mod:`sandbox.confine.spawn`), so it can record into its own run and no other;
* control operations (``status``, ``forget``, ``stop``) are refused to a peer in another PID
  namespace (every confined process is in one of its own) or of another user (``SO_PEERCRED``).

Bounds (:mod:`sandbox.agent.intake`): a request of at most :data:`MAX_REQUEST` bytes must arrive
whole within 10 s of the connect; a peer (a sandbox, or a process outside one) holds at most 32
connections at once, all peers together 256; requests are answered round-robin between peers. A
client has one deadline for its whole request, and does not send one larger than the host reads.

The structured reply is all a caller reads: no human text is parsed. Paths are JSON strings
(non-UTF-8 names as lone surrogates, escaped).
"""

from __future__ import annotations

import _socket  # socket.py's own base: ``socket`` adds enums and selectors, ~2 ms of a hook's start
import errno
import fcntl
import os
import stat
import time

from sandbox.fast import fastjson
from sandbox.store import layout

PROTOCOL = 1
SOCKET = "host.sock"
#: The socket's own directory, beside the host's (``<common>/sandbox/sock``): the one part of the host's
#: files a confined process sees. As long a path as the socket had in the host's directory: ``sun_path``
#: holds ~108 bytes, and a client without the long-path workaround (a test's script) still reaches it.
SOCKET_DIR = layout.HOST_SOCKET_DIR
LOCK = layout.HOST_LOCK
INFO = "host.json"
LOG = "host.log"
#: Touched when a host is spawned: no second spawn while one may still be starting. In the socket's
#: directory, so that a confined hook sees a host starting (and waits for it) too.
SPAWNED = "host.spawned"
SPAWN_BACKOFF = 10.0
#: Seconds after a spawn during which a client waits for the host rather than working without it.
STARTING = 5.0
#: In a run's directory: the secret an operation on the run carries.
TOKEN = "host.token"
#: The longest request a host reads. What makes a hook request big is the tool's input, which the
#: model wrote (Claude Code's Write carries the whole file: at most the model's output, 32k-128k
#: tokens: 512 KiB of ASCII is a 0.54 MB request, 128k tokens of CJK text JSON-escaped 1.06 MB,
#: measured in ``tests/reliability/test_host_flood.py``); the tool's response is cut to
#: :data:`sandbox.agent.hookproto.MAX_RESULT` by the client before sending (it is kept no bigger).
#: A larger request is not sent: the hook records in its own process, as when no host lives.
MAX_REQUEST = 4 * 1024 * 1024
#: Seconds a client waits to connect.
CONNECT_TIMEOUT = 2.0
#: Operations only a peer in the host's PID namespace, of the same user, may ask for.
CONTROL_OPS = ("status", "forget", "stop")


def run_named(data: bytes) -> str | None:
    """The run a request names, read from its first bytes without decoding it (the host's workers
    are shared fairly between runs by it, :mod:`sandbox.agent.intake`); None when none is seen there.
    Only a lane: what the request may do is decided once it is decoded and its token checked."""
    head = data[:256]
    for key in (b'"run": "', b'"run":"'):
        at = head.find(key)
        if at >= 0:
            start = at + len(key)
            end = head.find(b'"', start)
            name = head[start:end].decode("ascii", "replace") if end > start else ""
            return name if layout.valid_run_id(name) else None
    return None


def host_dir(common_dir: str) -> str:
    """The repository's host directory (see :func:`sandbox.store.layout.host_dir`)."""
    return layout.host_dir(common_dir)


def socket_dir(common_dir: str) -> str:
    """The directory of the host's socket (see :func:`socket_path`)."""
    return layout.host_socket_dir(common_dir)


def socket_path(common_dir: str) -> str:
    """The host's socket for a repository, in a directory of its own: a confined process is shown that
    directory only (read-only), never the host's lock, liveness record or log."""
    return os.path.join(socket_dir(common_dir), SOCKET)


def ensure_host_dir(common_dir: str) -> str:
    """Create the host directory and its socket directory, mode 0700 (see
    :func:`sandbox.store.layout.ensure_host_dir`); the host directory's path."""
    return layout.ensure_host_dir(common_dir)


#: Linux's ``O_PATH`` (a descriptor that only names); elsewhere a directory is opened to read.
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)


class UntrustedHostError(OSError):
    """The host's socket or file is not one only this user could have made (see :func:`_checked_dir`)."""


def _checked_dir(path: str) -> int:
    """An ``O_PATH`` descriptor of directory ``path`` once it is shown to be the user's own: a real
    directory (no symlink at its last component), owned by this user, open to nobody else.

    A client connects (or reads) through this descriptor, so what it checked is what it uses. Anyone
    who could write there could have put a socket of their own in it that answers every hook "ok".
    """
    fd = os.open(path, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise UntrustedHostError(errno.EPERM, f"{path} is not a directory only you may open")
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- addressing a socket whose path is too long for sun_path -------------------------------------


class _Address:
    """A socket path usable in ``connect``/``bind``: itself, or ``/proc/self/fd/N/NAME`` when too long.

    ``sun_path`` holds ~108 bytes and a repository can be deep; a directory descriptor names the
    directory without changing the process's working directory (which threads share). ``checked``:
    always through a descriptor of the directory, checked first (:func:`_checked_dir`), and the
    socket there must be a socket of this user's.
    """

    def __init__(self, path: str, checked: bool = False) -> None:
        self.path = path
        self.checked = checked
        self._fd = -1

    def __enter__(self) -> str:
        name = os.path.basename(self.path)
        if self.checked:
            self._fd = _checked_dir(os.path.dirname(self.path))
            # Without /proc (macOS) the path is used after the check, as it was checked.
            address = f"/proc/self/fd/{self._fd}/{name}" if hasattr(os, "O_PATH") else self.path
            try:
                st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
            except BaseException:  # no socket there (no host runs): ``with`` calls no __exit__ for us
                self.__exit__()
                raise
            if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
                self.__exit__()
                raise UntrustedHostError(errno.EPERM, f"{self.path} is not a socket of yours")
            return address
        if len(os.fsencode(self.path)) < 100:
            return self.path
        self._fd = os.open(os.path.dirname(self.path), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._fd}/{name}"

    def __exit__(self, *_: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def connect(path: str, timeout: float = CONNECT_TIMEOUT, *, checked: bool = False) -> _socket.socket:
    """A connected socket to ``path`` (OSError when nobody listens); ``checked``: only to a socket of
    this user's in a directory only it may open (:class:`UntrustedHostError` otherwise)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        with _Address(path, checked) as address:
            while True:
                try:
                    sock.connect(address)
                    return sock
                except BlockingIOError:  # a full backlog refuses with EAGAIN instead of waiting
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.005)
    except OSError:
        sock.close()
        raise


def bind(sock: _socket.socket, path: str) -> None:
    """Bind ``sock`` to ``path`` (long paths too)."""
    with _Address(path) as address:
        sock.bind(address)


# -- run tokens ----------------------------------------------------------------------------------


def run_token(run_dir: str, create: bool = True) -> str | None:
    """The run's token (created atomically when missing and ``create``); None when unreadable."""
    path = os.path.join(run_dir, TOKEN)
    for _ in range(2):
        try:
            with open(path, "rb") as fh:
                value = fh.read(256).decode("ascii", "replace").strip()
            if value:
                return value
        except FileNotFoundError:
            pass
        except OSError:
            return None
        if not create:
            return None
        tmp = f"{path}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, os.urandom(24).hex().encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # atomic, and never replaces a token someone already read
            except FileExistsError:
                pass
        except OSError:
            return None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return None


# -- liveness --------------------------------------------------------------------------------------


def try_lock(common_dir: str) -> int | None:
    """Take the host lock without waiting: a descriptor, or None when a live host holds it."""
    path = os.path.join(ensure_host_dir(common_dir), LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def host_alive(common_dir: str) -> bool:
    """True while a host process of the repository lives (it holds the host lock).

    A confined process does not see the lock (it could hold it, and no host would start again): for
    it, and wherever the lock is not there, a host lives when one answers on the socket.
    """
    path = os.path.join(layout.host_dir(common_dir), LOCK)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return _answers(common_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _answers(common_dir: str) -> bool:
    """True when a host answers ``ping`` on the repository's socket (one short exchange; never
    through :meth:`Client.request`, which asks :func:`host_alive` when nobody answers)."""
    try:
        sock = connect(socket_path(common_dir), CONNECT_TIMEOUT, checked=True)
    except OSError:
        return False
    try:
        sock.settimeout(CONNECT_TIMEOUT)
        sock.sendall(fastjson.dumps({"v": PROTOCOL, "op": "ping"}).encode() + b"\n")
        sock.shutdown(_socket.SHUT_WR)
        reply = fastjson.loads(sock.recv(1 << 16))
    except (OSError, ValueError):
        return False
    finally:
        sock.close()
    return isinstance(reply, dict) and reply.get("ok") is True


def read_info(common_dir: str) -> bytes | None:
    """The live host's liveness record (``host.json``) as bytes, read only from the user's own host
    directory (:func:`_checked_dir`) and never through a link; None when there is none to trust."""
    try:
        fd = _checked_dir(layout.host_dir(common_dir))
    except OSError:
        return None
    try:
        info = os.open(INFO, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        st = os.fstat(info)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        return os.read(info, 65536)
    except OSError:
        return None
    finally:
        os.close(info)


def claim_spawn(common_dir: str, backoff: float = SPAWN_BACKOFF) -> bool:
    """True when the caller should spawn a host now: none lives and none was spawned in ``backoff`` s.

    Marks the spawn, so that hooks arriving while the host starts do not spawn more.
    """
    if host_alive(common_dir):
        return False
    try:
        ensure_host_dir(common_dir)
        stamp = os.path.join(socket_dir(common_dir), SPAWNED)
        try:
            if time.time() - os.stat(stamp).st_mtime < backoff:
                return False
        except FileNotFoundError:
            pass
        with open(stamp, "wb"):
            pass
        os.utime(stamp)
    except OSError:
        return False
    return True


def host_starting(common_dir: str) -> bool:
    """True while a host is coming up: it holds the lock, or one was spawned under :data:`STARTING` s ago."""
    if host_alive(common_dir):
        return True
    try:
        return time.time() - os.stat(os.path.join(socket_dir(common_dir), SPAWNED)).st_mtime < STARTING
    except OSError:
        return False


# -- the client ----------------------------------------------------------------------------------


# The replies' types are for mypy only: at run time a reply is a plain dict, and ``typing`` is not
# imported (it costs every hook's start ~5 ms; mypy reads this name as typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    class _ReplyBase(TypedDict):
        ok: bool

    class Reply(_ReplyBase, total=False):
        """A host's reply to an operation on a run, or to ``ping``/``stop``/``forget`` (the keys above).

        ``ok`` is always there; the rest as the operation answers. Typed here so that each reader is
        checked; the reader of a reply still checks each value's type, as the host may be older.
        """

        error: str
        # hook (:class:`sandbox.agent.hookproto.Outcome`)
        message: str
        strict: bool
        decision: str | None
        reason: str | None
        call: str | None
        status: str | None
        files: int | None
        note: str | None
        foreign: bool | None
        settings: list[str] | None
        # begin, end, quiet
        watched: bool
        paths: list[str] | None
        last_change: float | None
        # ping
        pid: int
        runs: int
        # forget
        forgotten: bool

    class RunServed(TypedDict):
        """One run the host serves, in its ``status`` reply."""

        watched: bool
        watches: int
        note: str | None
        requests: int

    class InotifyUse(TypedDict):
        """The host's inotify use, in its ``status`` reply."""

        instances: int
        watches: int
        max_watches: int | None
        max_runs_watched: int | None

    class HostStatus(TypedDict):
        """What the host serves (:meth:`sandbox.agent.host.Host.status`): the ``status`` reply less ``ok``."""

        pid: int
        runs: dict[str, RunServed]
        inotify: InotifyUse
        notes: list[str]
        connections: dict[str, int]

    class StatusReply(HostStatus):
        """The ``status`` reply."""

        ok: bool

else:
    Reply = RunServed = InotifyUse = HostStatus = StatusReply = dict


class Client:
    """Talks to a repository's host. Every method answers None when no host answered.

    None means "nobody answered" (no host, or it died mid-request); a host's refusal is a reply
    with ``ok`` false.
    """

    def __init__(self, common_dir: str, *, timeout: float = 120.0) -> None:
        self.common_dir = common_dir
        self.path = socket_path(common_dir)
        self.timeout = timeout

    def request(
        self, message: Mapping[str, object], timeout: float | None = None, wait_start: float = 0.0
    ) -> Reply | None:
        """Send one request and read its reply; None when no host answered.

        ``wait_start``: when no host listens yet but one is starting (:func:`host_starting`), wait
        up to that many seconds for it (cheaper than working without it: a hook recording in its
        own process imports pygit2 and pydantic and may scan the worktree).
        """
        data = fastjson.dumps({"v": PROTOCOL, **message}).encode() + b"\n"
        if len(data) > MAX_REQUEST:
            return None  # larger than a host reads: the caller records in its own process
        deadline = time.monotonic() + wait_start
        while True:
            try:
                sock = connect(self.path, min(CONNECT_TIMEOUT, timeout or CONNECT_TIMEOUT), checked=True)
                break
            except OSError:
                if time.monotonic() >= deadline or not host_starting(self.common_dir):
                    return None
                time.sleep(0.02)
        try:
            # One deadline for the whole request (a host trickling its reply cannot stretch it).
            finish = time.monotonic() + (timeout or self.timeout)
            sock.settimeout(max(0.001, finish - time.monotonic()))
            sock.sendall(data)
            sock.shutdown(_socket.SHUT_WR)
            chunks = []
            while True:
                sock.settimeout(max(0.001, finish - time.monotonic()))
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            reply = fastjson.loads(b"".join(chunks))
        except (OSError, ValueError):
            return None  # the host died mid-request: the caller decides (recording again is idempotent)
        finally:
            sock.close()
        # Only ``ok`` is checked here; each reader checks the values it reads (see :class:`Reply`).
        ok = isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
        return reply if ok else None

    def for_run(
        self,
        run_id: str,
        run_dir: str,
        op: str,
        timeout: float | None = None,
        wait_start: float = 0.0,
        **fields: object,
    ) -> Reply | None:
        """An operation on one run, carrying its token; None when no host answered or no token."""
        token = run_token(run_dir)
        if token is None:
            return None
        return self.request({"op": op, "run": run_id, "token": token, **fields}, timeout, wait_start)

    def ping(self) -> Reply | None:
        """The host's pid and how many runs it serves; None when none answers."""
        reply = self.request({"op": "ping"}, CONNECT_TIMEOUT)
        return reply if reply and reply["ok"] else None


def status(common_dir: str) -> StatusReply | None:
    """The live host's status (its runs, watched or scanned and why; its inotify use), or None."""
    if not host_alive(common_dir):
        return None
    reply = Client(common_dir).request({"op": "status"}, 5.0)
    # The host answers ``status`` with a StatusReply (its own reply type, not Reply's ``runs`` count).
    return reply if reply and reply["ok"] else None  # type: ignore[return-value]


def run_ops(common_dir: str, run_id: str, run_dir: str, *, timeout: float = 15.0) -> RunChanges:
    """A change source for one run served by the repository's host (see :class:`RunChanges`)."""
    return RunChanges(Client(common_dir, timeout=timeout), run_id, run_dir)


class RunChanges:
    """``begin``/``end`` of one run's calls, asked of the host's watcher (``end``: None means scan)."""

    name = "host"

    def __init__(self, client: Client, run_id: str, run_dir: str) -> None:
        self.client = client
        self.run_id = run_id
        self.run_dir = run_dir

    def begin(self, call_id: str) -> None:
        """A call starts: the host collects its changes from now on."""
        self.client.for_run(self.run_id, self.run_dir, "begin", call=call_id)

    def end(self, call_id: str) -> set[str] | None:
        """The paths changed since ``begin(call_id)``, or None (scan)."""
        reply = self.client.for_run(self.run_id, self.run_dir, "end", call=call_id)
        paths = reply.get("paths") if reply and reply["ok"] else None
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            return None
        return set(paths)

    def last_change(self) -> float | None:
        """Seconds since the host last saw a change in the run's worktree (None: unknown)."""
        reply = self.client.for_run(self.run_id, self.run_dir, "quiet", timeout=5.0)
        value = reply.get("last_change") if reply and reply["ok"] else None
        return float(value) if isinstance(value, (int, float)) else None
