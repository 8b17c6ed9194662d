"""A terminal that hangs up under a command (its window closed, its tmux pane killed) is not a crash of ours.

``sandbox run`` writes what happened after its agent ends; when the terminal is gone by then, the write
fails with EIO. The run's record is whole already: the command ends as a hang-up would (129), with no
crash log left in the temp directory for a terminal no one reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SANDBOX = str(Path(sys.executable).parent / "sandbox")


def test_a_hung_up_terminal_ends_sandbox_run_without_a_crash_log(repo: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    temp = tmp_path / "temp"
    temp.mkdir()
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [
            SANDBOX,
            "run",
            "--new",
            "--isolate",
            "off",
            "--",
            "sh",
            "-c",
            f"while [ ! -e {go} ]; do sleep 0.05; done; echo done > done.txt",
        ],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    os.close(slave)
    deadline = time.monotonic() + 60
    seen = b""
    while b"sandbox: started run " not in seen:  # the run started (its first line), so the agent waits for `go`
        assert proc.poll() is None and time.monotonic() < deadline, seen
        seen += os.read(master, 4096)
    os.close(master)  # the terminal hangs up
    go.touch()
    assert proc.wait(timeout=60) == 129
    assert list(temp.glob("sandbox-crash-*")) == []
