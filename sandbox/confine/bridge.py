"""The forwarder inside an agent's network namespace: ``127.0.0.1:PORT`` -> the run's proxy socket.

A new network namespace has only ``lo`` (bubblewrap brings it up), so the agent reaches the
allowlist proxy (:mod:`sandbox.confine.proxy`, outside) through a Unix socket bound into its
sandbox. HTTP clients want a TCP proxy address, so the agent is started through :data:`PROGRAM`,
run by the sandbox's own interpreter (``-I -S``, importing only C modules: ``_socket``, ``_thread``,
``select``; ``socket`` and ``threading`` would double its start, measured), which

1. listens on ``127.0.0.1`` at a port the kernel picks (the namespace is the agent's own: nothing
   else can be there first);
2. forks the forwarder, which relays each accepted connection to the proxy's socket, one thread
   per direction; it ends with the agent (a pidfd of it, readable once it exits: bubblewrap's init
   waits for every process of the sandbox, so a forwarder left behind would keep it alive), and
   its standard streams are ``/dev/null``, so it holds none of the agent's pipes open;
3. sets ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (both cases) to that port, empties
   ``NO_PROXY``, and ``exec``s the agent, which keeps this process's pid: the forwarder listens
   before the agent's first request can be made.

A command that cannot be started exits 127 (not found) or 126 (not executable), as a shell would.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: The program; the variables it sets inside: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (both cases) to the
#: forwarder, NO_PROXY (both cases) empty: nothing but the proxy routes anyway.
PROGRAM = r"""
import _socket, _thread, os, select, sys
path, argv = sys.argv[1], sys.argv[3:]
listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
listener.bind(("127.0.0.1", 0))
listener.listen(128)
port = listener.getsockname()[1]

def pump(src, dst, done):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(_socket.SHUT_WR)
    except OSError:
        pass
    if done is not None:
        done.release()

def handle(conn, target):
    up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        up.connect(target)
    except OSError:
        conn.close()
        up.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(pump, (up, conn, done))
    pump(conn, up, None)
    done.acquire()
    conn.close()
    up.close()

def serve(agent):
    # sun_path holds ~108 bytes: a directory descriptor names a deep run directory
    d = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    target = "/proc/self/fd/%d/%s" % (d, os.path.basename(path))
    while True:
        ready = select.select([listener] + ([agent] if agent is not None else []), [], [])[0]
        if agent is not None and agent in ready:
            os._exit(0)
        try:
            fd, _ = listener._accept()
        except OSError:
            continue
        conn = _socket.socket(fileno=fd)
        conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        _thread.start_new_thread(handle, (conn, target))

parent = os.getpid()
if os.fork() == 0:
    try:
        # Readable when the agent (this process once it has exec'd) ends: the forwarder goes with
        # it, since bubblewrap's init waits for every process of the sandbox.
        try:
            agent = os.pidfd_open(parent)
        except (AttributeError, OSError):  # Linux < 5.3: it ends when the sandbox does
            agent = None
        if os.getppid() != parent:
            os._exit(0)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = {0, 1, 2, listener.fileno(), agent}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        serve(agent)
    finally:
        os._exit(0)
listener.close()
url = "http://127.0.0.1:%d" % port
for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
    os.environ[var] = url
for var in ("NO_PROXY", "no_proxy"):
    os.environ[var] = ""
try:
    os.execvp(argv[0], argv)
except FileNotFoundError:
    sys.stderr.write("sandbox-confined: %s: not found\n" % argv[0])
    os._exit(127)
except OSError as exc:
    sys.stderr.write("sandbox-confined: %s: %s\n" % (argv[0], exc.strerror))
    os._exit(126)
"""


def wrap(argv: Sequence[str], socket_path: str, python: str | None = None) -> list[str]:
    """``argv`` started through the forwarder, which reaches the proxy at ``socket_path``."""
    return [python or sys.executable, "-I", "-S", "-c", PROGRAM, socket_path, "--", *argv]
