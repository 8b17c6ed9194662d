"""The supervisor between ``sandbox run`` and the agent: it owns the agent's whole process tree.

Run by :func:`sandbox.agent.launch.run_session` as ``python -I -c '<import sandbox.agent.reaper from ROOT, call
main>' ROOT --parent PID --report FILE --grace S -- AGENT ARGS...`` (standard library only, so it
starts in ~25 ms; ``python -m sandbox.agent.reaper`` works too). It:

* makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the agent
  starts that loses its parent (a tool that double-forks, calls ``setsid``, or whose agent died) is
  reparented to it rather than to init, so the agent's whole tree stays below it;
* asks for SIGTERM when ``sandbox run`` dies (``PR_SET_PDEATHSIG``), so an owner killed with -9
  still takes its agent down;
* starts the agent and passes it SIGTERM, SIGHUP and SIGINT as a terminal would, to the agent and
  the processes below it in its process group (SIGINT only when the terminal did not already send
  it to that group);
* when the agent ends, however it ends (kill -9 included), stops whatever is left below it:
  SIGTERM, then SIGKILL after ``--grace`` seconds, and reaps them; then writes what it stopped to
  the report file (JSON) and exits with the agent's exit code (128 + N for signal N).

Without ``PR_SET_CHILD_SUBREAPER`` (not Linux) it still runs the agent and reports
``"subreaper": false``; the session token lets :mod:`sandbox.agent.procs` find survivors anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from typing import Any, TypedDict

from sandbox.agent import procs

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
REPORT_VERSION = 1


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False


def _reap(block: bool) -> list[tuple[int, int]]:
    """Reap exited children: (pid, status) each; blocks for the first one when ``block``."""
    out: list[tuple[int, int]] = []
    flags = 0 if block else os.WNOHANG
    while True:
        try:
            pid, status = os.waitpid(-1, flags)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, status))
        flags = os.WNOHANG


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


class Stopped(TypedDict):
    """One process the reaper stopped after the agent ended: with ``TERM``, or ``KILL`` at last."""

    pid: int
    cmd: str
    how: str


class _ReportBase(TypedDict):
    version: int
    pid: int
    subreaper: bool
    stopped: list[Stopped]


class Report(_ReportBase, total=False):
    """The report the reaper writes (``--report FILE``), read by ``sandbox run`` after the agent."""

    exit: int
    error: str
    agent_pid: int


def _stop_tree(grace: float) -> list[Stopped]:
    """Stop every process left below this one: TERM, then KILL after ``grace`` s; reap them all."""
    me = os.getpid()
    how: dict[int, Stopped] = {}
    deadline = time.monotonic() + grace
    while True:
        _reap(block=False)
        left = procs.descendants(me)
        fresh = [p for p in left if p.pid not in how]
        for proc in fresh:
            how[proc.pid] = {"pid": proc.pid, "cmd": proc.cmd, "how": "TERM"}
        procs.signal_all(fresh, signal.SIGTERM)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    hard_deadline = time.monotonic() + 5
    while True:
        left = procs.descendants(me)
        if not left or time.monotonic() >= hard_deadline:
            break
        for proc in left:
            how.setdefault(proc.pid, Stopped(pid=proc.pid, cmd=proc.cmd, how="KILL"))["how"] = "KILL"
        procs.signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
        _reap(block=False)
    _reap(block=False)
    return list(how.values())


def _signal_agent(pid: int, signum: int) -> None:
    """Send ``signum`` as a terminal would: to the agent and the processes of its process group.

    Agents may ignore a signal themselves and count on their children getting it from the
    terminal (Gemini CLI's launcher relaunches itself as a child and ignores SIGINT, SIGTERM and
    SIGHUP), so signalling the agent's pid alone would not stop it. Its whole process group is not
    signalled either: it is this process's and ``sandbox run``'s too. Tools the agent put in a
    process group of their own are left to the agent, as a terminal would.
    """
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    targets = [pid]
    for proc in procs.descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(proc.pid) == group:
                targets.append(proc.pid)
    for target in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signum)


def _write_report(path: str, data: Report) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    """Parse ``--parent PID --report FILE --grace S -- CMD...`` and supervise CMD (see the module)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    opts = dict(zip(argv[:cut:2], argv[1:cut:2], strict=False))
    command = argv[cut + 1 :]
    report = opts.get("--report")
    grace = float(opts.get("--grace", "3"))
    parent = int(opts.get("--parent", "0"))
    if not command or not report:
        sys.stderr.write("usage: python -m sandbox.agent.reaper --report FILE [--grace S] [--parent PID] -- CMD...\n")
        return 2
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    data = Report(version=REPORT_VERSION, pid=os.getpid(), subreaper=subreaper, stopped=[])
    if parent and os.getppid() != parent:
        data["exit"] = 1
        data["error"] = "sandbox run ended before the agent started"
        _write_report(report, data)
        return 1
    agent: list[int] = []
    stop_requested: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        if signum != signal.SIGINT:
            stop_requested.append(signum)
        if signum == signal.SIGINT and _foreground():
            return  # the terminal sent Ctrl-C to the whole foreground group, the agent included
        if agent:
            _signal_agent(agent[0], signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)
    try:
        # Python ignores SIGPIPE (and SIGXFSZ); the agent gets the defaults back, as subprocess does.
        defaults = [sig for sig in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if sig]
        agent.append(os.posix_spawnp(command[0], command, dict(os.environ), setsigdef=defaults))
    except OSError as exc:
        import errno

        code = 127 if exc.errno == errno.ENOENT else 126
        data["exit"] = code
        data["error"] = f"{command[0]}: {exc.strerror}"
        _write_report(report, data)
        return code
    if stop_requested:  # a signal came before the agent existed
        _signal_agent(agent[0], stop_requested[0])
    status: int | None = None
    while status is None:
        reaped = _reap(block=True)
        if not reaped:
            break  # no children at all: cannot happen while the agent lives
        for pid, st in reaped:
            if pid == agent[0]:
                status = st
    code = _exit_code(status) if status is not None else 1
    data["agent_pid"] = agent[0]
    data["exit"] = code
    data["stopped"] = _stop_tree(grace)
    _write_report(report, data)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
