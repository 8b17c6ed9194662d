"""The network allowlist of ``sandbox run``: a small HTTP proxy outside the agent's network namespace.

Under ``--network allow`` (the default of ``sandbox run``) the agent has a network namespace of
its own with only ``lo`` in it (bubblewrap's ``--unshare-net``). Its one way out is this proxy,
which runs in the ``sandbox run`` process (a thread with an asyncio loop) and listens on a Unix
socket in the run's own directory, ``net.sock``; a forwarder inside the namespace
(:mod:`sandbox.confine.bridge`) listens on ``127.0.0.1:PORT`` and relays each connection to it, and
the proxy variables inside name that port. Nothing else routes: a client that ignores the proxy
variables, or a ``NO_PROXY`` entry, gets "network unreachable", never a way round.

The proxy speaks the two forms HTTP clients use with a proxy: ``CONNECT host:port`` (a tunnel,
what HTTPS goes through: the proxy sees the host name, never the traffic) and a plain-HTTP
request in absolute form (``GET http://host:port/path``), which it sends on with
``Connection: close`` (one request per connection, so a second request on a kept-alive connection
can never reach a host the first one was checked for). A host not on the allowlist gets ``403``
and is reported to ``on_refused`` (the session records it in the ledger, see
:mod:`sandbox.agent.netrecord`). The proxy dies with the ``sandbox run`` process that holds it.

Why our own and not a library such as ``proxy.py``: what is needed is ~150 lines of asyncio (two
request forms and a relay), it must start in a few milliseconds inside the process that records
the run (a refusal is tied to the call running at that moment, and the proxy dies with the run),
and listen on a Unix socket only the run's own sandbox can see; ``proxy.py`` brings its own
process model (acceptor processes, a plugin API driven by its own CLI flags) and ~45 ms of imports.

Allowlist entries (:class:`Allowlist`): ``host`` (ports 443 and 80), ``host:port``, ``host:*``
(any port), ``*.example.com`` (its subdomains, not itself), IPv6 literals in brackets. Host names
compare case-insensitively; nothing is resolved to decide (an IP address is allowed only if listed).

Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    # Imported where the proxy serves, in its own thread: asyncio costs ~40 ms of CPU, which
    # 'sandbox run' must not pay before its agent starts (the allowlist itself needs none of it).
    import asyncio

#: Ports a bare ``host`` entry allows.
WEB_PORTS = (443, 80)
#: The longest request head read (request line and headers).
MAX_HEAD = 64 * 1024
#: Seconds a client has to send its request head, and the proxy to reach an allowed host.
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
#: Hop-by-hop headers not passed on with a plain-HTTP request (``Connection: close`` is added).
_HOP_HEADERS = (b"connection:", b"proxy-connection:", b"keep-alive:", b"proxy-authorization:", b"te:", b"upgrade:")


class AllowlistError(ValueError):
    """An allowlist entry that cannot be read."""


@dataclass(frozen=True)
class Refusal:
    """One connection the proxy refused: where to, when, and how it was asked for."""

    host: str
    port: int
    at: datetime.datetime
    method: str


def _norm_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


#: What a host in a request may be: a DNS name or an IPv4 address (letters, digits, ``.``, ``-``,
#: ``_``), or an IPv6 address. Anything else (a NUL, a space, non-ASCII) is answered 400: passed on,
#: the resolver raised ValueError or UnicodeError, a traceback on the user's terminal.
_HOST = re.compile(r"[a-z0-9_.-]{1,253}|[0-9a-f:.]{2,45}")


def valid_host(host: str) -> bool:
    """True when ``host`` (normalised) is a name or address the proxy may try to reach."""
    return _HOST.fullmatch(host) is not None and all(len(label) <= 63 for label in host.split("."))


def split_hostport(text: str, default_port: int | None) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port); ``*`` as port -> None (any)."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise AllowlistError(f"{text!r} opens '[' without closing it")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise AllowlistError(f"{text!r} has text after ']' that is not ':PORT'")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""  # a name, or a bare IPv6 address
    if not port_text:
        return _norm_host(host), default_port
    if port_text == "*":
        return _norm_host(host), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AllowlistError(f"{text!r} has no valid port (1-65535 or *)")
    return _norm_host(host), int(port_text)


class Allowlist:
    """The hosts (and ports) the proxy lets a sandbox reach; see the module docstring for entries."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(dict.fromkeys(e.strip() for e in entries if e.strip()))
        self._rules: list[tuple[str, int | None, bool]] = []
        for entry in self.entries:
            host, port = split_hostport(entry, 0)
            wildcard = host.startswith("*.")
            name = host[2:] if wildcard else host
            if not name or any(c in name for c in "/@* \t"):
                raise AllowlistError(f"{entry!r} is not a host name, address or *.domain")
            self._rules.append((name, port, wildcard))

    def allows(self, host: str, port: int) -> bool:
        """True when ``host:port`` is on the list."""
        host = _norm_host(host)
        for name, allowed_port, wildcard in self._rules:
            if (host.endswith("." + name) if wildcard else host == name) and (
                allowed_port is None or (port in WEB_PORTS if allowed_port == 0 else port == allowed_port)
            ):
                return True
        return False


# -- the proxy ---------------------------------------------------------------------------------


