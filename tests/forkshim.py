"""``sandbox ARGS`` for a client that must start a process itself (the MCP SDK's ``stdio_client``):
this small process hands its standard streams, argv, environment and working directory to the tests'
command server (:mod:`tests.cliserver`), which forks the command with them, then stands in for it.

    python -I -S tests/forkshim.py SOCKET ARGS...

It forwards SIGTERM, SIGINT and SIGHUP to the forked command and exits as it did (its code, or death by
the same signal). Standard library only, started without ``site``: about 10 ms, against about a second
of CPU for an exec'd ``sandbox mcp``. Made by :func:`tests.cliserver.stdio_command`.
"""

import array
import json
import os
import signal
import socket
import struct
import sys

_HEADER = struct.Struct("!I")  # as tests/cliserver.py frames its messages


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            sys.stderr.write("forkshim: the tests' command server went away\n")
            sys.exit(1)
        data += part
    return data


def main(path: str, args: list[str]) -> None:
    request = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "script": None}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    conn.sendmsg(
        [_HEADER.pack(len(request)), request],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))],
    )
    pid = _HEADER.unpack(_exactly(conn, _HEADER.size))[0]

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = json.loads(_exactly(conn, _HEADER.unpack(_exactly(conn, _HEADER.size))[0]))
    if code < 0:  # died by a signal: so does the stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
