"""The few places the sandbox runs the git command instead of libgit2, each for a stated reason.

Every git the sandbox starts is built by one function, :func:`command` (:func:`git` and
:func:`spawn` use it; so does the CLI's one read of the user's colour settings), which pins an
environment that cannot touch the user's state by accident and runs nothing a run's agent
configured: no hooks, no inherited ``GIT_DIR``/``GIT_INDEX_FILE``, no optional locks, fsync of what
it writes, no ``core.fsmonitor`` command (see :data:`BASE_CONFIG`), and no transport at all, so no
lazy fetch (see :data:`NO_TRANSPORT`). ``tests/store/test_gitcli.py`` checks that no other module starts
a git of its own.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence

from sandbox.errors import SandboxError

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
NO_TRANSPORT_CONFIG = ("-c", "protocol.allow=never")
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
    full_env["GIT_OPTIONAL_LOCKS"] = "1" if optional_locks else "0"
    full_env["GIT_TERMINAL_PROMPT"] = "0"
    full_env["LC_ALL"] = "C"
    if env:
        full_env.update(env)
    full_env.update(NO_LAZY_FETCH_ENV)
    if not network:
        full_env.update(NO_TRANSPORT_ENV)
    return [*argv, *args], full_env


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


def wait(args: Sequence[str], proc: subprocess.Popen[bytes]) -> None:
    """Wait for a :func:`spawn`-ed git; :class:`GitCommandError` when it failed."""
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


def raise_for(args: Sequence[str], returncode: int, stderr: bytes) -> None:
    """:class:`GitCommandError` with git's last line of stderr, unless ``returncode`` is 0."""
    if returncode != 0:
        err = stderr.decode(errors="replace").strip().splitlines()
        detail = err[-1] if err else f"exit code {returncode}"
        raise GitCommandError(f"git {args[0]} failed: {detail}")
