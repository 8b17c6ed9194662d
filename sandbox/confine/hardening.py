"""What the kernel adds to a bubblewrap sandbox: Landlock scoping, a pids/memory cgroup, and what is missing.

bubblewrap gives the mount view and the namespaces (:mod:`sandbox.confine.spawn`). Three things it
does not do are done here, each only where the machine allows it, and :func:`probe` says which:

* **Abstract Unix sockets.** They are named in the network namespace, not the file system, so a mount
  view cannot hide them and a sandbox that shares the host's network (``--network on``) could reach
  an outside abstract socket (a D-Bus bus, an X server). Landlock ABI 6 (Linux 6.12) scopes them:
  after ``landlock_restrict_self`` with ``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`` a process can connect
  only to abstract sockets made inside its own domain. The restriction is put on one short-lived
  thread of the caller, which then starts bubblewrap: credentials (and so the Landlock domain and
  ``no_new_privs``) are per thread, so the caller itself stays unrestricted and no extra fork is
  paid. A domain that handles no file-system access does not stop bubblewrap's mounts.
* **Processes and memory.** A cgroup of the sandbox's own (v2 where this process may write its
  cgroup, else the v1 ``pids`` and ``memory`` hierarchies, as root) with ``pids.max`` and a memory
  limit; bubblewrap is moved into it by a one-line ``sh`` before it execs (``echo 0 >`` the cgroup's
  ``tasks`` in v1, ``cgroup.procs`` in v2), so every process of the sandbox is born inside. In v1 the
  one-thread ``tasks`` file is the cheap door: a write to ``cgroup.procs`` takes the kernel's global
  thread-group lock and waits for an RCU grace period (measured 9-14 ms of every ``sandbox exec``),
  while moving the writing thread alone skips that lock (Linux 6.2+; the ``sh`` has one thread, so
  moving it is moving the process). ``RLIMIT_NPROC`` is set too (by the shim, inside the
  sandbox's user namespace, where the kernel counts it per namespace), but it binds nobody running as
  root, and without a cgroup a root caller's sandbox has no process bound: :func:`probe` says so.
* What cannot be had is reported, never faked: :func:`probe` lists it for ``sandbox doctor``.

Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture (new syscalls are unified)
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_PR_SET_NO_NEW_PRIVS = 38
#: The Landlock ABI that first scopes abstract Unix sockets.
SCOPE_ABI = 6
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PREFIX = "sandbox-"

_abi_cache: list[int] = []


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or not Linux)."""
    if _abi_cache:
        return _abi_cache[0]
    abi = 0
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)
        abi = max(int(got), 0)
    _abi_cache.append(abi)
    return abi


