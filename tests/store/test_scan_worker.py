"""The scan's libgit2 status in a worker with a deadline (the host's: docs/design.md, "Reading what the
agent wrote").

libgit2 opens a file whose stat changed by name to hash it, holding Python's lock; an agent that swaps
such files with a FIFO in a loop makes it block (measured: 2 of 5 four-second loops of status hung).
In the host that stopped every run. The worker is killed at its deadline and the scan refused in one
sentence; each scan here ends within its deadline, whatever the racer does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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


def test_a_scan_raced_with_a_fifo_ends_within_its_deadline(tmp_path: Path) -> None:
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
        until = time.monotonic() + 10
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                scan.status_paths_in_worker(str(worktree), deadline=deadline)
                outcomes.append("scanned")
            except SandboxError as exc:
                outcomes.append("refused")
                assert "status of the worktree" in exc.message
            assert time.monotonic() - started < deadline + scaled(10)
    finally:
        racer.kill()
        racer.wait()
    assert len(outcomes) >= 3, outcomes
    found = scan.status_paths_in_worker(str(worktree))  # quiet again: a plain scan
    assert {f"f{i}.txt" for i in range(FILES)} - {"twin"} >= found - {"twin"}
