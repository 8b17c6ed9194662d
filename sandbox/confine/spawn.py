"""OS confinement of the agent's processes: bubblewrap on Linux, a ``sandbox-exec`` profile on macOS.

A run's worktree is only a convention until the processes working in it are kept out of
everything else. ``sandbox exec`` and ``sandbox run`` start their command or agent through
:func:`spawn`, which puts it in a sandbox for the run's :class:`Policy`
(:mod:`sandbox.confine.policy`: what it may see, write and reach), built by the backend
(:mod:`sandbox.confine.bwrap`, which says what the sandbox looks like; :mod:`sandbox.confine.seatbelt`),
with the inherited environment filtered (:mod:`sandbox.confine.envfilter`), the agent's configuration
made to exist first (:mod:`sandbox.agent.agentstate`) and what the kernel adds on top
(:mod:`sandbox.confine.hardening`: Landlock scoping, a pids/memory cgroup).

Signals: bubblewrap does not pass signals on, and dies of them (killing the sandbox with SIGKILL).
So it starts with SIGINT, SIGTERM, SIGHUP and SIGQUIT blocked (bubblewrap clears the mask for the
command), and :meth:`Confined.send_signal` delivers a signal to the command itself. A Ctrl-C from
the terminal reaches the command directly. Bubblewrap 0.8 reports a command killed by a signal as
exit 0, so the command runs under ``sh -c '...; "$@"; exit $?'``, which turns that into 128+N
(its trap only stops the shell itself from dying first; the command gets default dispositions).
Between the shim's fork and its exec the child still has that trap, and before the shim runs there
is no command at all: a signal sent then was lost and the command ran on. So ``send_signal`` holds a
signal until every child of the shim has exec'd (its ``/proc/PID/cmdline`` no longer the shim's) and
sends it once then; tests/confine/test_signals_at_start.py sends SIGINT and SIGTERM right at the start.

Availability (:func:`check`) is decided from what is on disk, without starting a process; a
sandbox that still cannot be set up is reported by :meth:`Confined.wait` from bubblewrap's
status pipe, never taken for the command's own failure, and never followed by an unconfined run.
One failure is retried: a path masked at the start (a daemon's socket,
:func:`~sandbox.confine.verdict.stray_sockets`; a private system file, :mod:`sandbox.confine.sysview`)
that vanishes while bubblewrap starts leaves it nothing to mount over, so :func:`spawn` then starts it
once more without it; a set-up that fails on a path that is not there names the path.

This module imports only the standard library: ``sandbox exec``'s fast path uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING

from sandbox.confine.bwrap import bwrap_argv, seccomp_program
from sandbox.confine.envfilter import WITHHELD_ENV, filter_env, renumber_git_config
from sandbox.confine.policy import (
    INSTALL_HINT,
    OPT_OUT,
    ConfinementError,
    Isolation,
    Limits,
    Policy,
)
from sandbox.confine.seatbelt import seatbelt_profile
from sandbox.confine.verdict import Rule, bound_sockets, explain, rules, stray_sockets
from sandbox.store import lfsstore

if TYPE_CHECKING:
    from sandbox.confine.hardening import Cgroups

#: What callers use most, kept importable from here (defined in :mod:`sandbox.confine.policy`).
__all__ = ["Confined", "ConfinementError", "Isolation", "Limits", "Policy", "check", "inside_sandbox", "spawn"]

_BLOCKED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Seconds a signal sent before the command runs is held for it (bubblewrap still setting up, the shim
#: not exec'd yet); a sandbox that takes longer to start never gets it.
PENDING_SIGNAL_WAIT = 60.0
_HAVE_PROC = os.path.isdir("/proc/self")


# -- availability ------------------------------------------------------------------------------


def check(isolation: Isolation) -> None:
    """Raise :class:`ConfinementError` (naming the fix and the opt-out) when it cannot be had.

    Decided from files only (no process is started): the program, and on Linux whether user
    namespaces are allowed. A setup that fails anyway is reported by :meth:`Confined.wait`.
    """
    if not isolation.enabled:
        return
    if isolation.backend == "seatbelt":
        if not isolation.program or not os.access(isolation.program, os.X_OK):
            raise ConfinementError(f"OS confinement needs /usr/bin/sandbox-exec, which is missing; {OPT_OUT}.")
        return
    if not isolation.program or not os.access(isolation.program, os.X_OK):
        raise ConfinementError(
            f"OS confinement needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}, {OPT_OUT}."
        )
    reason = _userns_blocked()
    if reason is not None:
        raise ConfinementError(
            f"OS confinement needs user namespaces, which this system disables ({reason}); "
            f"enable them (sysctl -w {reason.split(' = ')[0]}=1 as root), {OPT_OUT}."
        )


def _userns_blocked() -> str | None:
    if os.geteuid() == 0:
        return None  # bubblewrap needs no user namespace when started by root
    for path, bad in (
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ):
        try:
            with open(path, encoding="ascii") as fh:
                value = fh.read().strip()
        except (OSError, UnicodeError):
            continue
        if value == bad:
            return f"{path[len('/proc/sys/') :].replace('/', '.')} = {value}"
    return None


def inside_sandbox(env_value: str | None) -> bool:
    """True in a process of one of our sandboxes: the variable we set, and bubblewrap as PID 1."""
    if env_value != "1":
        return False
    try:
        with open("/proc/1/comm", encoding="utf-8") as fh:
            return fh.read().strip() == "bwrap"
    except OSError:
        return False


# -- running -----------------------------------------------------------------------------------


class Confined:
    """A command running in a sandbox: ``wait`` and ``send_signal`` like :class:`subprocess.Popen`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        started_fd: int | None,
        session: bool,
        cgroups: Cgroups | None = None,
        holder: threading.Event | None = None,
    ) -> None:
        self.proc = proc
        self._cgroups = cgroups
        #: Set when the sandbox has ended: releases the thread that started it (see hardening.scoped).
        self._holder = holder
        self.pid = proc.pid
        self._started_fd = started_fd
        self._started: bool | None = None
        self._session = session
        self.returncode: int | None = None
        #: The command line that started it (bubblewrap's), to name what a failed set-up missed.
        self.argv: list[str] = []
        #: Why the set-up failed, when that is known better than "see bubblewrap's message".
        self.failure: str | None = None

    def set_up(self) -> bool:
        """Whether bubblewrap set the sandbox up (the shim said so); waits until it did or died."""
        fd, self._started_fd = self._started_fd, None
        if fd is not None:
            try:
                # The shim writes first thing inside; every other holder of the pipe's write end
                # lived in the sandbox's PID namespace, which dies with bubblewrap: the read ends.
                self._started = os.read(fd, 1) == b"s"
            finally:
                os.close(fd)
        return self._started is not False

    def vanished(self, paths: Sequence[str]) -> list[str]:
        """Those of ``paths`` (mounted over when it started) that no longer exist."""
        return [p for p in paths if not os.path.lexists(p)]

    def discard(self) -> None:
        """Reap a sandbox whose set-up failed (bubblewrap's message is already on stderr)."""
        with contextlib.suppress(ConfinementError):
            self.wait()

    def command_pids(self) -> list[int]:
        """Outer pids of the command: below bubblewrap's processes and the shim, best effort."""
        return self._below_shim()[1]

    def _below_shim(self) -> tuple[list[int], list[int]]:
        """(the shims' outer pids, their children's): empty lists while bubblewrap is still setting up."""
        pids = [self.pid]
        while pids and all(_comm(p) == "bwrap" for p in pids):
            pids = [c for p in pids for c in _children(p)]
        return pids, [c for shim in pids for c in _children(shim)]

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to the command inside, as a terminal would: to its whole process group.

        bubblewrap itself has the signals blocked. A command in a session of its own (``--new-session``:
        no terminal) is its group's leader below the shim, and a program that starts another and ignores
        the signal itself (Gemini CLI's launcher relaunches node) would otherwise never pass it on; the
        shim in that group traps it. A command still in this process's own group (it has the terminal,
        which signals the group itself) gets it alone.

        A command that does not run yet gets it once it does: before bubblewrap has started the shim
        there is nothing to send it to, and between the shim's fork and its exec the child still has the
        shim's trap, which would swallow it. A thread then waits (up to :data:`PENDING_SIGNAL_WAIT`) for
        the exec and sends it once (:func:`_unexeced`).
        """
        if self.proc.poll() is not None:
            return
        if not self._deliver(signum):
            threading.Thread(target=self._deliver_later, args=(signum,), name="sandbox-signal", daemon=True).start()

    def _deliver(self, signum: int) -> bool:
        """Send ``signum`` to the command if it runs (every child of the shim exec'd); False if not yet."""
        shims, pids = self._below_shim()
        if _HAVE_PROC and not _running(shims, pids):
            return False
        own_group = os.getpgrp()
        groups: set[int] = set()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(pid)
                if group != own_group and group not in groups:
                    groups.add(group)
                    os.killpg(group, signum)
                elif group == own_group:
                    os.kill(pid, signum)
        return True

    def _deliver_later(self, signum: int) -> None:
        until = time.monotonic() + PENDING_SIGNAL_WAIT
        while self.proc.poll() is None and time.monotonic() < until:
            if self._deliver(signum):
                return
            time.sleep(0.001)

    def poll(self) -> int | None:
        """The exit code when it ended, else None."""
        if self.proc.poll() is None:
            return None
        return self.wait()

    def wait(self) -> int:
        """Wait for the end; the command's exit code (128+N for signal N).

        Raises :class:`ConfinementError` when bubblewrap could not set the sandbox up (the shim,
        which runs only inside a finished sandbox, never said it started). Ctrl-C while waiting
        is passed on when the command has a session of its own, or does not run yet (the terminal's
        went to bubblewrap and the shim, which keep it from nobody but themselves).
        """
        if self.returncode is not None:
            return self.returncode
        while True:
            try:
                code = self.proc.wait()
                break
            except KeyboardInterrupt:
                if self._session or (_HAVE_PROC and not _running(*self._below_shim())):
                    self.send_signal(signal.SIGINT)  # held until the command runs (see send_signal)
                continue  # otherwise the command got the same SIGINT from the terminal
        if self._holder is not None:
            self._holder.set()
        if self._cgroups is not None:
            self._cgroups.remove()
        if not self.set_up():
            raise ConfinementError(self.failure or _setup_failed(code, self.argv))
        self.returncode = code if code >= 0 else 128 - code
        return self.returncode


def _setup_failed(code: int, argv: Sequence[str]) -> str:
    """The sentence for a set-up bubblewrap gave up on: the path it mounts that is not there (gone
    since the command line was made), else where to look."""
    missing = _missing_mounts(argv)
    if missing:
        return (
            f"bubblewrap could not set up the sandbox: {', '.join(missing)} is not there, and the sandbox "
            "mounts it (removed while it started?); check that it exists and run the command again."
        )
    return (
        f"bubblewrap could not set up the sandbox (exit {code}; its message is above); "
        f"check that 'bwrap --ro-bind / / true' works here, {OPT_OUT}."
    )


def _missing_mounts(argv: Sequence[str]) -> list[str]:
    """The places bubblewrap's command line ``argv`` mounts (or starts) in that do not exist now."""
    end = argv.index("--") if "--" in argv else len(argv)
    named = [
        argv[i + k]
        for i in range(end)
        for k in {"--bind": (1, 2), "--ro-bind": (1, 2), "--tmpfs": (1,), "--chdir": (1,)}.get(argv[i], ())
        if i + k < end
    ]
    return [p for p in dict.fromkeys(named) if p.startswith("/") and not os.path.lexists(p)]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _running(shims: Sequence[int], pids: Sequence[int]) -> bool:
    """True when the command runs: the shims have children, and each has exec'd (:func:`_unexeced`)."""
    return bool(pids) and not any(_unexeced(p, shims) for p in pids)


def _unexeced(pid: int, shims: Sequence[int]) -> bool:
    """True while ``pid``, a child of one of ``shims``, has not exec'd its command: its command line is
    still the shim's (forked, with the shim's trap), or empty (mid-exec: the kernel fills it in after
    it has reset the caught signals, or a zombie already). A command that is itself ``sh -c`` has its
    own arguments, never the shim's."""
    mine = _cmdline(pid)
    return not mine or any(mine == _cmdline(shim) for shim in shims)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        pass
    out = []  # kernels without CONFIG_PROC_CHILDREN: scan for the parent pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(name))
    return out


def prepare_config(policy: Policy) -> None:
    """Make sure every configuration path exists (else the agent could create it: see
    :data:`sandbox.agent.agentstate.AGENT_CONFIG`) and every run's copy of private state is there,
    seeded from the user's."""
    for entry in policy.config:
        path = entry.rstrip("/")
        if os.path.lexists(path) or not os.path.isdir(os.path.dirname(path)):
            continue
        with contextlib.suppress(OSError):
            if entry.endswith("/"):
                os.mkdir(path, 0o700)
            else:
                with open(path, "x", encoding="utf-8") as fh:
                    fh.write("{}\n" if path.endswith(".json") else "")
    for copy, dest in policy.private:
        if os.path.exists(copy):
            continue
        os.makedirs(os.path.dirname(copy), mode=0o700, exist_ok=True)
        data = b"{}\n"
        with contextlib.suppress(OSError):
            if os.path.isfile(dest):
                with open(dest, "rb") as fh:
                    data = fh.read(64 * 1024 * 1024)
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def spawn(
    isolation: Isolation,
    policy: Policy,
    argv: Sequence[str],
    cwd: str,
    *,
    env: Mapping[str, str] | None = None,
    own_env: Mapping[str, str] | None = None,
    stdin: int | IO[bytes] | None = None,
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    gate: Callable[[], None] | None = None,
) -> Confined:
    """Start ``argv`` in ``cwd`` confined by ``policy``; raises FileNotFoundError like Popen would.

    ``env`` (default: this process's) is filtered by the policy's allowlist; ``own_env``, what the
    sandbox itself sets for the command, is added after the filter. A command that lies in a
    directory hidden inside is refused with :class:`ConfinementError` naming the path and why.
    ``stdin``/``stdout``/``stderr`` are passed to :class:`subprocess.Popen` (``sandbox mcp`` captures
    a command's output: its own stdout is the protocol's channel). ``gate``, when given, is called
    once everything is ready, just before the command's process starts; what it raises ends the
    start, nothing left behind (``sandbox exec`` waits there for the host to make the call's start
    durable, and makes the command ready meanwhile).
    """
    check(isolation)
    assert isolation.program is not None
    prepare_config(policy)
    base = os.environ if env is None else env
    env = filter_env(base, policy.env_allow)
    env.update({k: v for k, v in (own_env or {}).items() if k not in WITHHELD_ENV})
    if policy.git_config is not None:  # the agent's git stores Git LFS contents in its own git dir
        env["GIT_CONFIG_KEY_lfs"], env["GIT_CONFIG_VALUE_lfs"] = lfsstore.inside_config(
            os.path.dirname(policy.git_config)
        )
    renumber_git_config(env)
    decided = rules(policy)  # made once: the command's check, the sockets' and the mounts read them
    _refuse_hidden_command(policy, argv, cwd, env.get("PATH", ""), decided)
    if isolation.backend == "seatbelt":
        full = [isolation.program, "-p", seatbelt_profile(policy), *argv]
        if gate is not None:  # the command starts only once the gate has passed, as below
            gate()
        seatbelt = subprocess.Popen(full, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr)
        return Confined(seatbelt, None, session=False)
    stray = stray_sockets(policy, bound_sockets(), decided)
    streams = (stdin, stdout, stderr)
    # What is masked here (a daemon's socket, a private system file: sysview) may vanish between the
    # command line and bubblewrap's mounts: it then has nothing to mount over, and a read-only / gives it
    # nowhere to make one (and may be back by the time anyone looks). A set-up that failed with anything
    # masked is made once more, its mounts anew (what is gone is not mounted over; what came back is
    # masked again) and the sockets found anew. Only with something masked is the set-up waited for here.
    masked = bool(policy.masked or policy.system or stray)
    confined = _start_bwrap(
        isolation.program, _masking(policy, stray), argv, cwd, env, streams, gate, None if stray else decided
    )
    if masked and not confined.set_up():
        confined.discard()
        stray = stray_sockets(policy, bound_sockets(), decided)
        confined = _start_bwrap(isolation.program, _masking(policy, stray), argv, cwd, env, streams)
        gone = [p for p in _missing_mounts(confined.argv) if p in {*policy.masked, *policy.system, *stray}]
        if not confined.set_up() and gone:
            confined.failure = (
                f"bubblewrap could not set up the sandbox: a path it was to mask ({', '.join(gone)}) vanished "
                "while it started, twice; run the command again."
            )
    return confined


def _masking(policy: Policy, stray: Sequence[str]) -> Policy:
    """``policy`` with the daemons' sockets found in the read-only rest of the machine masked: none is
    reachable unless shown on purpose."""
    return dataclasses.replace(policy, masked=(*policy.masked, *stray)) if stray else policy


def _start_bwrap(
    program: str,
    policy: Policy,
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    streams: tuple[int | IO[bytes] | None, int | IO[bytes] | None, int | IO[bytes] | None],
    gate: Callable[[], None] | None = None,
    decided: Sequence[Rule] | None = None,
) -> Confined:
    """Start bubblewrap for ``argv`` (the environment already filtered; ``decided``: the policy's rules,
    when already made); see :func:`spawn`."""
    from sandbox.confine import hardening

    started_r, started_w = os.pipe()
    fds = [started_w]
    seccomp_fd = None
    # The keyring calls always; TIOCSTI only with the terminal shared: in a session of its own the
    # command has no controlling terminal, and TIOCSTI works only on one's controlling terminal.
    seccomp = seccomp_program(ioctls=policy.interactive)
    if seccomp is not None:
        seccomp_fd, seccomp_w = os.pipe()
        os.write(seccomp_w, seccomp)  # a few hundred bytes: fits the pipe buffer
        os.close(seccomp_w)
        fds.append(seccomp_fd)
    userns = _userns_pipes(policy.limits, fds)
    full = bwrap_argv(
        program,
        policy,
        argv,
        cwd,
        started_fd=started_w,
        seccomp_fd=seccomp_fd,
        userns_fds=(userns[2], userns[3]) if userns else None,
        decided=decided,
    )
    groups = hardening.make_cgroups(
        policy.limits.max_processes, policy.limits.max_memory, memory_if_free=policy.limits.memory_if_free
    )
    full = groups.join_argv() + full
    stdin, stdout, stderr = streams

    def start() -> subprocess.Popen[bytes]:
        # The child inherits the signal mask. Blocking here rather than in a preexec_fn keeps
        # subprocess on its vfork path (a preexec_fn costs a full fork of this process, ~6 ms).
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_BLOCKED))
        try:
            return subprocess.Popen(full, cwd=cwd, env=env, pass_fds=fds, stdin=stdin, stdout=stdout, stderr=stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    holder: threading.Event | None = None
    try:
        if gate is not None:
            gate()
        # Abstract Unix sockets are per network namespace: with one of its own (--network off) the
        # sandbox reaches none outside; sharing the host's, Landlock scopes them where the kernel can
        # (only then: it costs importing ctypes, a few ms of every `sandbox exec`).
        if policy.network and hardening.landlock_abi() >= hardening.SCOPE_ABI:
            holder = threading.Event()
            proc = hardening.scoped(start, holder)
        else:
            proc = start()
    except BaseException:
        os.close(started_r)
        groups.remove()
        if holder is not None:
            holder.set()
        if userns:
            os.close(userns[0])
            os.close(userns[1])
        raise
    finally:
        for fd in fds:
            os.close(fd)
    if userns:
        _bound_userns(policy.limits, userns[0], userns[1])
    confined = Confined(proc, started_r, session=not policy.interactive, cgroups=groups, holder=holder)
    confined.argv = full
    return confined


def _userns_pipes(limits: Limits, fds: list[int]) -> tuple[int, int, int, int] | None:
    """(info read end, block write end, info write end, block read end) for bounding inotify in the
    sandbox's user namespace (:mod:`sandbox.confine.nslimits`); the child's ends are added to ``fds``.
    None when no bound is asked for."""
    if limits.max_inotify_instances is None and limits.max_inotify_watches is None:
        return None
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    fds += [info_w, block_r]
    return info_r, block_w, info_w, block_r


def _bound_userns(limits: Limits, info_r: int, block_w: int) -> None:
    """Map the sandbox's ids and set its inotify limits (:mod:`sandbox.confine.nslimits`), then let its
    setup go on. Without the maps bubblewrap fails to set up (reported by :meth:`Confined.wait`)."""
    from sandbox.confine import nslimits

    try:
        pid = nslimits.child_pid(info_r)
        if pid is not None:
            with contextlib.suppress(OSError):
                nslimits.map_ids(pid)
                nslimits.set_inotify(
                    pid, limits.max_inotify_instances or 2**31 - 1, limits.max_inotify_watches or 2**31 - 1
                )
        with contextlib.suppress(OSError):  # bubblewrap gone already: nothing waits
            os.write(block_w, b"g")
    finally:
        os.close(info_r)
        os.close(block_w)


def _refuse_hidden_command(
    policy: Policy, argv: Sequence[str], cwd: str, path_var: str, decided: Sequence[Rule] | None = None
) -> None:
    """One line naming the command's path and why it is not visible inside, before anything starts."""
    if not argv:
        return
    name = argv[0]
    if "/" in name:
        found = os.path.join(cwd, name)
    else:
        found = ""
        for folder in path_var.split(os.pathsep):
            candidate = os.path.join(folder or ".", name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found = candidate if os.path.isabs(candidate) else os.path.join(cwd, candidate)
                break
    if not found or not os.path.exists(found):
        return  # the shell inside says "not found", as it would outside
    real = os.path.realpath(found)
    verdict = explain(policy, real, decided)
    why = None if verdict.visible else verdict.why
    if why is not None:
        raise ConfinementError(
            f"The command {name}{'' if name == real else f' ({real})'} is not visible inside the sandbox: "
            f"it lies in {why}; "
            "copy it into the run's worktree, keep its directory readable (allow_read in [isolation]), "
            f"{OPT_OUT}."
        )
