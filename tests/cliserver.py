"""The tests' ``sandbox`` commands, forked from one process that has already imported the CLI.

Most tests drive the CLI as a user would, a real ``sandbox`` process per command; each one spends
most of its CPU importing pydantic, the models, pygit2 and click (about 0.2 s of CPU on the CI
machine, ~1,000M instructions against 88M for ``python -c pass``). Over the suite that is about
half of all the CPU the tests use, and the suite is CPU-bound on two cores.

So :func:`run` hands the command to a server (one per pytest worker, started on first use) that
imported all of that once and forks a child per command: a real process with the test's argv
(``sys.argv``), environment (``os.environ``, the time zone, libgit2's home and configuration search paths
guessed again from it), working directory and standard streams (the test's own pipes, passed over
the socket), which runs the console script's ``main()`` and exits as the script would (its exit
code, ``SystemExit``'s message, death by SIGINT on an uncaught ``KeyboardInterrupt``, ``atexit``
handlers). Its stdout and stderr are read until every holder closes them, as ``subprocess.run``
does.

What differs from an exec of the script, and so goes through one (:func:`forkable`): a command
whose start is under test (``hook``, which never imports the heavy modules anyway), an environment
that changes how Python itself starts (``PYTHON*``, the locale), and one naming a session
(``SANDBOX_SESSION``: the host reads a process's session from ``/proc/PID/environ``, which for a
forked child still shows the server's). The tests of start-up itself (``test_startup.py``,
``test_quick.py``, ``test_foldcache.py``) run ``python -X importtime`` or the script directly, never
through here, nor do the commands given a terminal (``sandbox run`` on a pseudo-terminal: it must
be the terminal's own session). ``TESTS_CLI_FORK=0`` sends every command through an exec.

A command a test watches, signals or kills while it runs (a ``sandbox run`` of a real agent, ``ui``, the
kill loop's ``apply``) is forked the same way by :func:`popen`: its ``pid`` is the command's own, so a
signal sent to it lands in the command, and the agent's process tree is below it as below an exec'd one.
A shell script of a test calls :func:`stand_in` in place of the script.

Two more kinds of process are forked the same way: a test's Python script that drives the library
(:func:`script`: ``tests/scripted_runtime.py``, killed at its fault points), and ``sandbox mcp`` started
by a client that spawns the process itself (:func:`stdio_command`: the MCP SDK's ``stdio_client`` starts
a small stand-in, :mod:`tests.forkshim`, which has the command forked on its own streams).
"""

from __future__ import annotations

import array
import atexit
import gc
import json
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The installed console script the forked children stand for.
SCRIPT = str(Path(sys.executable).parent / "sandbox")

#: Environment names that change how Python starts, or that another process reads back from
#: ``/proc/PID/environ``: a command given one of them is exec'd.
_EXEC_ONLY_PREFIXES = ("PYTHON", "LC_")
_EXEC_ONLY_NAMES = {"LANG", "LANGUAGE", "SANDBOX_SESSION"}
#: Commands exec'd always: ``hook`` (its start is what it is measured on; it imports little anyway).
_EXEC_ONLY_COMMANDS = {"hook"}
_HEADER = struct.Struct("!I")

_lock = threading.Lock()
_server: tuple[subprocess.Popen[bytes], str] | None = None


def forkable(args: tuple[str, ...], changed_env: Mapping[str, str] | None) -> bool:
    """Whether a command with these arguments and environment changes runs the same forked."""
    command = args[2:3] if args[:1] == ("-C",) else args[:1]  # ``sandbox -C DIR run ...`` is a run too
    return bool(command) and command[0] not in _EXEC_ONLY_COMMANDS and _forkable_env(changed_env)


def _forkable_env(changed_env: Mapping[str, str] | None) -> bool:
    """Whether a process given these environment changes runs the same forked (any command, any script)."""
    if os.environ.get("TESTS_CLI_FORK") == "0":
        return False
    return not any(n.startswith(_EXEC_ONLY_PREFIXES) or n in _EXEC_ONLY_NAMES for n in changed_env or ())


