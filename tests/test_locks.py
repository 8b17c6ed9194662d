"""The run and tree locks: exclusive, released by a killed holder, safe when their file is removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox.errors import LockedError
from sandbox.locks import file_lock


def test_lock_is_exclusive_and_times_out(tmp_path: Path) -> None:
    path = str(tmp_path / "d" / "x.lock")
    with file_lock(path, "Thing"), pytest.raises(LockedError, match="Thing is locked"), file_lock(path, "Thing", 0.2):
        pass


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    code = (
        "from sandbox.locks import file_lock\nimport time\n"
        f"with file_lock({path!r}, 'x'):\n print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with file_lock(path, "x", timeout=5):
        pass


def test_removing_the_lock_file_while_held_never_lets_two_holders_in(tmp_path: Path) -> None:
    """gc removes a dead run's directory while holding its lock; a waiter must re-lock the new file."""
    path = str(tmp_path / "run" / "lock")
    inside = 0
    overlap = []
    guard = threading.Lock()

    def hold(remove: bool) -> None:
        nonlocal inside
        with file_lock(path, "Run", timeout=10):
            with guard:
                inside += 1
                overlap.append(inside)
            time.sleep(0.05)
            if remove:
                os.unlink(path)
                os.rmdir(os.path.dirname(path))
            with guard:
                inside -= 1

    threads = [threading.Thread(target=hold, args=(i % 3 == 0,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert max(overlap) == 1
