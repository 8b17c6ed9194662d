"""The forwarder inside an agent's network namespace: ``127.0.0.1:PORT`` -> the run's proxy socket.

A new network namespace has only ``lo`` (bubblewrap brings it up), so the agent reaches the
allowlist proxy (:mod:`sandbox.agent.netproxy`, outside) through a Unix socket bound into its
sandbox. HTTP clients want a TCP proxy address, so the agent is started through :data:`PROGRAM`,
run by the sandbox's own interpreter (``-I -S``: the standard library only, ~20 ms), which

1. listens on ``127.0.0.1`` at a port the kernel picks (the namespace is the agent's own: nothing
   else can be there first);
2. forks the forwarder, which relays each accepted connection to the proxy's socket, one thread
   per direction; it dies with the agent (``PR_SET_PDEATHSIG``: bubblewrap's init waits for every
   process of the sandbox, so a forwarder left behind would keep the sandbox alive), and its
   standard streams are ``/dev/null``, so it holds none of the agent's pipes open;
3. sets ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` (both cases) to that port, empties
   ``NO_PROXY``, and ``exec``s the agent, which keeps this process's pid: the forwarder listens
   before the agent's first request can be made.

A command that cannot be started exits 127 (not found) or 126 (not executable), as a shell would.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: The variables set inside; ``NO_PROXY`` is emptied (nothing but the proxy routes anyway).
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
NO_PROXY_VARS = ("NO_PROXY", "no_proxy")

PROGRAM = r"""
import os, socket, sys, threading
path, argv = sys.argv[1], sys.argv[3:]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(128)
port = listener.getsockname()[1]

def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def handle(conn, target):
    up = socket.socket(socket.AF_UNIX)
    try:
        up.connect(target)
    except OSError:
        conn.close()
        up.close()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()

def serve():
    # sun_path holds ~108 bytes: a directory descriptor names a deep run directory
    d = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    target = "/proc/self/fd/%d/%s" % (d, os.path.basename(path))
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=handle, args=(conn, target), daemon=True).start()

agent = os.getpid()
if os.fork() == 0:
    try:
        import ctypes
        # SIGKILL when the agent (this process's parent once it has exec'd) ends: the sandbox's
        # init waits for every process in it, so a forwarder left behind would keep it alive.
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() != agent:
            os._exit(0)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = {0, 1, 2, listener.fileno()}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        serve()
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
