"""The few places the sandbox runs the git command instead of libgit2, each for a stated reason.

Every git the sandbox starts is built by one function, :func:`command` (:func:`git` and
:func:`spawn` use it; so does the CLI's one read of the user's colour settings), which pins an
environment that cannot touch the user's state by accident and runs nothing a run's agent
configured: no hooks, no inherited ``GIT_DIR``/``GIT_INDEX_FILE``, no optional locks, fsync of what
it writes, no ``core.fsmonitor`` command (see :data:`BASE_CONFIG`), and no transport at all, so no
lazy fetch and no Git LFS download (see :data:`NO_TRANSPORT_CONFIG`). ``tests/store/test_gitcli.py``
checks that no other module starts a git of its own.
"""

from __future__ import annotations

import os

from sandbox.errors import SandboxError

TYPE_CHECKING = False  # no typing, subprocess or threading at import: the quick path reads colour settings
if TYPE_CHECKING:
    import subprocess
    import threading
    from collections.abc import Callable, Mapping, Sequence

_STRIP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
)

#: ``core.fsmonitor`` names a command git runs on every read of the index. A run's git dir (and the
#: ``.git`` file that points at it) is the agent's to write, even confined, so a git run by the
#: sandbox in a run's worktree would otherwise run the agent's command outside its sandbox, with the
#: user's rights. Off for every git the sandbox runs: the user's tree is only read by ``add -A``
#: into a copied index, where the monitor saves little.
BASE_CONFIG = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.fsync=loose-object,pack,reference,derived-metadata",
    "-c",
    "core.fsyncMethod=fsync",
    "-c",
    "advice.detachedHead=false",
    "-c",
    "core.quotepath=false",
)


#: A run's git dir is the agent's to write (even confined): it may name a promisor remote whose
#: ``uploadpack`` (or ``core.sshCommand``, ``core.gitProxy``, an ``ext::`` URL) is a command of its
#: choosing, and plain git runs it through a lazy fetch as soon as a read meets a missing object
#: (a sparse index expanded by ``ls-files`` is enough). No git the sandbox runs needs a transport,
#: except ``sandbox push``/``fetch``, which ask for one (``network=True``). ``GIT_ALLOW_PROTOCOL``
#: set empty allows no protocol and, unlike ``protocol.allow``, cannot be loosened by a
#: ``protocol.<name>.allow`` in the agent's config; ``GIT_NO_LAZY_FETCH`` (git 2.45+) refuses the
#: lazy fetch itself where git knows it; ``-c`` settings reach the git subprocesses git starts.
#: git-lfs (a filter driver git starts) has an HTTP client of its own, which none of the above stops: a
#: content missing locally is downloaded from ``lfs.url``, which a worktree's ``.lfsconfig`` may set, so
#: an agent could make a git the sandbox runs in its worktree (a rollback's smudge, say) post to a URL of
#: its choosing. The command line's ``lfs.url`` beats every other source; ``/dev/null/...`` is a path no
#: one can make; ``lfs.skipdownloaderrors`` writes the pointer instead of failing, as a checkout of yours
#: without the content would leave it.
LFS_OFFLINE = (("lfs.url", "file:///dev/null/the-sandbox-downloads-nothing"), ("lfs.skipdownloaderrors", "true"))
NO_TRANSPORT_CONFIG = ("-c", "protocol.allow=never", *(a for k, v in LFS_OFFLINE for a in ("-c", f"{k}={v}")))
NO_TRANSPORT_ENV = {"GIT_ALLOW_PROTOCOL": "", "GIT_PROTOCOL_FROM_USER": "0"}
NO_LAZY_FETCH_ENV = {"GIT_NO_LAZY_FETCH": "1"}