def _restrict_this_thread() -> None:
    """Scope abstract Unix sockets for the calling thread and what it starts (raises OSError)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # struct landlock_ruleset_attr { u64 handled_access_fs; u64 handled_access_net; u64 scoped; }
    attr = (ctypes.c_uint64 * 3)(0, 0, _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)


def scoped(start: Callable[[], T], hold: threading.Event) -> T:
    """Run ``start()`` (which starts bubblewrap) on a thread whose abstract Unix sockets are scoped.

    The thread lives on until ``hold`` is set (when the sandbox has ended): bubblewrap's
    ``--die-with-parent`` is tied to the thread that started it, so a thread that ended at once
    would kill the sandbox with SIGKILL as soon as bubblewrap armed it (a race the fast cgroup join
    made common), or, armed after the thread's end, leave a sandbox that outlives a killed caller.
    The caller's own threads are never restricted. Raises OSError when the kernel refuses the
    restriction (the caller then does not start the sandbox).
    """
    box: list[T] = []
    error: list[BaseException] = []
    ready = threading.Event()

    def body() -> None:
        try:
            _restrict_this_thread()
            box.append(start())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)
            return
        finally:
            ready.set()
        hold.wait()

    thread = threading.Thread(target=body, name="sandbox-landlock", daemon=True)
    thread.start()
    ready.wait()
    if error:
        raise error[0]
    return box[0]


# -- cgroups ------------------------------------------------------------------------------------


@dataclass
class Cgroups:
    """The cgroup directories made for one sandbox (removed by :meth:`remove` when it has ended)."""

    dirs: list[str] = field(default_factory=list)
    #: The file that moves a process in, per cgroup: ``tasks`` (v1: this thread only, the cheap one)
    #: or ``cgroup.procs`` (v2, where a thread cannot leave its process's domain).
    join_files: list[str] = field(default_factory=list)

    def join_argv(self) -> list[str]:
        """A prefix for the bubblewrap command line that moves it into every cgroup, then execs it."""
        if not self.join_files:
            return []
        moves = " && ".join(f'echo 0 >"${i + 1}"' for i in range(len(self.join_files)))
        argv = ["/bin/sh", "-c", f'{moves} && shift {len(self.join_files)} && exec "$@"', "sandbox-cgroup"]
        return argv + self.join_files

    def remove(self) -> None:
        """Remove the (now empty) cgroups; one still busy stays for the next sweep."""
        for path in self.dirs:
            with contextlib.suppress(OSError):
                os.rmdir(path)
        self.dirs = []
        self.join_files = []


def _own_cgroup(controller: str | None) -> str | None:
    """This process's cgroup directory for a v1 ``controller`` (None: the v2 one), when it exists."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _num, names, path = parts
        if controller is None and names == "":
            for base in (os.path.join(CGROUP_ROOT, "unified"), CGROUP_ROOT):
                candidate = os.path.join(base, path.lstrip("/"))
                if os.path.isfile(os.path.join(candidate, "cgroup.subtree_control")):
                    return candidate.rstrip("/")
        if controller is not None and controller in names.split(","):
            candidate = os.path.join(CGROUP_ROOT, controller, path.lstrip("/"))
            return candidate.rstrip("/") if os.path.isdir(candidate) else None
    return None


def _v2_has(parent: str, controller: str) -> bool:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control"), encoding="ascii") as fh:
            return controller in fh.read().split()
    except OSError:
        return False


def cgroup_parents() -> dict[str, str]:
    """Where a sandbox's cgroup can be made, per limit (``pids``, ``memory``): only writable places."""
    out: dict[str, str] = {}
    v2 = _own_cgroup(None)
    for controller in ("pids", "memory"):
        if v2 and _v2_has(v2, controller) and os.access(v2, os.W_OK):
            out[controller] = v2
            continue
        v1 = _own_cgroup(controller)
        if v1 and os.access(v1, os.W_OK) and os.path.isfile(os.path.join(v1, "cgroup.procs")):
            out[controller] = v1
    return out


def make_cgroups(max_pids: int | None, max_memory: int | None, *, memory_if_free: bool = False) -> Cgroups:
    """A cgroup per limit asked for that this machine lets us make; an empty :class:`Cgroups` else.

    ``memory_if_free``: bound the memory only where that costs no slow cgroup move (a v1 memory
    hierarchy, joined through its ``tasks``, or the v2 cgroup made for the pids limit anyway).
    """
    made = Cgroups()
    # Below root, RLIMIT_NPROC (set inside the sandbox's user namespace) already bounds the sandbox's
    # own processes; a pids cgroup is needed only where it binds nothing, and each costs a cgroup move.
    wanted = {"pids": max_pids if os.geteuid() == 0 else None, "memory": max_memory}
    parents = cgroup_parents()
    if memory_if_free and max_memory is not None and "memory" in parents:
        memory_parent = parents["memory"]
        shared = wanted["pids"] is not None and parents.get("pids") == memory_parent
        if not (_in_v1(memory_parent, "memory") or shared):
            wanted["memory"] = None
    v1_file = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}
    used: set[str] = set()
    for controller, parent in parents.items():
        if wanted[controller] is None or parent in used:
            continue
        used.add(parent)
        _sweep(parent)
        path = os.path.join(parent, CGROUP_PREFIX + os.urandom(6).hex())
        v1 = _in_v1(parent, controller)
        both = [("pids.max", max_pids), ("memory.max", max_memory)]
        limits = [(v1_file[controller], wanted[controller])] if v1 else both
        try:
            os.mkdir(path)
        except OSError:
            continue
        try:
            for name, value in limits:  # one v2 cgroup holds both limits
                if value is not None and os.path.exists(os.path.join(path, name)):
                    _write(os.path.join(path, name), value)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            continue
        made.dirs.append(path)
        made.join_files.append(os.path.join(path, "tasks" if v1 else "cgroup.procs"))
    return made


