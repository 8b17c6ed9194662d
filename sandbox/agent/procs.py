"""Finding and stopping the processes of an agent session (Linux ``/proc``; standard library only).

``sandbox run`` gives every agent session a random token, exported to the agent as
``SANDBOX_SESSION``. Every process the agent starts inherits it in its initial environment, which
``/proc/<pid>/environ`` keeps for the life of the process: a tool that calls ``setsid``, double-forks,
or is reparented to init after ``sandbox run`` itself was killed still carries it. That makes the
token (recorded in each call's ``started`` event, with the supervisor's pid and start time) enough to
find a session's survivors later, from another process, with no risk of mistaking a reused pid for
one of them: a new process with the same pid does not have the token.

Elsewhere (no ``/proc``) nothing is found, and callers say so rather than guess.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

ENV_VAR = "SANDBOX_SESSION"
PROC = "/proc"
#: ``<run dir>/session-<pid of sandbox run>.json``: the supervisor's report (:mod:`sandbox.agent.reaper`),
#: read and removed by ``sandbox run``; one left behind means ``sandbox run`` died first, and
#: ``sandbox resume`` records it.
SESSION_REPORT_PREFIX = "session-"


@dataclass(frozen=True)
class Proc:
    """One live process: its pid, start time (clock ticks since boot) and command line."""

    pid: int
    start: int
    cmd: str


def available() -> bool:
    """True when processes can be found here (a Linux ``/proc``)."""
    return os.path.isdir(os.path.join(PROC, "self"))


def boot_id() -> str | None:
    """This boot's id, or None without one: processes (and start times) of an earlier boot are not this one's."""
    try:
        with open(os.path.join(PROC, "sys/kernel/random/boot_id"), encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of its stat), or None when gone."""
    try:
        with open(os.path.join(PROC, str(pid), "stat"), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        if fields[0] == b"Z":  # a zombie has already ended; only its exit status is left
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def parent(pid: int) -> int | None:
    """The parent pid of ``pid``, or None when it is gone."""
    try:
        with open(os.path.join(PROC, str(pid), "stat"), "rb") as fh:
            data = fh.read()
        return int(data[data.rfind(b")") + 2 :].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def command(pid: int) -> str:
    """A one-line command line for ``pid`` (at most 200 characters; empty when unreadable)."""
    try:
        with open(os.path.join(PROC, str(pid), "cmdline"), "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


def token_of(pid: int) -> str | None:
    """The session token ``pid`` was started with (``SANDBOX_SESSION``), or None."""
    try:
        with open(os.path.join(PROC, str(pid), "environ"), "rb") as fh:
            env = fh.read()
    except OSError:  # gone, or another user's process: not ours either way
        return None
    prefix = f"{ENV_VAR}=".encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None


def session_of(pid: int, limit: int = 64) -> str | None:
    """The ``sandbox run`` session ``pid`` belongs to: the token of its highest ancestor (itself
    included) started with one, or None.

    A process chooses its own environment and its children's, never its ancestors': the session's
    first process (the supervisor, or bubblewrap) was given its token by ``sandbox run``, which runs
    outside the session, so a hook cannot claim another session by setting ``SANDBOX_SESSION``.
    A process between them that was started without it (Codex starts its MCP servers with an
    environment of its own) does not cut the line: the call was then bound to no session, and one
    that Ctrl-C stopped was left ``started``.
    """
    found: str | None = None
    seen: set[int] = set()
    while pid > 0 and pid not in seen and len(seen) < limit:
        seen.add(pid)
        token = token_of(pid)
        if token is not None:
            found = token
        up = parent(pid)
        if up is None:
            break
        pid = up
    return found


def sandbox_own(pid: int) -> bool:
    """True for a bubblewrap process of the session's own sandbox (the one ``sandbox run`` started,
    or its init in the new PID namespace), never the agent's: its ``exe`` is bwrap and it is at
    most the first process of one nested PID namespace.

    A process that is exiting has no ``exe`` any more (the kernel dropped its memory first): its name
    (``comm``, kept until it is reaped) tells then; bubblewrap going away as the sandbox ends was
    reported as a process the agent had left running."""
    try:
        with open(os.path.join(PROC, str(pid), "status"), encoding="ascii", errors="replace") as fh:
            status = fh.read()
    except OSError:
        return False
    try:
        name = os.path.basename(os.readlink(os.path.join(PROC, str(pid), "exe"))).split(" ")[0]
    except OSError:
        name = next((line.split(None, 1)[1].strip() for line in status.splitlines() if line.startswith("Name:")), "")
    if name != "bwrap":
        return False
    nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    return len(nspid) == 1 or (len(nspid) == 2 and nspid[-1] == "1")


def find_any(tokens: set[str], exclude: set[int] | None = None) -> list[tuple[str, Proc]]:
    """Live processes started with any of the session tokens, with their token (one pass over /proc)."""
    skip = (exclude or set()) | {os.getpid()}
    found = []
    for pid in _pids():
        if pid in skip:
            continue
        token = token_of(pid)
        if token is None or token not in tokens:
            continue
        start = start_time(pid)
        if start is not None:
            found.append((token, Proc(pid, start, command(pid))))
    return sorted(found, key=lambda item: item[1].pid)


def find(token: str, exclude: set[int] | None = None) -> list[Proc]:
    """Live processes started with the session token (zombies and ``exclude`` left out)."""
    return [proc for _token, proc in find_any({token}, exclude)]


def descendants(root: int) -> list[Proc]:
    """Live descendants of ``root`` (not ``root`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        ppid = parent(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    out: list[Proc] = []
    queue = list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        start = start_time(pid)
        if start is not None:
            out.append(Proc(pid, start, command(pid)))
        queue.extend(children.get(pid, []))
    return out


def alive(proc: Proc) -> bool:
    """True while ``proc`` runs (the same pid with the same start time: not a reused pid)."""
    return start_time(proc.pid) == proc.start


def signal_all(procs: list[Proc], signum: int) -> None:
    """Send ``signum`` to each process that is still the one we found."""
    for proc in procs:
        if alive(proc):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signum)


def stop(procs: list[Proc], grace: float = 3.0) -> list[tuple[Proc, str]]:
    """Stop ``procs``: SIGTERM, then SIGKILL to those still running after ``grace`` seconds.

    Returns each process with how it ended (``TERM`` or ``KILL``). Bounded: waits at most
    ``grace`` + 5 seconds.
    """
    how: dict[int, str] = {}
    signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in procs):
        time.sleep(0.05)
    for proc in procs:
        how[proc.pid] = "KILL" if alive(proc) else "TERM"
    signal_all(procs, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in procs):
        time.sleep(0.05)
    return [(p, how[p.pid]) for p in procs]


def pid_namespace(pid: str) -> str | None:
    """The pid namespace of process ``pid`` (``self`` for this one) as ``/proc`` names it, or None."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
