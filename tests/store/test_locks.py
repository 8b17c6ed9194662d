"""The run and tree locks: exclusive, released by a killed holder, safe when their file is removed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox.errors import LockedError
from sandbox.store.locks import file_lock, remove_locked_dir


def test_lock_is_exclusive_and_times_out(tmp_path: Path) -> None:
    path = str(tmp_path / "d" / "x.lock")
    with file_lock(path, "Thing"), pytest.raises(LockedError, match="Thing is locked"), file_lock(path, "Thing", 0.2):
        pass


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    code = (
        "from sandbox.store.locks import file_lock, remove_locked_dir\nimport time\n"
        f"with file_lock({path!r}, 'x'):\n print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with file_lock(path, "x", timeout=5):
        pass


def test_removing_the_lock_file_while_held_never_lets_two_holders_in(tmp_path: Path) -> None:
    """gc removes a dead run's directory as its last act under the lock; a waiter re-locks a fresh file.

    No two holders are ever inside at once, and what a new holder writes in the directory survives
    the previous holder's removal.
    """
    directory = str(tmp_path / "run")
    path = os.path.join(directory, "lock")
    inside = 0
    overlap = []
    lost = []
    guard = threading.Lock()

    errors: list[BaseException] = []

    def hold(index: int) -> None:
        try:
            work(index)
        except BaseException as exc:  # a holder whose directory vanished under it
            errors.append(exc)

    def work(index: int) -> None:
        nonlocal inside
        with file_lock(path, "Run", timeout=20):
            with guard:
                inside += 1
                overlap.append(inside)
            data = os.path.join(directory, "data")
            os.makedirs(data, exist_ok=True)
            for n in range(200):  # enough files that removing them takes a while
                with open(os.path.join(data, f"{index}-{n}"), "w") as fh:
                    fh.write("x")
            mine = os.path.join(data, f"work-{index}")
            with open(mine, "w") as fh:
                fh.write("x")
            time.sleep(0.02)
            if not os.path.exists(mine):
                lost.append(index)
            with guard:
                inside -= 1
            if index % 3 == 0:
                remove_locked_dir(directory)

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert max(overlap) == 1
    assert lost == []


def test_taking_the_lock_while_its_directory_is_removed_and_made_again(tmp_path: Path) -> None:
    """gc's remove_locked_dir racing a start: makedirs may see the directory exist and then vanish.

    The lock is taken on a fresh directory instead of failing with FileExistsError (seen in CI).
    """
    directory = tmp_path / "runs" / "r1"
    path = str(directory / "lock")
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.mkdir(directory)
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    (tmp_path / "runs").mkdir()
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        deadline = time.monotonic() + 2.0
        taken = 0
        while time.monotonic() < deadline:
            with file_lock(path, "Run r1", timeout=5):
                taken += 1
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        stop.set()
        thread.join()
    assert taken > 0