def _bind_unix(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (0600), even when the path is longer than ``sun_path``."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # ~108 bytes of sun_path; a directory descriptor names a deep run directory.
        sock.bind(f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}")
        os.chmod(path, 0o600)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(dir_fd)
    return sock


def _reply(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


class NetProxy:
    """The allowlist proxy of one session, on a Unix socket, served by a thread of this process.

    ``on_refused`` is called (in a worker thread, never on the proxy's loop) with each
    :class:`Refusal`. :meth:`start` returns once the socket listens; :meth:`stop` ends the thread,
    the open connections and the socket file.
    """

    def __init__(self, path: str, allowlist: Allowlist, on_refused: Callable[[Refusal], None] | None = None) -> None:
        self.path = path
        self.allowlist = allowlist
        self.on_refused = on_refused
        self.refused = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._inode = -1
        self._sock: socket.socket | None = None

    def start(self) -> NetProxy:
        """Listen, then serve in a daemon thread; returns self."""
        return self.listen().serve()

    def listen(self) -> NetProxy:
        """Bind and listen on the socket (standard library only): connections wait in its backlog
        until :meth:`serve`, so an agent can be started between the two; returns self."""
        self._sock = _bind_unix(self.path)
        self._inode = os.stat(self.path).st_ino
        return self

    def serve(self) -> NetProxy:
        """Serve the listening socket in a daemon thread (:meth:`listen` first); returns self."""
        sock, self._sock = self._sock, None
        assert sock is not None, "listen() first"
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="sandbox-netproxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
        self._thread = None
        if self._sock is not None:  # listened, never served
            self._sock.close()
            self._sock = None
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:  # not another session's, bound since
                os.unlink(self.path)

    def __enter__(self) -> NetProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, sock: socket.socket) -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            server = loop.run_until_complete(asyncio.start_unix_server(self._handle, sock=sock, limit=MAX_HEAD))
        except BaseException as exc:  # handed to start(), which raises it in the caller's thread
            self._error = exc
            sock.close()
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, OSError):
                writer.write(_reply("400 Bad Request", "sandbox: not an HTTP proxy request"))
                return
            line, _, headers = head.partition(b"\r\n")
            parts = line.split(b" ")
            if len(parts) != 3:
                writer.write(_reply("400 Bad Request", "sandbox: not an HTTP proxy request"))
                return
            method, target, version = (p.decode("latin-1") for p in parts)
            try:
                if method == "CONNECT":
                    host, port = split_hostport(target, 443)
                    path = ""
                else:
                    url = urlsplit(target)
                    if url.scheme != "http" or not url.hostname:
                        raise AllowlistError("only http:// URLs in absolute form (https goes through CONNECT)")
                    host, port = _norm_host(url.hostname), url.port or 80
                    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                if not valid_host(host):
                    raise AllowlistError("the host is not a name or an address")
            except (AllowlistError, ValueError) as exc:
                writer.write(_reply("400 Bad Request", f"sandbox: cannot read the proxy request ({exc})"))
                return
            if port is None:
                writer.write(_reply("400 Bad Request", "sandbox: cannot read the proxy request (no port)"))
                return
            if not self.allowlist.allows(host, port):
                self.refused += 1
                # Stamped before the answer leaves: the agent may end its call the moment it reads it,
                # and the refusal is booked to the call running at this time (netrecord).
                at = datetime.datetime.now(datetime.timezone.utc)
                writer.write(
                    _reply(
                        "403 Forbidden",
                        f"sandbox: {host}:{port} is not in this run's network allowlist "
                        "([network] allow in .sandbox.toml adds to it; --network on lifts it)",
                    )
                )
                if self.on_refused is not None:
                    refusal = Refusal(host, port, at, method)
                    asyncio.get_running_loop().run_in_executor(None, self.on_refused, refusal)
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError, ValueError) as exc:  # ValueError: UnicodeError of IDNA
                writer.write(_reply("502 Bad Gateway", f"sandbox: cannot reach {host}:{port} ({exc})"))
                return
            upstream = up_writer
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                kept = [h for h in headers.split(b"\r\n") if h and not h.lower().startswith(_HOP_HEADERS)]
                request = f"{method} {path} {version}\r\n".encode("latin-1") + b"".join(h + b"\r\n" for h in kept)
                up_writer.write(request + b"Connection: close\r\n\r\n")
            await _relay(reader, writer, up_reader, up_writer, until_upstream_ends=method != "CONNECT")
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        except Exception:  # noqa: BLE001 - whatever a request does, no traceback reaches the user's terminal
            with contextlib.suppress(Exception):
                writer.write(_reply("400 Bad Request", "sandbox: cannot read the proxy request"))
        finally:
            for w in (writer, upstream):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _relay(
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    up_r: asyncio.StreamReader,
    up_w: asyncio.StreamWriter,
    *,
    until_upstream_ends: bool,
) -> None:
    """Copy both ways until both ends close (a tunnel), or until the upstream's answer ended."""
    import asyncio

    up = asyncio.ensure_future(_pipe(client_r, up_w))
    down = asyncio.ensure_future(_pipe(up_r, client_w))
    if until_upstream_ends:
        await down
        up.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await up
    else:
        await asyncio.gather(up, down)
