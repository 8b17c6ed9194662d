"""``sandbox run`` owns the agent's process tree; ``resume`` finds and stops what survived.

Real processes and real signals: agents (shell scripts and fixtures/agents/fake_claude.py) that
leave tools running, including ones that call ``setsid`` to leave every process group, and kill -9
of the agent, of its supervisor and of ``sandbox run`` itself. They run with ``--isolate off``: the
supervisor is the unconfined path; a confined agent's tree is its PID namespace, which dies with it
(tests/agent/test_confine.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sandbox.agent import procs
from tests.conftest import sandbox_cmd, user_state

FAKE_CLAUDE = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "fake_claude.py"


def wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def pid_alive(pid: int) -> bool:
    return procs.start_time(pid) is not None


def run_id_of(stderr: bytes) -> str:
    for line in stderr.decode().splitlines():
        if line.startswith("sandbox: started run "):
            return line.split()[3]
    raise AssertionError(stderr.decode())


def ledger_events(repo: Path, run_id: str) -> list[dict[str, object]]:
    import sandbox

    run = sandbox.open_run(str(repo), run_id)
    return [e.model_dump(mode="json") for _oid, e in run.events()]


def test_processes_left_by_the_agent_are_stopped_and_recorded(repo: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # A plain background job, and one that leaves the session and process group with setsid.
    script = (
        f"sleep 300 & echo $! >> {pids}; "
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 300' & "
        f"i=0; while [ $(wc -l < {pids}) -lt 2 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 4"
    )
    proc = sandbox_cmd("run", "--new", "--isolate", "off", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 4, proc.stderr
    left = [int(x) for x in pids.read_text().split()]
    assert len(left) == 2
    assert not any(pid_alive(p) for p in left)
    err = proc.stderr.decode()
    assert "left 2 process(es) running; they were stopped" in err
    run_id = run_id_of(proc.stderr)
    notes = [e for e in ledger_events(repo, run_id) if e["kind"] == "note" and "isolation" not in e["data"]]
    assert len(notes) == 1
    stopped = notes[0]["data"]["stopped_processes"]  # type: ignore[index]
    assert sorted(p["pid"] for p in stopped) == sorted(left)
    assert notes[0]["data"]["agent_exit"] == 4  # type: ignore[index]


def test_agent_killed_mid_call_its_tool_is_stopped_and_resume_says_so(repo: Path, tmp_path: Path) -> None:
    """kill -9 of the agent during a long command: the command dies with it; resume reports it."""
    before = user_state(repo)
    started = tmp_path / "started"
    command = f"echo $$ > {started}; echo partial > partial.txt; sleep 300; echo late > late.txt"
    steps = [
        {
            "pre": {
                "session_id": "s1",
                "hook_event_name": "PreToolUse",
                "cwd": "__CWD__",
                "tool_name": "Bash",
                "tool_use_id": "toolu_long",
                "tool_input": {"command": command},
            },
            "effect": {"sh": f"setsid sh -c '{command}'"},
        }
    ]
    proc, run_id, worktree = _start_fake_claude(repo, tmp_path, steps)
    # The shell makes the file before it writes the pid: wait for the whole line, not the file.
    wait_for(lambda: started.exists() and started.read_text().endswith("\n"))
    tool_pid = int(started.read_text())
    agent = _find(run_id, "fake_claude.py")
    os.kill(agent, signal.SIGKILL)
    proc.wait(timeout=60)
    err = (tmp_path / "run.err").read_bytes()
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert not pid_alive(tool_pid)
    assert "they were stopped" in err.decode() and "toolu_long never finished" in err.decode()
    time.sleep(0.3)
    assert not (worktree / "late.txt").exists()
    res = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert [(u["call_id"], u["processes_alive"]) for u in report["uncertain"]] == [("toolu_long", False)]
    assert "None of its session's processes is still running" in report["note"]
    assert user_state(repo) == before


def test_resume_refuses_while_survivors_run_then_stops_them(repo: Path, tmp_path: Path) -> None:
    """``sandbox run``, its supervisor and the agent killed -9 at once (their process group, as when a
    terminal goes away): the tool, which left the group with setsid, survives; resume finds it by token."""
    started = tmp_path / "started"
    command = f"echo $$ > {started}; sleep 300; echo late > late.txt"
    steps = [
        {
            "pre": {
                "session_id": "s1",
                "hook_event_name": "PreToolUse",
                "cwd": "__CWD__",
                "tool_name": "Bash",
                "tool_use_id": "toolu_orphan",
                "tool_input": {"command": command},
            },
            "effect": {"sh": f"setsid sh -c '{command}'"},
        }
    ]
    proc, run_id, worktree = _start_fake_claude(repo, tmp_path, steps, new_session=True)
    # The shell makes the file before it writes the pid: wait for the whole line, not the file.
    wait_for(lambda: started.exists() and started.read_text().endswith("\n"))
    tool_pid = int(started.read_text())
    supervisor = _find(run_id, "sandbox.agent.reaper")
    agent = _find(run_id, "fake_claude.py")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    wait_for(lambda: not pid_alive(agent) and not pid_alive(supervisor))
    try:
        assert pid_alive(tool_pid)
        # The session's note is written beside the agent's start, by a thread of 'sandbox run' that
        # opens the run after spawning the agent: on a busy machine it may land after the first call.
        kinds_before = [e["kind"] for e in ledger_events(repo, run_id)]
        assert kinds_before.count("call_started") == 1 and "call_succeeded" not in kinds_before
        refused = sandbox_cmd("resume", run_id, cwd=repo)
        assert refused.returncode == 1, refused.stderr
        err = refused.stderr.decode()
        assert str(tool_pid) in err and "--stop-processes" in err and len(err.strip().splitlines()) == 1
        # Nothing changed: the call is still started, no fence was appended.
        assert [e["kind"] for e in ledger_events(repo, run_id)] == kinds_before
        res = sandbox_cmd("resume", run_id, "--stop-processes", "--json", cwd=repo)
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        stopped = {p["pid"]: p for p in report["stopped_processes"]}
        assert tool_pid in stopped and len(stopped) == 2  # the tool's shell and its sleep
        assert all(p["call_ids"] == ["toolu_orphan"] for p in stopped.values())
        assert not any(pid_alive(p) for p in stopped)
        assert report["uncertain"][0]["processes_alive"] is True
        assert not pid_alive(tool_pid)
        kinds = [e["kind"] for e in ledger_events(repo, run_id)]
        assert "note" in kinds[kinds.index("resumed") :]
        again = sandbox_cmd("resume", run_id, cwd=repo)
        assert again.returncode == 0, again.stderr
    finally:
        if pid_alive(tool_pid):
            os.kill(tool_pid, signal.SIGKILL)
    assert not (worktree / "late.txt").exists()


def _start_fake_claude(
    repo: Path, tmp_path: Path, steps: list[dict[str, object]], new_session: bool = False
) -> tuple[subprocess.Popen[bytes], str, Path]:
    start = sandbox_cmd("start", "--json", cwd=repo)
    assert start.returncode == 0, start.stderr
    info = json.loads(start.stdout)
    run_id, worktree = info["run"], Path(info["worktree"])
    text = json.dumps(steps).replace("__CWD__", str(worktree))
    script = tmp_path / "steps.json"
    script.write_text(text)
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [
            str(exe),
            "run",
            run_id,
            "--isolate",
            "off",
            "--hooks",
            "claude-code",
            "--",
            sys.executable,
            str(FAKE_CLAUDE),
            str(script),
        ],
        cwd=repo,
        # Files, not pipes: a surviving tool inherits them and would hold a pipe open.
        stdout=(tmp_path / "run.out").open("wb"),
        stderr=(tmp_path / "run.err").open("wb"),
        stdin=subprocess.DEVNULL,
        start_new_session=new_session,
    )
    return proc, run_id, worktree


def _session(run_id: str, needle: str = "") -> list[int]:
    """The pids of this run's session's processes whose command line contains ``needle``."""
    found: list[int] = []
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if needle in procs.command(pid):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"SANDBOX_RUN={run_id}".encode() in env:
                found.append(pid)
    return found


def _find(run_id: str, needle: str) -> int:
    """The pid of the process of this run's session whose command line contains ``needle``."""
    wait_for(lambda: bool(_session(run_id, needle)))
    return _session(run_id, needle)[0]


