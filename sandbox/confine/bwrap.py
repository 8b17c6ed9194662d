"""The bubblewrap command line for a run's :class:`~sandbox.confine.policy.Policy` (:func:`bwrap_argv`),
which :func:`sandbox.confine.spawn.spawn` starts:

* the whole file system read-only (``--ro-bind / /``) but every home, which is empty except its
  allowlist (:mod:`sandbox.confine.homeview`); a private ``/tmp``; a private ``/dev``, read-only but
  for its device nodes; an IPC namespace of its own; a user namespace of its own whose inotify
  limits the caller sets before the command starts (:mod:`sandbox.confine.nslimits`); a ``/proc``
  of its own PID namespace (``--unshare-pid``: the sandbox sees only its own processes, so
  ``/proc/<ppid>/cwd`` cannot lead back to the caller's writable mounts, and nothing outside can be
  signalled or traced);
* writable: the run's own paths (:func:`sandbox.confine.policy.run_writable_paths`, the one place
  that says which) and the agent's own state (``~/.claude``, ``~/.gemini``, ... from the settings);
  the user's working tree and its ``.git`` are then re-mounted read-only explicitly, in case they lie
  under a writable path;
* the most specific path wins: mounts are made parents first, so a writable worktree inside the
  user's ``.git`` stays writable while ``.git`` itself is read-only;
* no capabilities (``--cap-drop ALL``: a root caller's sandbox would otherwise keep
  ``CAP_SYS_ADMIN`` and could simply remount ``/`` read-write) and ``/proc/sys``, ``/proc/irq``,
  ``/proc/bus`` read-only (bubblewrap leaves them writable for root);
* ``--unshare-net`` when the network is off, and under ``--network allow``, where the one way out
  is the run's proxy, reached through a forwarder inside (:mod:`sandbox.confine.bridge`). Unix
  sockets named by a path still work across it:
  the hooks reach the repository's host on its ``host.sock`` (``connect`` needs no write access to
  the mount), with their run's token, which only their own run's (visible) directory holds;
* ``--die-with-parent``: a sandbox never outlives the ``sandbox`` process that records it;
* ``--new-session`` when the command does not use the terminal; an interactive agent keeps the
  terminal (a new session has no controlling terminal: no ``/dev/tty``, no ``SIGWINCH`` on resize),
  and a seccomp filter refuses ``TIOCSTI``/``TIOCLINUX`` instead, the ioctls that would let it type
  into the user's shell.

A command killed by signal N is reported by bubblewrap 0.8 as exit 0, so the command runs under
``sh -c '...; "$@"; exit $?'``, which turns that into 128+N (its trap only stops the shell itself
from dying first; the command gets default dispositions once it has exec'd: a signal before that
is held by :meth:`sandbox.confine.spawn.Confined.send_signal` until it has). Standard library only.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

from sandbox.confine.envfilter import CONFINED_ENV
from sandbox.confine.policy import Limits, Policy
from sandbox.confine.verdict import Rule, rules

#: Runs the command as a child, so a death by signal N becomes exit 128+N (see the module docstring).
_SHIM = 'trap : INT TERM HUP QUIT; "$@"; exit $?'
_PROC_COVER = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
_SMALL = str(1024 * 1024)  # the size of a hidden directory's tmpfs: it only holds mount points


def bwrap_argv(
    program: str,
    policy: Policy,
    argv: Sequence[str],
    cwd: str,
    *,
    started_fd: int | None = None,
    seccomp_fd: int | None = None,
    userns_fds: tuple[int, int] | None = None,
    decided: Sequence[Rule] | None = None,
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under ``policy`` (``decided``: its
    :func:`~sandbox.confine.verdict.rules`, when the caller has them).

    ``userns_fds``: (info, block): a user namespace of its own (root's too), its child's pid told on
    ``info`` and the setup held until a byte arrives on ``block`` (:mod:`sandbox.confine.nslimits`)."""
    # An IPC namespace of its own: the user's SysV shared memory, semaphores, message queues and POSIX
    # message queues are out of reach.
    out = [program, "--cap-drop", "ALL", "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    if userns_fds is not None:
        out += ["--unshare-user", "--info-fd", str(userns_fds[0]), "--userns-block-fd", str(userns_fds[1])]
    if not policy.network:
        out.append("--unshare-net")
    if not policy.interactive:
        out.append("--new-session")
    size = str(policy.limits.tmpfs_bytes)
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    for cover in _PROC_COVER:
        out += ["--ro-bind-try", cover, cover]
    mounts, read_only = _mounts(policy, size, decided)
    for args in mounts:
        out += args
    # /dev read-only: its device nodes still open for writing (a read-only mount does not stop a device
    # write), but nothing can be created there: no unbounded tmpfs to fill (/dev/shm has its size).
    for path in ("/dev", *read_only):  # read-only once what is bound back is mounted inside
        out += ["--remount-ro", path]
    out += ["--setenv", "TMPDIR", "/tmp", "--setenv", CONFINED_ENV, "1", "--chdir", cwd]
    if policy.git_config is not None:  # the agent's git settings, where only its git reads them
        out += ["--setenv", "GIT_CONFIG_GLOBAL", policy.git_config]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    # The shim tells the caller through ``started_fd`` (by path: dash cannot name fds above 9)
    # that the sandbox is set up, so a failed setup is never taken for the command's own exit.
    shim = _limits_shell(policy.limits) + _SHIM
    if started_fd is not None:
        shim = f"printf s >/proc/self/fd/{started_fd}; {shim}"
    if policy.proxy is not None:  # the forwarder to the run's proxy listens before the agent starts
        from sandbox.confine import bridge

        argv = bridge.wrap(argv, policy.proxy)
    out += ["--", "/bin/sh", "-c", shim, "sandbox-confined", *argv]
    return out


def _mounts(policy: Policy, size: str, decided: Sequence[Rule] | None = None) -> tuple[list[list[str]], list[str]]:
    """The mounts below ``/``, in order (the policy's :func:`~sandbox.confine.verdict.rules`, each
    made as bubblewrap makes it), and the tmpfs mounts to make read-only after them."""
    decided = rules(policy) if decided is None else decided
    hidden = [r.path for r in decided if r.kind == "hidden" and os.path.isdir(r.path)]
    covered = ["/tmp", *hidden, *(r.path for r in decided if r.kind in ("write", "write-try", "mask"))]
    shown = [r.path for r in decided if r.kind in ("read", "write", "write-try", "home", "protect", "config")]
    # A hidden directory inside another (an empty home) gets its tmpfs only where something is shown
    # above or below it: else the mount would only make an empty directory chain that names it
    # (another repository of the user's, by its run state). One in the private /tmp keeps its own
    # (read-only: a path there stays unwritable, as it is everywhere else).
    dests = [r.path for r in decided if r.kind not in ("tmp", "hidden", "mask")]
    needed = [h for h in hidden if not _below(h, [o for o in hidden if o != h]) or _near(h, dests)]
    out: list[list[str]] = []
    masked_dirs: list[str] = []
    for rule in decided:
        path = rule.path
        if rule.kind == "tmp":
            out.append(["--size", size, "--tmpfs", path])
        elif rule.kind == "hidden" and path in needed:
            out.append(["--size", _SMALL, "--tmpfs", path])
        elif rule.kind == "read" and _below(path, covered):
            # A mount costs bubblewrap time: one that would show what `/` shows read-only anyway is left out.
            out.append(["--ro-bind-try", path, path])
        elif rule.kind in ("write", "home"):
            out.append(["--bind", path, path])
        elif rule.kind == "write-try":
            out.append(["--bind-try", path, path])
        elif rule.kind == "protect":
            out.append(["--ro-bind-try", path, path])
        elif rule.kind == "config" and os.path.lexists(path):  # read-only below the writable agent state
            out.append(["--ro-bind", path, path])
        elif rule.kind == "copy" and rule.source and os.path.isfile(path) and os.path.isfile(rule.source):
            out.append(["--bind", rule.source, path])  # the run's own copy where the agent writes this state
        elif rule.kind in ("identity", "view") and rule.source:
            # The user's git identity alone as ~/.gitconfig; the run's own view of a file of the user's .git.
            out.append(["--ro-bind", rule.source, path])
        elif rule.kind == "mask" and (not _below(path, ["/tmp", *hidden]) or _below(path, shown)):
            if os.path.isdir(path):  # secrets: an empty directory or file in their place
                masked_dirs.append(path)
                out.append(["--size", _SMALL, "--tmpfs", path])
            elif os.path.exists(path):
                # An empty regular file, not /dev/null: libgit2 refuses a repository whose config is a
                # device ("config is locked"), and tools read an empty file as an empty setting.
                out.append(["--ro-bind", policy.empty_file or "/dev/null", path])
    return out, [*needed, *masked_dirs]


def _near(path: str, others: Sequence[str]) -> bool:
    """True when one of ``others`` is ``path``, lies below it or above it."""
    return any(_below(o, [path]) or _below(path, [o]) for o in others)


def _below(path: str, roots: Sequence[str]) -> bool:
    """True when ``path`` is one of ``roots`` or lies below one of them."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _limits_shell(limits: Limits) -> str:
    """``ulimit`` for the shim: inside the sandbox's user namespace the kernel counts RLIMIT_NPROC
    per namespace, so the bound is the sandbox's own (set outside, it would count every process of
    the user). dash spells the process limit ``-p``, bash ``-u``; ``-f`` counts 512-byte blocks."""
    out = ""
    if limits.max_processes is not None:
        n = limits.max_processes
        out += f"ulimit -u {n} 2>/dev/null || ulimit -p {n} 2>/dev/null; "
    if limits.max_file_bytes is not None:
        out += f"ulimit -f {max(limits.max_file_bytes // 512, 1)} 2>/dev/null; "
    if limits.max_open_files is not None:  # soft and hard: the command cannot raise it again
        out += f"ulimit -n {limits.max_open_files} 2>/dev/null; "
    return out


# A classic BPF program for seccomp: the kernel keyring calls (add_key, request_key, keyctl) fail with
# EPERM (as root the user keyring would otherwise be read with keyctl; a keyring is not namespaced by
# the mount or user namespace), and so do io_uring's (425-427 on every table: a large kernel surface
# no build tool needs, which libuv and others fall back from); with ``ioctls``, the terminal ioctls
# no program needs fail too (``_ALLOWED_TTY_IOCTLS``). Every other call is allowed. The filter sees the
# calling convention's architecture, not the binary's: a 64-bit process reaches the 32-bit table with
# ``int 0x80`` (``svc`` in AArch32 on arm64), so each machine lists its compat architecture too, with
# that table's numbers (ioctl is 54 on i386 and arm).
# Unknown machines get no filter (see :func:`seccomp_program`).
_X32 = 0x40000000
_URING = (425, 426, 427)  # io_uring_setup, io_uring_enter, io_uring_register
_X86_64_REFUSED = (248, 249, 250, *_URING)
_AUDIT_ARCH: dict[str, tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]] = {
    # (audit arch, ioctl numbers, refused numbers): x86-64 (and x32), i386
    "x86_64": (
        (0xC000003E, (16, _X32 | 514), (*_X86_64_REFUSED, *(_X32 | n for n in _X86_64_REFUSED))),
        (0x40000003, (54,), (286, 287, 288, *_URING)),
    ),
    # arm64, arm (EABI)
    "aarch64": ((0xC00000B7, (29,), (217, 218, 219, *_URING)), (0x40000028, (54,), (309, 310, 311, *_URING))),
}
# Of the terminal's own ioctls (type 'T', 0x54NN without size bits), only what a program reading and
# writing a terminal needs: termios, breaks and flushes, process groups, the window size, queue sizes,
# FIONBIO/FIOCLEX and friends (which share the range), a pty's peer. Refused: TIOCSTI and TIOCLINUX
# (typing into the user's shell), TIOCSETD (N_NULL on the user's terminal outlives the sandbox: it
# then reads and shows nothing), TIOCEXCL (the user's own tools then cannot open /dev/tty), serial
# and console settings.
_TTY_IOCTLS = (0x5400, 0xFFFFFF00)  # the family: cmd & mask == value
_ALLOWED_TTY_IOCTLS = (
    *range(0x5401, 0x540C),  # TCGETS .. TCFLSH
    *range(0x540D, 0x5412),  # TIOCNXCL, TIOCSCTTY, TIOCGPGRP, TIOCSPGRP, TIOCOUTQ
    0x5413, 0x5414, 0x541B, 0x5420, 0x5421, 0x5422, 0x5424, 0x5425,  # WINSZ, FIONREAD, PKT, FIONBIO, NOTTY, GETD, BRKP
    0x5427, 0x5428, 0x5429, 0x5441, 0x5450, 0x5451, 0x5452, 0x5460,  # (C)BRK, GSID, GPTPEER, FIO(N)CLEX, ASYNC, QSIZE
)  # fmt: skip
_LD_ABS, _JEQ_K, _RET_K, _AND_K = 0x20, 0x15, 0x06, 0x54
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM


def seccomp_program(machine: str | None = None, *, ioctls: bool = True) -> bytes | None:
    """The filter as bytes for ``bwrap --seccomp FD``; None on an architecture it does not know.

    ``ioctls``: refuse the terminal ioctls no program needs too, ``TIOCSTI``/``TIOCLINUX`` first (a
    command that shares the user's terminal)."""
    arches = _AUDIT_ARCH.get(machine or os.uname().machine)
    if arches is None:
        return None
    # Instructions as (code, jump-if-true label, jump-if-false label, k); labels resolved below.
    prog: list[tuple[int, str | None, str | None, int]] = [(_LD_ABS, None, None, 4)]  # seccomp_data.arch
    for i, (audit, _ioctl, _keys) in enumerate(arches):
        prog.append((_JEQ_K, f"arch{i}", "allow" if i == len(arches) - 1 else None, audit))
    labels: dict[str, int] = {}
    for i, (_audit, ioctl_numbers, key_numbers) in enumerate(arches):
        labels[f"arch{i}"] = len(prog)
        prog.append((_LD_ABS, None, None, 0))  # seccomp_data.nr
        checks = [(nr, "deny") for nr in key_numbers] + [(nr, "args") for nr in (ioctl_numbers if ioctls else ())]
        for j, (nr, target) in enumerate(checks):
            prog.append((_JEQ_K, target, "allow" if j == len(checks) - 1 else None, nr))
    labels["args"] = len(prog)
    prog.append((_LD_ABS, None, None, 24))  # low 32 bits of args[1]: the kernel reads cmd as unsigned int
    prog += [(_JEQ_K, "allow", None, cmd) for cmd in _ALLOWED_TTY_IOCTLS]
    prog += [(_AND_K, None, None, _TTY_IOCTLS[1]), (_JEQ_K, "deny", "allow", _TTY_IOCTLS[0])]
    labels.update(allow=len(prog), deny=len(prog) + 1)
    out = b""
    for index, (code, jt, jf, k) in enumerate(prog):
        t = labels[jt] - index - 1 if jt else 0
        f = labels[jf] - index - 1 if jf else 0
        out += struct.pack("=HBBI", code, t, f, k)
    out += struct.pack("=HBBI", _RET_K, 0, 0, _ALLOW) + struct.pack("=HBBI", _RET_K, 0, 0, _DENY)
    return out