def command(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    optional_locks: bool = False,
    network: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one git run by the sandbox: the only place either is built.

    ``env`` is added to the process's environment (minus what would point git elsewhere);
    ``optional_locks`` lets read-only commands refresh the index they read (only ever for a run's
    own worktree); ``network`` allows transports, for ``sandbox push``/``fetch`` on the user's own
    repository only (never on a run's directories). Lazy fetch stays off in every case.
    """
    argv = ["git", *([] if optional_locks else ["--no-optional-locks"]), *BASE_CONFIG]
    if not network:
        argv.extend(NO_TRANSPORT_CONFIG)
    full_env = {k: v for k, v in os.environ.items() if k not in _STRIP}
    full_env.update(pinned_env(env, optional_locks=optional_locks, network=network))
    return [*argv, *args], full_env


def pinned_env(
    env: Mapping[str, str] | None = None, *, optional_locks: bool = False, network: bool = False
) -> dict[str, str]:
    """What :func:`command` sets in a git's environment, ``env`` included: a git started in a sandbox,
    whose environment is filtered, gets these back after the filter (:func:`sandbox.confine.spawn.spawn`'s
    ``own_env``)."""
    pinned = {"GIT_OPTIONAL_LOCKS": "1" if optional_locks else "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    pinned.update(env or {})
    pinned.update(NO_LAZY_FETCH_ENV)
    if not network:
        pinned.update(NO_TRANSPORT_ENV)
    return pinned


class GitCommandError(SandboxError):
    """The git command failed; the message carries its stderr."""


def git(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: bytes | None = None,
    optional_locks: bool = False,
    network: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git`` with the sandbox's safe settings (:func:`command`) and return the completed process.

    ``optional_locks`` lets read-only commands refresh the index they read; only ever for a run's
    own worktree, never for the user's repository. ``network``: see :func:`command`.
    """
    import subprocess

    argv, full_env = command(args, env, optional_locks=optional_locks, network=network)
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        check=False,
    )
    if check:
        raise_for(args, proc.returncode, proc.stderr)
    return proc


def output(args: Sequence[str], cwd: str) -> bytes:
    """What ``git`` with the safe settings (:func:`command`) writes on standard output, run in ``cwd``
    (``git -C``), its standard error discarded; whatever its exit code (see :func:`read`)."""
    return read(args, cwd)[1]


def read(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float | None = None,
) -> tuple[int, bytes]:
    """``git`` with the safe settings (:func:`command`) run in ``cwd`` (``git -C``): its exit code and
    what it wrote on standard output (standard error discarded), as ``subprocess.run(...,
    capture_output=True)`` gives them, ``input`` on its standard input (else none), killed with
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds. Started with ``posix_spawn``:
    :mod:`subprocess` costs ``list``, ``status`` and ``log`` more than the gits they run
    (:mod:`sandbox.cli.quick`). :class:`OSError` when no git can be started."""
    return started(args, cwd, env, input).result(timeout)


class Started:
    """A git :func:`started` and not yet waited for: :meth:`result` gives what :func:`read` does. Two
    reads a command needs one after the other run side by side (``status``: the colour settings, the
    run's config and its index)."""

    def __init__(self, argv: list[str], full_env: dict[str, str], input: bytes | None) -> None:
        self.argv = argv
        self.input = input
        self.pid = -1
        self.out = -1
        self.env = full_env
        self._done: tuple[int, bytes] | None = None

    def result(self, timeout: float | None = None) -> tuple[int, bytes]:
        """Its exit code and standard output, once it ended (killed after ``timeout`` seconds)."""
        if self._done is not None:
            return self._done
        if self.pid == -1:  # more input than a pipe holds unread: subprocess writes it as git reads
            import subprocess

            proc = subprocess.run(
                self.argv, env=self.env, input=self.input, capture_output=True, check=False, timeout=timeout
            )
            self._done = (proc.returncode, proc.stdout)
            return self._done
        try:
            data = _drain(self.out, self.pid, self.argv, timeout)
        finally:
            os.close(self.out)
        self._done = (os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1]), data)
        return self._done


def started(args: Sequence[str], cwd: str, env: Mapping[str, str] | None = None, input: bytes | None = None) -> Started:
    """The git :func:`read` runs, started and left running: call :meth:`Started.result` once, on every
    path (it reaps the process). :class:`OSError` when no git can be started."""
    argv, full_env = command(["-C", cwd, *args], env)
    begun = Started(argv, full_env, input)
    stdin = _stdin(input)
    if stdin is None:
        return begun
    out, write = os.pipe()
    try:
        actions = [
            (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, write, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        begun.pid = os.posix_spawnp(argv[0], argv, full_env, file_actions=actions)
    except BaseException:
        os.close(out)
        raise
    finally:
        os.close(write)
        os.close(stdin)
    begun.out = out
    return begun


def _stdin(data: bytes | None) -> int | None:
    """A descriptor to read ``data`` from (``/dev/null`` for None): a pipe already holding all of it,
    closed for writing; None when it does not fit."""
    if data is None:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(write_end, False)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
    except BlockingIOError:
        os.close(read_end)
        return None
    finally:
        os.close(write_end)
    return read_end


def _drain(fd: int, pid: int, argv: Sequence[str], timeout: float | None) -> bytes:
    """Everything the child ``pid`` writes to ``fd`` until it closes it; the child killed (and
    ``subprocess.TimeoutExpired`` raised) when that takes longer than ``timeout`` seconds."""
    import select
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not poller.poll(None if left is None else left * 1000) and left is not None:
            import signal
            import subprocess

            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(list(argv), timeout or 0.0)
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


#: The stderr readers of spawned gits whose progress is passed on: (thread, chunks read so far).
_PUMPS: dict[int, tuple[threading.Thread, list[bytes]]] = {}


def spawn(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``git`` with the same safe settings without waiting; finish it with :func:`wait`.

    ``progress`` gets each line git writes on stderr (its progress meter writes lines ended by
    ``\r``) as it comes, from a reader thread; the whole stderr is still kept for :func:`wait`.
    """
    import subprocess
    import threading

    argv, full_env = command(args, env)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if progress is not None:
        assert proc.stderr is not None
        chunks: list[bytes] = []
        thread = threading.Thread(target=_pump, args=(proc.stderr.fileno(), progress, chunks), daemon=True)
        thread.start()
        _PUMPS[proc.pid] = (thread, chunks)
    return proc


def _pump(fd: int, progress: Callable[[str], None], chunks: list[bytes]) -> None:
    pending = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        if not data:
            return
        chunks.append(data)
        pending += data
        *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            if line.strip():
                progress(line.decode(errors="replace").strip())


def wait(args: Sequence[str], proc: subprocess.Popen[bytes]) -> bytes:
    """Wait for a :func:`spawn`-ed git; what it wrote on stderr, or :class:`GitCommandError` when it failed."""
    pump = _PUMPS.pop(proc.pid, None)
    if pump is None:
        _out, err = proc.communicate()
    else:
        proc.wait()
        pump[0].join()
        err = b"".join(pump[1])
        if proc.stderr is not None:
            proc.stderr.close()
    raise_for(args, proc.returncode, err or b"")
    return err or b""


def raise_for(args: Sequence[str], returncode: int, stderr: bytes) -> None:
    """:class:`GitCommandError` with git's last line of stderr, unless ``returncode`` is 0."""
    if returncode != 0:
        err = stderr.decode(errors="replace").strip().splitlines()
        detail = err[-1] if err else f"exit code {returncode}"
        raise GitCommandError(f"git {args[0]} failed: {detail}")
