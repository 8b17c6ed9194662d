"""``sandbox run``: the agent runs in the worktree, changes are cut at quiet points, signals pass."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import git, sandbox_cmd, user_state


def log(repo: Path, run_id: str) -> list[dict[str, object]]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries: list[dict[str, object]] = json.loads(proc.stdout)
    return entries


def run_id_of(stderr: bytes) -> str:
    for line in stderr.decode().splitlines():
        if line.startswith("sandbox: started run "):
            return line.split()[3]
    raise AssertionError(stderr.decode())


def test_cuts_at_quiet_points_and_passes_the_exit_code(repo: Path) -> None:
    before = user_state(repo)
    # The agent waits for the first cut before its second change. It cannot see the run's refs (its git
    # directory is its own), so the test watches them in the user's repository and then says "go" on the
    # agent's standard input, which `sandbox run` hands through.
    script = "echo one > a.txt; read go; echo two > b.txt; pwd > where.txt; exit 3"
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [str(exe), "run", "--new", "--debounce", "0.3", "--", "sh", "-c", script],
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        started = b""
        while not started.startswith(b"sandbox: started run "):
            started = proc.stderr.readline()
            assert started, "sandbox run ended before it said which run it started"
        run_id = run_id_of(started)
        deadline = time.monotonic() + 60
        while git(repo, "rev-parse", f"refs/sandbox/{run_id}/head") == git(
            repo, "rev-parse", f"refs/sandbox/{run_id}/base"
        ):
            assert time.monotonic() < deadline, "the first quiet-point cut never came"
            time.sleep(0.05)
        _out, rest = proc.communicate(b"go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, rest
    err = rest.decode()
    for hint in (f"sandbox diff {run_id}", f"sandbox apply {run_id}", f"sandbox undo {run_id}"):
        assert hint in err
    entries = log(repo, run_id)
    assert [e["tool_name"] for e in entries] == ["agent_session", "agent_session"]
    files = [[f["path"] for f in e["files"]] for e in entries]  # type: ignore[attr-defined]
    assert files == [["a.txt"], ["b.txt", "where.txt"]]
    worktree = sandbox_cmd("path", run_id, cwd=repo).stdout.decode().strip()
    assert (Path(worktree) / "where.txt").read_text().strip() == os.path.realpath(worktree)
    assert user_state(repo) == before and not (repo / "a.txt").exists()


def test_reuses_a_run_and_starts_in_the_same_subdirectory(repo: Path) -> None:
    first = sandbox_cmd("run", "--", "true", cwd=repo)
    run_id = run_id_of(first.stderr)
    proc = sandbox_cmd("run", run_id, "--hooks", "none", "--", "sh", "-c", "pwd > here.txt", cwd=repo / "src")
    assert proc.returncode == 0, proc.stderr
    assert "started run" not in proc.stderr.decode()
    entries = log(repo, run_id)
    assert [f["path"] for f in entries[-1]["files"]] == ["src/here.txt"]  # type: ignore[index]


def test_missing_agent_is_127(repo: Path) -> None:
    proc = sandbox_cmd("run", "--", "no-such-agent-xyz", cwd=repo)
    assert proc.returncode == 127 and "command not found" in proc.stderr.decode()


def test_usage_errors(repo: Path) -> None:
    assert sandbox_cmd("run", cwd=repo).returncode == 2
    assert sandbox_cmd("run", "a", "b", "--", "true", cwd=repo).returncode == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded(repo: Path, tmp_path: Path, signum: int) -> None:
    # The agent says it is ready on stdout: confined, it cannot write outside its worktree.
    agent = (
        "import signal, sys, time\n"
        f"signal.signal({int(signum)}, lambda *a: sys.exit(7))\n"
        "open('partial.txt', 'w').write('work in progress')\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [str(exe), "run", "--", sys.executable, "-c", agent],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"  # bounded: the agent exits after 120 s
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    run_id = run_id_of(err)
    assert [f["path"] for e in log(repo, run_id) for f in e["files"]] == ["partial.txt"]  # type: ignore[attr-defined]