def _environment(env: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """A child's whole environment (``env``, None: this process's) and what in it differs from this one's."""
    full = dict(os.environ if env is None else env)
    return full, {k: v for k, v in full.items() if os.environ.get(k) != v}


def sandbox(
    *args: str,
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 120,
    text: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([SCRIPT, *args], env=env, capture_output=True, ...)``: forked where that runs the
    same (:func:`forkable`), else exec'd. ``env``: the whole environment (None: this process's)."""
    full, changed = _environment(env)
    if forkable(args, changed):
        done = run(args, cwd, full, input, timeout)
    else:
        done = subprocess.run(
            [SCRIPT, *args], cwd=cwd, env=full, input=input, capture_output=True, timeout=timeout, check=False
        )
    if text:  # as ``text=True`` reads them: decoded, universal newlines
        done.stdout, done.stderr = _text(done.stdout), _text(done.stderr)
    return done


def script(
    path: str, *args: str, cwd: Path | str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run([sys.executable, path, *args], env=env, capture_output=True, ...)`` for a Python
    script of the tests that uses the library (``tests/scripted_runtime.py``): forked where that runs the
    same (:func:`_forkable_env`), else exec'd. Its ``__main__`` runs in the child as ``python path`` would
    run it (``sys.argv``, ``sys.path[0]``, ``SystemExit``, ``atexit``)."""
    full, changed = _environment(env)
    if _forkable_env(changed):
        return run(args, cwd, full, None, timeout, script=path)
    return subprocess.run(
        [sys.executable, path, *args], cwd=cwd, env=full, capture_output=True, timeout=timeout, check=False
    )


#: The stand-in a client that starts its own process runs instead of the script (:func:`stdio_command`).
SHIM = str(Path(__file__).resolve().parent / "forkshim.py")


def stdio_command(*args: str, env: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
    """``(command, args)`` for a client that starts ``sandbox ARGS`` itself and talks to it over its
    standard streams (the MCP SDK's ``stdio_client``): a stand-in (:mod:`tests.forkshim`) that has the
    server fork the command on its own streams, where that runs the same (:func:`forkable`); else the
    script itself."""
    if forkable(args, _environment(env)[1]):
        return sys.executable, ["-I", "-S", SHIM, _server_path(), *args]
    return SCRIPT, list(args)


def popen(
    *args: str,
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    start_new_session: bool = False,
    script: str | None = None,
    text: bool = False,
) -> Forked | subprocess.Popen[Any]:
    """``subprocess.Popen([SCRIPT, *args], stdin=DEVNULL, ...)`` for a command a test watches, signals or
    kills while it runs: forked where that runs the same (:func:`forkable`), as a :class:`Forked` whose
    ``pid`` is the command's own (a SIGKILL sent to it kills the command itself), else exec'd.
    ``stdout``/``stderr``: None (this process's), ``subprocess.DEVNULL`` or ``subprocess.PIPE``.
    ``script``: a test's Python script instead, ``[sys.executable, script, *args]`` (as :func:`script`).
    ``text``: ``communicate`` gives text, as Popen's ``text=True`` (the stream attributes stay binary)."""
    full, changed = _environment(env)
    if not (_forkable_env(changed) if script else forkable(args, changed)):
        return subprocess.Popen(
            [SCRIPT, *args] if script is None else [sys.executable, script, *args],
            cwd=cwd,
            env=full,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=start_new_session,
            text=text,
        )
    return Forked(args, cwd, full, stdout, stderr, start_new_session, script, text)


class Forked:
    """A command forked by the server, watched as a :class:`subprocess.Popen` is: ``pid``, ``poll``,
    ``wait``, ``send_signal``/``terminate``/``kill``, ``communicate`` and ``stdout``/``stderr`` (PIPE)."""

    def __init__(
        self,
        args: tuple[str, ...],
        cwd: Path | str,
        env: Mapping[str, str],
        stdout: int | None,
        stderr: int | None,
        new_session: bool,
        script: str | None = None,
        text: bool = False,
    ) -> None:
        self.args = [SCRIPT, *args] if script is None else [sys.executable, script, *args]
        self._text = text
        self.returncode: int | None = None
        self.stdin = None
        ends: list[int] = []  # the child's descriptors (closed here once sent)
        mine: list[int | None] = []
        for fd, how in ((0, subprocess.DEVNULL), (1, stdout), (2, stderr)):
            if how == subprocess.DEVNULL:
                ends.append(os.open(os.devnull, os.O_RDWR))
                mine.append(None)
            elif how == subprocess.PIPE:
                r, w = os.pipe()
                ends.append(w)
                mine.append(r)
            elif how is None:
                ends.append(os.dup(fd))
                mine.append(None)
            else:
                raise ValueError(f"Forked: unsupported stream {how!r}")
        # Unbuffered: what a test read with readline() is all that left the pipe (communicate reads the rest).
        self.stdout = open(mine[1], "rb", buffering=0) if mine[1] is not None else None  # noqa: SIM115
        self.stderr = open(mine[2], "rb", buffering=0) if mine[2] is not None else None  # noqa: SIM115
        request: dict[str, object] = {"args": list(args), "cwd": os.fspath(cwd), "env": dict(env), "script": script}
        if new_session:
            request["session"] = True
        data = json.dumps(request).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(_server_path())
            self._conn.sendmsg(
                [_HEADER.pack(len(data)), data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", ends))]
            )
            self.pid: int = _HEADER.unpack(_exactly(self._conn, _HEADER.size))[0]
        finally:
            for fd in ends:
                os.close(fd)

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def _status(self, timeout: float | None) -> int | None:
        """The exit status the server sent once it reaped the command; None if not within ``timeout``."""
        if self.returncode is None:
            if not _readable(self._conn.fileno(), timeout):
                return None
            self._conn.settimeout(None)  # sent in one piece once readable
            self.returncode = json.loads(_exactly(self._conn, _HEADER.unpack(_exactly(self._conn, _HEADER.size))[0]))
            self._conn.close()
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # as Popen: never a signal to a pid the command no longer has
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Both PIPE streams read to their end, side by side (a command that fills one pipe while the other
        is open never blocks), then the exit status (``timeout``: for the whole)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = (self.stdout, self.stderr)
        live = [s for s in streams if s is not None and not s.closed]  # one read to its end gives nothing more
        try:
            read = _read_to_end([s.fileno() for s in live], deadline)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        out, err = (None if s is None else b"" if s.closed else read[s.fileno()] for s in streams)
        for stream in live:
            stream.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self._text:
            return (None if out is None else _text(out)), (None if err is None else _text(err))
        return out, err

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _readable(fd: int, timeout: float | None) -> bool:
    """Whether ``fd`` has something to read (or its end) within ``timeout`` (None: wait). Not select(): a
    worker deep into the suite holds descriptors above 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else timeout * 1000))


def _read_to_end(fds: list[int], deadline: float | None) -> dict[int, bytes]:
    """Each descriptor read side by side until every writer closed it (as ``communicate`` reads a command's
    pipes: one it fills while the other is open never blocks), by ``deadline``."""
    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    left_open = list(fds)
    poller = select.poll()  # not select(): a worker deep into the suite holds descriptors above 1024
    for fd in left_open:
        poller.register(fd, select.POLLIN)
    while left_open:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired("sandbox", 0)
        for fd, _event in poller.poll(None if left is None else left * 1000):
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                left_open.remove(fd)
                poller.unregister(fd)
    return {fd: b"".join(parts) for fd, parts in chunks.items()}


def stand_in(folder: Path) -> str:
    """An executable in ``folder`` that a shell script of a test can call in place of the ``sandbox`` script:
    it runs the stand-in (:mod:`tests.forkshim`), which has the server fork the command. Only for commands
    that run the same forked (:func:`forkable`); with ``TESTS_CLI_FORK=0``, the script itself."""
    if not _forkable_env(None):
        return SCRIPT
    path = folder / "sandbox"
    command = " ".join(shlex.quote(word) for word in (sys.executable, "-I", "-S", SHIM, _server_path()))
    path.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    path.chmod(0o755)
    return str(path)


def _text(data: bytes) -> str:
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def run(
    args: tuple[str, ...],
    cwd: Path | str,
    env: Mapping[str, str],
    input: bytes | None,
    timeout: float,
    *,
    script: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run([SCRIPT, *args], capture_output=True, ...)``, the process forked by the server
    (``script``: ``[sys.executable, script, *args]``)."""
    argv = [SCRIPT, *args] if script is None else [sys.executable, script, *args]
    path = _server_path()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (os.dup(0), -1)
    request = json.dumps({"args": list(args), "cwd": os.fspath(cwd), "env": dict(env), "script": script}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendmsg(
            [_HEADER.pack(len(request)), request],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [in_r, out_w, err_w]))],
        )
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        pid = _HEADER.unpack(_exactly(conn, _HEADER.size))[0]
        if in_w != -1:
            threading.Thread(target=_feed, args=(in_w, input or b""), daemon=True).start()
        try:
            stdout, stderr = _drain(out_r, err_r, conn, timeout)
        except subprocess.TimeoutExpired:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise subprocess.TimeoutExpired(argv, timeout) from None
        status = json.loads(_exactly(conn, _HEADER.unpack(_exactly(conn, _HEADER.size))[0]))
    return subprocess.CompletedProcess(argv, status, stdout, stderr)


def _feed(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb") as fh:
            fh.write(data)
    except BrokenPipeError:
        pass


def _drain(out_r: int, err_r: int, conn: socket.socket, timeout: float) -> tuple[bytes, bytes]:
    """Both streams until every writer closed them (as ``communicate``), within ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        read = _read_to_end([out_r, err_r], deadline)
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        return read[out_r], read[err_r]
    finally:
        os.close(out_r)
        os.close(err_r)


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        try:
            part = conn.recv(size - len(data))
        except TimeoutError:
            raise subprocess.TimeoutExpired("sandbox", 0) from None
        if not part:
            raise RuntimeError("the tests' command server went away (see its log: /tmp/sandbox-cliserver-*/log)")
        data += part
    return data


def _server_path() -> str:
    """The socket of this process's server, started on first use (it ends when this process does)."""
    global _server
    with _lock:
        if _server is not None and _server[0].poll() is None:
            return _server[1]
        folder = tempfile.mkdtemp(prefix="sandbox-cliserver-", dir="/tmp")  # short: a socket path has 108 bytes
        path, log_path = os.path.join(folder, "sock"), os.path.join(folder, "log")
        ready_r, ready_w = os.pipe()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.cliserver", path, str(os.getpid()), str(ready_w)],
                cwd=str(Path(__file__).resolve().parent.parent),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(ready_w,),
                start_new_session=True,
            )
        os.close(ready_w)
        with open(ready_r, "rb") as ready:
            if ready.read(1) != b"1":
                raise RuntimeError(f"the tests' command server did not start (see {log_path})")
        atexit.register(_stop, proc, folder)
        _server = (proc, path)
        return path


def _stop(proc: subprocess.Popen[bytes], folder: str) -> None:
    """At this process's exit: the server ended, and its folder removed unless its log says something."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log = os.path.join(folder, "log")
    if not os.path.exists(log) or os.path.getsize(log) == 0:
        shutil.rmtree(folder, ignore_errors=True)


# --- the server -------------------------------------------------------------------------------


def _preload() -> None:
    """Every module of the package, imported once: the click group, the library, pygit2, and what the
    commands import lazily inside their functions (about half of a forked command's CPU when each child
    imported it again: ``apply``, ``undo``, ``diff``, ``start``). None of them changes the process's
    state at import (signals, environment, working directory); what a command's own start-up imports is
    tested on an exec'd script (``test_startup.py``)."""
    from sandbox.store.gitlib import install

    install()
    import importlib
    import pkgutil

    import pygit2  # noqa: F401

    import sandbox
    from sandbox.cli.app import cli  # noqa: F401

    for info in pkgutil.walk_packages(sandbox.__path__, "sandbox."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
    del sandbox
    _build_models()
    # The children's collector then leaves the server's objects alone: a collection in a child walks
    # every tracked object, and touching their headers copied the whole heap page by page (a forked
    # ``status`` faulted 3,600 pages; frozen, 2,600).
    gc.collect()
    gc.freeze()


def _build_models() -> None:
    """Each model's validator and serializer, built once here (the package defers them to first use,
    so that a hook starts fast): every forked child built again those it used, 10-20 ms of a
    ``status``."""
    from pydantic import BaseModel

    stack = [BaseModel]
    seen: set[type[BaseModel]] = set()
    while stack:
        for model in stack.pop().__subclasses__():
            if model in seen:
                continue
            seen.add(model)
            stack.append(model)
            if model.__module__.startswith("sandbox.") and not model.__pydantic_complete__:
                model.model_rebuild()


def _serve(path: str, parent: int, ready_fd: int) -> None:
    _preload()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    while os.getppid() == parent:  # ends with the pytest process that started it
        ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            conn, _ = listener.accept()
            pid = _start(conn, listener, (wake_r, wake_w))
            if pid is not None:
                waiting[pid] = conn
        _reap(waiting)
    os.unlink(path)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        reply = json.dumps(code).encode()
        try:
            conn.sendall(_HEADER.pack(len(reply)) + reply)
        except OSError:
            pass
        conn.close()


def _start(conn: socket.socket, listener: socket.socket, wake: tuple[int, int]) -> int | None:
    """Fork the command ``conn`` asks for; its pid, sent back first."""
    head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
    if len(head) < _HEADER.size or len(fds) != 3:
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    size = _HEADER.unpack(head)[0]
    request = json.loads(_exactly(conn, size))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        for fd in wake:
            os.close(fd)
        _child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    conn.sendall(_HEADER.pack(pid))
    return pid


def _child(request: dict[str, object], fds: list[int]) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if request.get("session"):
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(request["env"])  # type: ignore[arg-type]
        _new_streams()
        time.tzset()  # the zone a fresh process reads from TZ at its start
        _guess_git_paths_again()
        script = request.get("script")
        path = SCRIPT if script is None else str(script)
        sys.argv = [path, *request["args"]]  # type: ignore[misc]
        sys.path[0] = os.path.dirname(path)  # as the script's own start puts it
        code = _main(None if script is None else path)
    except BaseException:  # the set-up failed (a working directory that is gone): said on the test's stderr
        import traceback

        traceback.print_exc()
        _flush()
    finally:
        os._exit(code)


def _new_streams() -> None:
    """``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` made anew on the test's descriptors, as
    Python's start makes them from the command's environment (the server's were made on its own: a log
    file, seekable): ``PYTHONUNBUFFERED`` writes through, as ``python -u`` does."""
    import io

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    made = []
    for fd, old in enumerate((sys.stdin, sys.stdout, sys.stderr)):
        tty = os.isatty(fd)
        stream: io.TextIOWrapper
        if fd > 0 and unbuffered:
            raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115  # as above
            stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)
        else:
            stream = open(  # noqa: SIM115  # the process's own standard stream, open until it exits
                fd,
                "r" if fd == 0 else "w",
                encoding=old.encoding,
                errors=old.errors,
                closefd=False,
                buffering=-1,
            )
        if fd > 0:
            stream.reconfigure(line_buffering=tty or fd == 2)
        made.append(stream)
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made


def _guess_git_paths_again() -> None:
    """libgit2 guessed its home and configuration search paths from the server's environment at
    import; make it guess them from the command's, as a fresh process would."""
    import pygit2
    from pygit2.enums import ConfigLevel, Option

    for level in (ConfigLevel.SYSTEM, ConfigLevel.XDG, ConfigLevel.GLOBAL, ConfigLevel.PROGRAMDATA):
        pygit2.settings.search_path[level] = None
    pygit2.option(Option.SET_HOMEDIR, None)


def _main(script: str | None) -> int:
    """``sys.exit(main())`` as the console script runs it (``script``: ``python script``), and Python's
    own exit after it."""
    import atexit
    import runpy
    import traceback

    from sandbox.cli import main

    code = 0
    try:
        if script is None:
            main()
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    _flush()
    return code


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