def _in_v1(parent: str, controller: str) -> bool:
    """True when ``parent`` lies in ``controller``'s own v1 hierarchy (else it is the v2 tree)."""
    hierarchy = os.path.join(CGROUP_ROOT, controller)
    return parent == hierarchy or parent.startswith(hierarchy + "/")


def _write(path: str, value: int) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(str(value))


#: A cgroup younger than this is never swept: another sandbox may be about to join it (it is empty
#: between its ``mkdir`` and bubblewrap's ``echo 0 > cgroup.procs``).
SWEEP_AGE = 60.0


def _sweep(parent: str) -> None:
    """Remove the empty cgroups of sandboxes that ended without removing theirs (killed callers)."""
    import time

    now = time.time()
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            if name.startswith(CGROUP_PREFIX):
                path = os.path.join(parent, name)
                with contextlib.suppress(OSError):
                    if now - os.stat(path).st_mtime > SWEEP_AGE:
                        os.rmdir(path)  # refused while a process is in it


# -- what this machine can enforce --------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What the kernel offers a sandbox here, and the sentences for what it does not."""

    landlock_abi: int
    cgroups: tuple[str, ...]
    root: bool
    missing: tuple[str, ...]


#: The Landlock ABI whose ``LANDLOCK_ACCESS_FS_RESOLVE_UNIX`` (Linux 7.1) decides ``connect`` to a socket's path.
RESOLVE_UNIX_ABI = 9


def later_sockets(abi: int) -> str:
    """The rule no backend holds yet, as ``sandbox doctor`` says it: a socket bound after a sandbox started.

    A mount view cannot hide what appears in a directory it shows after it is made, and ``connect`` needs no
    write access to a socket on a read-only mount. Landlock's rule for socket paths would hold it, but a
    domain that handles a file-system right forbids mounts, so it must be put on inside the sandbox once
    bubblewrap has made its mounts, by the command's first process: not done yet."""
    kernel = (
        "this kernel has it, and the sandbox does not use it yet"
        if abi >= RESOLVE_UNIX_ABI
        else f"this kernel's Landlock is ABI {abi}"
    )
    return (
        "a Unix socket bound after a sandbox started, in a directory it sees read-only (by a daemon started "
        "later), is reachable from it: each start masks the sockets bound before it; Landlock's rule for "
        f"socket paths (ABI {RESOLVE_UNIX_ABI}, Linux 7.1) would refuse it, and {kernel}"
    )


def probe() -> Probe:
    """Probe Landlock and the cgroups (no process is started); the gaps as whole sentences."""
    abi = landlock_abi()
    parents = cgroup_parents()
    root = os.geteuid() == 0
    missing = []
    if abi < SCOPE_ABI:
        missing.append(
            f"abstract Unix sockets are not scoped (Landlock ABI {abi}, {SCOPE_ABI} needed: Linux 6.12+); "
            "with --network on an agent can reach the host's abstract sockets"
        )
    if "pids" not in parents:
        who = (
            "running as root, RLIMIT_NPROC binds nothing: the number of processes is not bounded"
            if root
            else "the process bound is RLIMIT_NPROC only"
        )
        missing.append(f"no pids cgroup can be made here (no cgroup delegation to this user); {who}")
    if "memory" not in parents:
        missing.append(
            "no memory cgroup can be made here (no cgroup delegation): memory is bounded only by the tmpfs sizes"
        )
    return Probe(abi, tuple(sorted(parents)), root, tuple(missing))
