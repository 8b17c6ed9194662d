"""``sandbox exec`` without a host, ``sandbox resume`` and the MCP server's ``run_command`` scan as the host
does: libgit2's status in a child process killed at its deadline (#32 leftovers;
:func:`sandbox.store.scan.status_paths_in_worker`).

libgit2 opens a file whose stat changed by name to hash it, holding Python's lock; an agent that swaps
such files with a real FIFO in a loop makes it block for ever. In the command's own process that hung
``exec`` (and ``resume``) with no way out, not even Ctrl-C. Each one here, run in a loop in a process of
its own while the racer runs, must end within the (shortened) deadline.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import make_repo, sandbox_cmd, scaled

FILES = 400
DEADLINE = 2.0
RACER = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir(sys.argv[1])
    names = [b"f%d.txt" % i for i in range(int(sys.argv[2]))]
    print("ready", flush=True)
    while True:
        for n in names:  # each file a FIFO for a moment, then itself again
            libc.renameat2(-100, n, -100, b"twin", 2)  # AT_FDCWD, RENAME_EXCHANGE
            libc.renameat2(-100, n, -100, b"twin", 2)
    """
)
#: Runs exec (or resume) in a loop for some seconds, one line per end; the deadline shortened to fit a test.
LOOP = textwrap.dedent(
    """
    import json, sys, time
    from sandbox.store import scan
    scan.WORKER_DEADLINE = float(sys.argv[3])
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run
    from sandbox.store.project import Project
    project, _workdir, _ = Project.discover(sys.argv[1])
    run = Run.open(project, sys.argv[2])
    until = time.monotonic() + float(sys.argv[5])
    while time.monotonic() < until:
        try:
            if sys.argv[4] == "exec":
                from sandbox.agent.execute import execute
                out = execute(run, ["true"], use_host=False)
                said = out.unrecorded or out.entry.status.value
            elif sys.argv[4] == "mcp":
                from sandbox.mcp.state import Settings
                from sandbox.mcp.workspace import Workspace
                ws = Workspace(project, None, Settings(data_root=project.data_root or ""))
                ws.open_run(run.run_id)
                answer = ws.run_command("true")
                said = answer.error or answer.status
            else:
                from sandbox.recovery.resume import resume
                said = resume(run).note or "resumed"
        except SandboxError as exc:
            said = exc.message
        print(json.dumps(said), flush=True)
    """
)


@pytest.mark.parametrize("what", ["exec", "resume", "mcp"])
def test_a_scan_raced_with_a_fifo_ends_within_its_deadline(tmp_path: Path, what: str) -> None:
    files = {f"f{i}.txt": f"line {i:04d}\n" for i in range(FILES)}
    source = make_repo(tmp_path / "source", files)
    started = sandbox_cmd("start", "--json", cwd=source)
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    worktree = Path(info["worktree"])
    time.sleep(1.1)  # past git's racy window: only the stat change below makes libgit2 hash them
    for name in files:
        os.utime(worktree / name, (1.9e9, 1.9e9))
    os.mkfifo(worktree / "twin")
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(worktree), str(FILES)], stdout=subprocess.PIPE)
    loop = None
    said: list[str] = []
    try:
        assert racer.stdout is not None and racer.stdout.readline() == b"ready\n"
        argv = [sys.executable, "-c", LOOP, str(worktree), info["run"], str(DEADLINE), what, "12"]
        loop = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert loop.stdout is not None
        poller = select.poll()
        poller.register(loop.stdout, select.POLLIN)
        while True:
            # One end per deadline (and the start of a command, on a loaded machine), or it hung.
            if not poller.poll(scaled(DEADLINE + 20) * 1000):
                pytest.fail(f"{what} blocked on the racing FIFO (after {said})")
            line = loop.stdout.readline()
            if not line:
                break
            said.append(json.loads(line))
            if _killed_at_deadline(said[:-1]):
                # A scan was killed at its deadline and the next command ended too: the case this is about,
                # shown (12 s of the racer's busy loop otherwise, one core each, ~3% of the suite's CPU).
                break
    finally:
        racer.kill()
        racer.wait()
        if loop is not None:
            loop.kill()
            loop.wait()
    assert loop.returncode in (0, -9), loop.stderr.read() if loop.stderr else b""
    assert said, "nothing ended"


def _killed_at_deadline(said: list[str]) -> bool:
    return any(f"took more than {DEADLINE:g} s" in line for line in said)
