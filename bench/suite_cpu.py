"""Where the test suite's CPU goes: seconds of CPU by command name, for one command's whole process tree.

    python -m bench.suite_cpu [--out FILE] [--top N] [-- COMMAND...]

COMMAND (by default the suite as ``make test`` runs it on two workers: ``python -m pytest -q -n 2 --dist
loadgroup``) runs under Linux process accounting (``accton``, so as root, with the ``acct`` package), as a
child of a *child subreaper*: a process that daemonizes (the repository's host, ``sandbox serve``) comes
back to it instead of to init, so its record still belongs to the tree. Other work on the machine is left
out by following each record's parent (matched by pid and start time), which CPU seconds, unlike wall time,
let one compare across runs on a loaded machine. When a cpuacct cgroup can be made, its total (every
process of the tree, to the nanosecond) is printed too: accounting counts whole 10 ms ticks, so thousands
of short processes (``git``) show as less than they cost, and the difference is theirs.

A name with ``(fork)`` is a process that never exec'd: forked children of ``tests/cliserver.py``
(``python(fork)``), the detached host (``sandbox(fork)``), bubblewrap's init in the sandbox.
Accounting is machine-wide and one file at a time: a second user of ``accton`` stops this one's.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: ``struct acct_v3`` (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
#: utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm.
_RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
_AFORK = 0x01
_PR_SET_CHILD_SUBREAPER = 36
_CGROUP = Path("/sys/fs/cgroup/cpuacct")

DEFAULT = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]


def _comp(value: int) -> int:
    """A ``comp_t``: 13 bits of mantissa, 3 of base-8 exponent, in ticks of 1/100 s."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def records(path: Path) -> list[tuple[int, int, int, float, float, str]]:
    """(pid, ppid, start s, elapsed s, cpu s, name) of every v3 record."""
    data = path.read_bytes()
    out = []
    for offset in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        row = _RECORD.unpack_from(data, offset)
        if row[1] != 3:
            continue
        name = row[-1].split(b"\0")[0].decode(errors="replace") + ("(fork)" if row[0] & _AFORK else "")
        out.append((row[6], row[7], row[8], row[9] / 100.0, (_comp(row[10]) + _comp(row[11])) / 100.0, name))
    return out


def tree_of(rows: list[tuple[int, int, int, float, float, str]], root: int) -> list[int]:
    """Indexes of the records that descend from ``root``: each parent is the record of that pid alive at the
    child's start (pids are reused: 32k of them on a machine that starts 100k processes an hour)."""
    by_pid: dict[int, list[int]] = collections.defaultdict(list)
    for i, row in enumerate(rows):
        by_pid[row[0]].append(i)
    memo: dict[int, bool] = {}

    def mine(i: int) -> bool:
        chain = []
        verdict = False
        while True:
            if i in memo:
                verdict = memo[i]
                break
            chain.append(i)
            ppid, start = rows[i][1], rows[i][2]
            if ppid == root:
                verdict = True
                break
            parents = [j for j in by_pid.get(ppid, ()) if rows[j][2] <= start + 1 <= rows[j][2] + rows[j][3] + 2]
            if not parents or len(chain) > 500 or parents[-1] == i:
                break
            i = parents[-1]
        for j in chain:
            memo[j] = verdict
        return verdict

    return [i for i in range(len(rows)) if mine(i)]


def _enter_cgroup(name: str) -> Path | None:
    group = _CGROUP / name
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        (group / "cpuacct.usage").write_text("0")
    except OSError:
        return None
    return group


def run(command: list[str], acct_file: Path) -> tuple[int, float, float | None]:
    """``command`` under accounting, as this process's child, this process a subreaper: (exit code, wall s,
    the cgroup's CPU s or None)."""
    group = _enter_cgroup(f"suite-cpu-{os.getpid()}")
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    subprocess.run(["accton", str(acct_file)], check=True, stdout=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        child = subprocess.Popen(command)
        code = child.returncode = _wait_reaping(child.pid)
        wall = time.monotonic() - started
        _reap_orphans(grace=20.0)
    finally:
        subprocess.run(["accton", "off"], check=False, stdout=subprocess.DEVNULL)
    cpu = None
    if group is not None:
        cpu = int((group / "cpuacct.usage").read_text()) / 1e9
        try:  # out of it, and it removed (a cgroup with no process in it)
            (_CGROUP / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass
    return code, wall, cpu


def _wait_reaping(pid: int) -> int:
    """Wait for the child ``pid``, reaping every orphan that comes back to us meanwhile, as init would: a
    killed host left a zombie, and a test waiting for it to be gone (``kill -0``) waited forever."""
    while True:
        got, status = os.waitpid(-1, 0)
        if got == pid:
            return os.waitstatus_to_exitcode(status)


def _reap_orphans(grace: float) -> None:
    """Reap what came back to us (as init would), for at most ``grace`` s after the command ended."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.1)


def main() -> None:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="keep the accounting file here (default: a temporary one)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("command", nargs="*", help="the command (after --); default: the suite on 2 workers")
    args = parser.parse_args()
    command = args.command or DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        acct_file = args.out or Path(tmp) / "acct"
        acct_file.touch()
        code, wall, cgroup_cpu = run(command, acct_file)
        rows = records(acct_file)
    mine = tree_of(rows, os.getpid())
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for i in mine:
        totals[rows[i][5]][0] += 1
        totals[rows[i][5]][1] += rows[i][4]
    counted = sum(cpu for _n, cpu in totals.values())
    print(f"{'CPU s':>9} {'processes':>9}  command name")
    for name, (count, cpu) in sorted(totals.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{cpu:9.1f} {int(count):9d}  {name}")
    print(f"{counted:9.1f} {len(mine):9d}  in all (accounting, whole ticks)")
    if cgroup_cpu is not None:
        print(f"{cgroup_cpu:9.1f} {'':9}  cgroup total (the difference: processes shorter than a tick, mostly git)")
    print(f"wall {wall:.1f} s, exit code {code}")
    sys.exit(code)


if __name__ == "__main__":
    main()
