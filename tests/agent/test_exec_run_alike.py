"""``sandbox exec`` and ``sandbox run`` behave alike: the subdirectory you are in, a command that
cannot start, ``--json``, and a session interrupted with Ctrl-C (a real SIGINT)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import sandbox_cmd, scaled, write


def log(repo: Path, run_id: str) -> list[dict[str, object]]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries: list[dict[str, object]] = json.loads(proc.stdout)
    return entries


def started(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return data["run"], Path(data["worktree"])


def test_exec_keeps_the_subdirectory_of_the_worktree_or_of_your_tree(repo: Path) -> None:
    run_id, worktree = started(repo)
    inside = sandbox_cmd("exec", "--", "sh", "-c", "pwd > here.txt", cwd=worktree / "src")
    assert inside.returncode == 0, inside.stderr
    assert (worktree / "src" / "here.txt").read_text().strip() == os.path.realpath(worktree / "src")
    mapped = sandbox_cmd("exec", run_id, "--", "sh", "-c", "pwd > mapped.txt", cwd=repo / "src")
    assert mapped.returncode == 0, mapped.stderr
    assert (worktree / "src" / "mapped.txt").exists()
    entries = log(repo, run_id)
    assert [e["result"]["cwd"] for e in entries] == ["src", "src"]  # type: ignore[index]
    assert all(set(e["input"]) == {"argv", "isolation"} for e in entries)  # type: ignore[arg-type]  # not cwd
    top = sandbox_cmd("exec", run_id, "--", "sh", "-c", "pwd > top.txt", cwd=repo)
    assert top.returncode == 0 and (worktree / "top.txt").exists()
    assert "cwd" not in log(repo, run_id)[-1]["result"]  # type: ignore[operator]


def test_exec_of_a_command_that_cannot_start_says_so_and_records_why(repo: Path) -> None:
    run_id, worktree = started(repo)
    proc = sandbox_cmd("exec", "--", "no-such-command-xyz", "arg", cwd=worktree)
    assert proc.returncode == 127
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandbox: no-such-command-xyz: command not found; recorded as call_")
    write(worktree, "script.sh", "#!/bin/sh\necho hi\n", mode=0o644)
    proc = sandbox_cmd("exec", "--", "./script.sh", cwd=worktree)
    assert proc.returncode == 126
    assert "./script.sh: permission denied (it is not executable)" in proc.stderr.decode()
    entries = log(repo, run_id)
    assert [e["status"] for e in entries[:2]] == ["failed", "failed"]
    assert entries[0]["error"] == "the command could not start: no-such-command-xyz: command not found."
    # A command that starts and exits 127 itself is not mistaken for one that could not start.
    proc = sandbox_cmd("exec", "--", "sh", "-c", "exit 127", cwd=worktree)
    assert proc.returncode == 127 and "could not start" not in proc.stderr.decode()
    assert log(repo, run_id)[-1]["error"] == "exit code 127"


def test_exec_json_keeps_stdout_for_the_call(repo: Path) -> None:
    _run_id, worktree = started(repo)
    proc = sandbox_cmd("exec", "--json", "--", "sh", "-c", "echo out; echo err >&2; echo x > f.txt", cwd=worktree)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "succeeded" and data["exit_code"] == 0 and data["files"] == 1
    assert data["call_id"].startswith("call_") and data["cannot_start"] is None
    assert proc.stderr.decode().splitlines() == ["out", "err"]


def test_run_keeps_the_worktree_subdirectory_and_refuses_an_agent_that_cannot_start(repo: Path) -> None:
    run_id, worktree = started(repo)
    proc = sandbox_cmd("run", "--hooks", "none", "--", "sh", "-c", "pwd > where.txt", cwd=worktree / "src")
    assert proc.returncode == 0, proc.stderr
    assert (worktree / "src" / "where.txt").read_text().strip() == os.path.realpath(worktree / "src")
    proc = sandbox_cmd("run", "--new", "--", "no-such-agent-xyz", cwd=repo)
    assert proc.returncode == 127
    assert proc.stderr.decode() == "sandbox: no-such-agent-xyz: command not found.\n"
    listed = json.loads(sandbox_cmd("list", "--json", cwd=repo).stdout)
    assert [r["run"] for r in listed] == [run_id]  # no run was started for it


def test_run_json_summary_on_stdout(repo: Path) -> None:
    proc = sandbox_cmd("run", "--json", "--", "sh", "-c", "echo said; echo x > j.txt", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["exit_code"] == 0 and data["interrupted"] is None and data["changed_paths"] == 1
    assert "said" in proc.stderr.decode()


def ctrl_c_run(repo: Path, agent: str) -> bytes:
    """``sandbox run`` of the Python ``agent`` (which prints ``ready`` first), stopped with Ctrl-C; its stderr."""
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
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 130, err
    return err


def run_id_of(stderr: str) -> str:
    """The run ``sandbox run`` said it started."""
    return next(line.split()[3] for line in stderr.splitlines() if line.startswith("sandbox: started run "))


def test_a_session_interrupted_with_ctrl_c_is_recorded_as_interrupted(repo: Path) -> None:
    # The agent does not handle SIGINT: it dies of it, as an agent quit with Ctrl-C does (exit 130).
    agent = "open('partial.txt', 'w').write('half done')\nprint('ready', flush=True)\nimport time\ntime.sleep(120)\n"
    err = ctrl_c_run(repo, agent)
    text = err.decode()
    run_id = run_id_of(text)
    assert "it was interrupted" in text and "the agent exited 130." not in text
    entries = log(repo, run_id)
    last = entries[-1]
    assert last["tool_name"] == "agent_session" and last["status"] == "failed"
    assert str(last["error"]).startswith("interrupted: the session was stopped with Ctrl-C")
    assert [f["path"] for f in last["files"]] == ["partial.txt"]  # type: ignore[attr-defined]  # kept
    status = json.loads(sandbox_cmd("status", run_id, "--json", cwd=repo).stdout)
    assert status["by_status"] == {"failed": 1}
    # Resume does not take the interrupted session for a crash: nothing is in flight.
    resumed = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["uncertain"] == []


def test_a_denied_command_stays_denied_in_every_subdirectory(repo: Path) -> None:
    """The directory is recorded in the result, not the input: a denial of tool + input (as the
    run's host checks it for every exec) holds in any directory."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    run_id, worktree = started(repo)
    project, _workdir, _ = Project.discover(str(repo))
    run = Run.open(project, run_id)
    planned = run.plan_call("run_command", {"argv": ["touch", "d.txt"], "isolation": "off"})
    run.deny(planned, "not here, not anywhere")
    served = sandbox_cmd("serve", "--json", cwd=worktree)
    assert served.returncode == 0, served.stderr
    pid = json.loads(served.stdout)["pid"]
    try:
        proc = sandbox_cmd("exec", "--isolate", "off", "--", "touch", "d.txt", cwd=worktree / "src")
        assert proc.returncode == 1 and "not here, not anywhere" in proc.stderr.decode()
        assert not (worktree / "src" / "d.txt").exists()
    finally:
        os.kill(pid, signal.SIGTERM)  # the service this test started


def test_an_agent_that_ends_cleanly_on_ctrl_c_was_still_interrupted(repo: Path) -> None:
    """Exit 0 right after the SIGINT: the session ended on it (an agent that goes on after a Ctrl-C
    and ends later, as Claude Code does after one, is not: see launch.INTERRUPT_WINDOW)."""
    agent = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (open('bye.txt', 'w').write('bye'), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [str(exe), "--json", "run", "--", sys.executable, "-c", agent],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # --json: the agent's output is on stderr; bounded by its 120 s sleep
        if line == b"ready\n":
            break
    proc.send_signal(signal.SIGINT)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    data = json.loads(out)
    assert data["interrupted"].startswith("interrupted: the session was stopped with Ctrl-C")
    last = log(repo, data["run"])[-1]
    assert last["status"] == "failed" and [f["path"] for f in last["files"]] == ["bye.txt"]  # type: ignore[attr-defined]


def test_a_session_interrupted_after_its_last_change_is_recorded_as_interrupted(repo: Path) -> None:
    """Issue 21 item 9: nothing left to cut at the Ctrl-C, and the ledger still says it was interrupted."""
    agent = "print('ready', flush=True)\nimport time\ntime.sleep(120)\n"
    err = ctrl_c_run(repo, agent)
    run_id = run_id_of(err.decode())
    last = log(repo, run_id)[-1]
    assert last["tool_name"] == "agent_session" and last["status"] == "failed" and last["files"] == []
    assert str(last["error"]).startswith("interrupted: the session was stopped with Ctrl-C")
    status = json.loads(sandbox_cmd("status", run_id, "--json", cwd=repo).stdout)
    assert status["by_status"] == {"failed": 1}