def test_resume_refuses_while_a_finished_call_s_background_process_runs(repo: Path, tmp_path: Path) -> None:
    """A server a *finished* call left running writes into the worktree too: resume refuses for it."""
    started = tmp_path / "server"
    server = f"echo $$ > {started}; exec sleep 300"
    bash = {"session_id": "s1", "cwd": "__CWD__", "tool_name": "Bash", "tool_use_id": "toolu_bg",
            "tool_input": {"command": "start the server"}}  # fmt: skip
    steps = [
        {
            "pre": {**bash, "hook_event_name": "PreToolUse"},
            "effect": {"sh": f"setsid sh -c '{server}' > /dev/null 2>&1 &"},
            "post": {**bash, "hook_event_name": "PostToolUse", "tool_response": {"stdout": ""}},
        },
        {"effect": {"sh": f"while [ ! -s {started} ]; do sleep 0.05; done; sleep 300"}},  # the agent thinks
    ]
    proc, run_id, _wt = _start_fake_claude(repo, tmp_path, steps, new_session=True)
    wait_for(lambda: started.exists() and started.read_text().strip() != "")
    wait_for(lambda: any(e["kind"] == "call_succeeded" for e in ledger_events(repo, run_id)))
    server_pid = int(started.read_text())
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    try:
        refused = sandbox_cmd("resume", run_id, cwd=repo)
        assert refused.returncode == 1 and str(server_pid) in refused.stderr.decode(), refused.stderr
        res = sandbox_cmd("resume", run_id, "--stop-processes", "--json", cwd=repo)
        assert res.returncode == 0, res.stderr
        stopped = json.loads(res.stdout)["stopped_processes"]
        assert [(p["pid"], p["call_ids"]) for p in stopped] == [(server_pid, [])]
        assert not pid_alive(server_pid)
    finally:
        if pid_alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_sandbox_run_killed_its_supervisor_still_stops_the_tree(repo: Path, tmp_path: Path) -> None:
    """kill -9 of ``sandbox run`` alone: the supervisor gets SIGTERM (parent-death signal), passes it to
    the agent and stops the tool; its report is recorded by the next resume."""
    started = tmp_path / "started"
    command = f"echo $$ > {started}; sleep 300; echo late > late.txt"
    steps = [
        {
            "pre": {
                "session_id": "s1",
                "hook_event_name": "PreToolUse",
                "cwd": "__CWD__",
                "tool_name": "Bash",
                "tool_use_id": "toolu_owner",
                "tool_input": {"command": command},
            },  # fmt: skip
            "effect": {"sh": f"setsid sh -c '{command}'"},
        }
    ]
    proc, run_id, worktree = _start_fake_claude(repo, tmp_path, steps)
    # The shell makes the file before it writes the pid: wait for the whole line, not the file.
    wait_for(lambda: started.exists() and started.read_text().endswith("\n"))
    tool_pid = int(started.read_text())
    agent = _find(run_id, "fake_claude.py")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    wait_for(lambda: not pid_alive(tool_pid) and not pid_alive(agent), 30)
    # The supervisor stops the rest of the tree (the tool's ``sleep``) and writes its report before it ends;
    # resume rightly refuses while any process of the session lives, so wait for all of them.
    wait_for(lambda: not _session(run_id), 30)
    res = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["uncertain"][0]["processes_alive"] is False
    notes = [e for e in ledger_events(repo, run_id) if e["kind"] == "note" and "isolation" not in e["data"]]
    assert len(notes) == 1 and "sandbox run ended before its agent" in str(notes[0]["reason"])
    assert tool_pid in [p["pid"] for p in notes[0]["data"]["stopped_processes"]]  # type: ignore[index]
    assert not (worktree / "late.txt").exists()


def test_the_agent_gets_default_signal_dispositions(repo: Path) -> None:
    """The supervisor is a Python process (which ignores SIGPIPE): the agent must not inherit that."""
    script = "grep -E '^Sig(Ign|Blk):' /proc/self/status > dispositions.txt"
    proc = sandbox_cmd("run", "--new", "--isolate", "off", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    run_id = run_id_of(proc.stderr)
    worktree = Path(sandbox_cmd("path", run_id, cwd=repo).stdout.decode().strip())
    ignored = {
        line.split()[0]: int(line.split()[1], 16) for line in (worktree / "dispositions.txt").read_text().splitlines()
    }
    assert ignored["SigIgn:"] & (1 << (signal.SIGPIPE - 1)) == 0
    assert ignored["SigBlk:"] == 0
