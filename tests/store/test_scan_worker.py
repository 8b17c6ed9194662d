"""The scan's libgit2 status in a worker with a deadline (the host's: docs/design.md, "Reading what the
agent wrote").

libgit2 opens a file whose stat changed by name to hash it, holding Python's lock; an agent that swaps
such files with a FIFO in a loop makes it block (measured: 2 of 5 four-second loops of status hung).
In the host that stopped every run. The worker is killed at its deadline and the scan refused in one
sentence; each scan here ends within its deadline, whatever the racer does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.errors import SandboxError
from sandbox.store import scan
from tests.conftest import make_repo, scaled

FILES = 200
RACER = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir(sys.argv[1])
    names = [b"f%d.txt" % i for i in range(int(sys.argv[2]))]
    print("ready", flush=True)
    while True:
        for n in names:
            libc.renameat2(-100, n, -100, b"twin", 2)  # AT_FDCWD, RENAME_EXCHANGE
    """
)


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh-interpreter"])
def test_a_scan_raced_with_a_fifo_ends_within_its_deadline(tmp_path: Path, fork: bool) -> None:
    worktree = make_repo(tmp_path / "wt", {f"f{i}.txt": f"line {i}\n" for i in range(FILES)})
    time.sleep(1.1)  # past git's racy window: only the stat change below makes libgit2 hash them
    for i in range(FILES):
        os.utime(worktree / f"f{i}.txt", (1.9e9, 1.9e9))
    os.mkfifo(worktree / "twin")
    deadline = 3.0
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(worktree), str(FILES)], stdout=subprocess.PIPE)
    outcomes = []
    try:
        assert racer.stdout is not None and racer.stdout.readline() == b"ready\n"
        until = time.monotonic() + 6
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                scan.status_paths_in_worker(str(worktree), deadline=deadline, fork=fork)
                outcomes.append("scanned")
            except SandboxError as exc:
                outcomes.append("refused")
                assert "status of the worktree" in exc.message
            assert time.monotonic() - started < deadline + scaled(10)
    finally:
        racer.kill()
        racer.wait()
    assert len(outcomes) >= 3, outcomes
    found = scan.status_paths_in_worker(str(worktree), fork=fork)  # quiet again: a plain scan
    assert {f"f{i}.txt" for i in range(FILES)} - {"twin"} >= found - {"twin"}


def test_both_workers_say_the_same(tmp_path: Path) -> None:
    worktree = make_repo(tmp_path / "wt", {"kept.txt": "kept\n", "changed.txt": "before\n"})
    (worktree / "changed.txt").write_text("after\n")
    (worktree / "new.txt").write_text("new\n")
    assert scan.status_paths_in_worker(str(worktree), fork=True) == {"changed.txt", "new.txt"}
    assert scan.status_paths_in_worker(str(worktree), fork=False) == {"changed.txt", "new.txt"}
    os.mkfifo(worktree / ".gitignore")  # refused before libgit2 reads it, in one sentence, both ways
    said = []
    for fork in (True, False):
        with pytest.raises(SandboxError) as refused:
            scan.status_paths_in_worker(str(worktree), fork=fork)
        said.append(refused.value.message)
    assert said[0] == said[1] and ".gitignore" in said[0]


#: Scans in a loop in a process of one thread (so its workers are forks of it).
SCANNER = textwrap.dedent(
    """
    import sys
    from sandbox.store import scan
    print("ready", flush=True)
    while True:
        scan.status_paths_in_worker(sys.argv[1], fork=True)
    """
)


@pytest.mark.parametrize("how", ["killed", "interrupted"])
def test_a_forked_worker_never_outlives_its_parent(tmp_path: Path, how: str) -> None:
    """The forked worker holds copies of its parent's descriptors (a run's lock): stopped (as a FIFO
    would block it) when its parent is killed with -9, it is killed too, never left holding them; when
    its parent is interrupted (Ctrl-C), the parent kills it and ends, never waits on it for ever."""
    worktree = make_repo(tmp_path / "wt", {f"f{i}.txt": f"line {i}\n" for i in range(FILES)})
    scanner = subprocess.Popen([sys.executable, "-c", SCANNER, str(worktree)], stdout=subprocess.PIPE)
    stopped = None
    try:
        assert scanner.stdout is not None and scanner.stdout.readline() == b"ready\n"
        until = time.monotonic() + scaled(30)
        while stopped is None and time.monotonic() < until:
            for pid in _children(scanner.pid):
                os.kill(pid, signal.SIGSTOP)
                # Still its worker, stopped mid-scan past its set-up (it gave SIGINT back to the default
                # after asking to die with its parent; Python's own handler is the parent's).
                if pid in _children(scanner.pid) and not _catches_sigint(pid):
                    stopped = pid
                    break
                os.kill(pid, signal.SIGCONT)
        assert stopped is not None, "no worker of the scanner was seen"
        if how == "killed":
            scanner.kill()
        else:
            scanner.send_signal(signal.SIGINT)  # to the parent alone, as a terminal's would reach it first
        assert scanner.wait(timeout=scaled(10)) != 0
        until = time.monotonic() + scaled(10)
        while _alive(stopped):
            assert time.monotonic() < until, f"worker {stopped} outlived its parent"
            time.sleep(0.02)
    finally:
        scanner.kill()
        scanner.wait()
        if stopped is not None and _alive(stopped):
            os.kill(stopped, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _catches_sigint(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            caught = next(line for line in fh if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return True
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGINT - 1)))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


FORKABLE = textwrap.dedent(
    """
    import os, sys, tempfile, threading
    from sandbox.store import fsutil
    said = [fsutil.forkable()]  # the main thread alone
    fds = [os.open(tempfile.mkstemp()[1], os.O_RDWR) for _ in range(3)]
    fsutil.sync_together(fds)  # the fsync pool now has idle threads
    said.append(fsutil.forkable())
    other = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    other.start()
    said.append(fsutil.forkable())  # another thread might hold a lock the child needs
    box = []
    side = threading.Thread(target=lambda: box.append(fsutil.forkable()))
    side.start(); side.join()
    said.append(box[0])  # not from a thread other than the main one
    print(said)
    """
)


def test_a_process_forks_its_worker_only_when_no_other_thread_could_hold_a_lock() -> None:
    out = subprocess.run([sys.executable, "-c", FORKABLE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[True, True, False, False]"
