"""The real Gemini CLI (0.61, pinned in tests/agents/package.json) under ``sandbox run``, end to end.

Gemini talks to a scripted model server of ours on 127.0.0.1 (tests/agents/gemini_server.py) and
runs headless (``-p ... --yolo``) in the run's worktree, a folder it has never seen: without the
sandbox's per-run trust it would exit 55 and its hooks would not fire. Each test checks the ledger
(one call per tool use, statuses, files per call), ``sandbox diff``, that the user's files, index,
refs and stash stay byte-identical until ``apply``, and ``apply`` + ``undo``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox.agent import procs
from tests.agents import gemini_server as gs
from tests.conftest import sandbox_cmd, scaled, tree_digest, user_state

pytestmark = pytest.mark.agents

SHELL_DESC = "scripted"


@pytest.fixture
def gemini_home(tmp_path: Path) -> Path:
    """A HOME for Gemini CLI with API-key auth selected (nothing of the developer's own)."""
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return home


@pytest.fixture
def run_id(repo: Path) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["run"])


def worktree_of(repo: Path, run_id: str) -> Path:
    return Path(sandbox_cmd("path", run_id, cwd=repo).stdout.decode().strip())


def agent_env(server: gs.GeminiServer, home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": server.base_url,
        "GEMINI_API_KEY": "test-key",
        "GEMINI_CLI_TRUST_WORKSPACE": "",  # whatever the developer has: the sandbox's own trust must do it
    }


def log(repo: Path, run_id: str) -> list[dict[str, Any]]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries: list[dict[str, Any]] = json.loads(proc.stdout)
    return entries


def files_of(entry: dict[str, Any]) -> list[str]:
    return [f["path"] for f in entry["files"]]


def run_gemini(
    repo: Path, run_id: str, server: gs.GeminiServer, home: Path, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    """``sandbox run RUN -- gemini -p ... --yolo`` with the real binary, headless."""
    from tests.agents.conftest import agent_binary

    gemini = agent_binary("gemini")
    return sandbox_cmd(
        "run", run_id, "--", gemini, "-p", "do the task", "--yolo", *extra,
        cwd=repo, env=agent_env(server, home), timeout=timeout,
    )  # fmt: skip


def test_tools_are_recorded_one_call_each(repo: Path, run_id: str, gemini_home: Path, gemini_bin: str) -> None:
    """write_file, replace, run_shell_command (exit 0 and exit 3) and read_file: five calls, honest statuses."""
    before, before_files = user_state(repo), tree_digest(repo)
    wt = worktree_of(repo, run_id)
    turns = [
        gs.call("write_file", file_path=str(wt / "src" / "new.py"), content="NEW = 1\n"),
        gs.call(
            "replace", file_path=str(wt / "src" / "util.py"), old_string="X = 1", new_string="X = 2", instruction="bump"
        ),
        gs.call("run_shell_command", command="echo made > made.txt", description=SHELL_DESC),
        gs.call("run_shell_command", command="echo Exit Code: 0; echo broken > broken.txt; exit 3"),
        gs.call("read_file", file_path=str(wt / "README.md")),
        gs.text("All done."),
    ]
    with gs.serve(turns) as server:
        proc = run_gemini(repo, run_id, server, gemini_home)
    assert proc.returncode == 0, proc.stderr.decode()
    # Trusted for this run only: the user's own trust settings were neither needed nor written.
    assert not (gemini_home / ".gemini" / "trustedFolders.json").exists()
    entries = log(repo, run_id)
    assert [e["tool_name"] for e in entries] == ["write_file", "replace", "run_shell_command", "run_shell_command",
                                                 "read_file"]  # fmt: skip
    assert [e["status"] for e in entries] == ["succeeded", "succeeded", "succeeded", "failed", "succeeded"]
    assert all(e["call_id"].startswith("gemini_") for e in entries)
    assert len({e["call_id"] for e in entries}) == 5
    assert [files_of(e) for e in entries] == [["src/new.py"], ["src/util.py"], ["made.txt"], ["broken.txt"], []]
    assert entries[3]["error"] == "exit code 3"
    # The model was told the real outcomes (the scripted server saw every function response).
    responses = server.function_responses()
    assert [r["name"] for r in responses] == [e["tool_name"] for e in entries]
    # The sandbox's own files never show: not in a call, not in the patch.
    diff = sandbox_cmd("diff", run_id, cwd=repo).stdout.decode()
    assert "X = 2" in diff and "NEW = 1" in diff and ".gemini" not in diff
    assert user_state(repo) == before and tree_digest(repo) == before_files
    applied = sandbox_cmd("apply", run_id, cwd=repo)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "src" / "util.py").read_text() == "X = 2\n"
    assert (repo / "src" / "new.py").read_text() == "NEW = 1\n"
    assert (repo / "broken.txt").exists() and not (repo / ".gemini").exists()
    undone = sandbox_cmd("undo", run_id, "--call", "4", cwd=repo)  # the failed command's broken.txt
    assert undone.returncode == 0, undone.stderr
    assert not (repo / "broken.txt").exists() and (repo / "made.txt").exists()
    assert user_state(repo)["refs"] == before["refs"] and user_state(repo)["stash"] == before["stash"]


def test_without_the_sandbox_trust_gemini_refuses_the_worktree(
    repo: Path, run_id: str, gemini_home: Path, gemini_bin: str
) -> None:
    """The reason the sandbox trusts the worktree: Gemini CLI 0.61 exits 55 in a folder it does not trust."""
    wt = worktree_of(repo, run_id)
    with gs.serve([gs.text("hi")]) as server:
        env = {**os.environ, **agent_env(server, gemini_home)}
        proc = subprocess.run(
            [gemini_bin, "-p", "hi", "--yolo"], cwd=wt, env=env, capture_output=True, timeout=120, check=False
        )
    assert proc.returncode == 55, proc.stderr.decode()
    # ... and sandbox run changed nothing of the user's own trust settings.
    assert not (gemini_home / ".gemini" / "trustedFolders.json").exists()


def test_denied_call_is_refused_with_gemini_s_own_answer(
    repo: Path, run_id: str, gemini_home: Path, gemini_bin: str
) -> None:
    """A call denied with ``sandbox deny`` is blocked at BeforeTool, every time it is asked for."""
    args = {"command": "echo pwned > pwned.txt", "description": SHELL_DESC}
    planned = sandbox_cmd("call", "plan", run_id, "--tool", "run_shell_command", "--input", json.dumps(args), cwd=repo)
    assert planned.returncode == 0, planned.stderr
    call_id = planned.stdout.decode().strip().split()[-1]
    denied = sandbox_cmd("deny", run_id, call_id, "--reason", "no network writes today", cwd=repo)
    assert denied.returncode == 0, denied.stderr
    before = user_state(repo)
    wt = worktree_of(repo, run_id)
    turns = [
        gs.call("run_shell_command", **args),
        gs.call("run_shell_command", **args),  # the retry: a new call, the same tool and input
        gs.call("write_file", file_path=str(wt / "ok.txt"), content="ok\n"),
        gs.text("Understood."),
    ]
    with gs.serve(turns) as server:
        proc = run_gemini(repo, run_id, server, gemini_home)
    assert proc.returncode == 0, proc.stderr.decode()
    assert not (wt / "pwned.txt").exists()
    responses = server.function_responses()
    refused = [r for r in responses if r["name"] == "run_shell_command"]
    assert len(refused) == 2
    for r in refused:
        text = json.dumps(r["response"])
        assert "no network writes today" in text and call_id in text
    entries = log(repo, run_id)
    # The denied call stays the record; a refused attempt may be logged, but never as having run.
    shells = [e for e in entries if e["tool_name"] == "run_shell_command"]
    assert shells[0]["call_id"] == call_id and shells[0]["approval"] == "denied"
    assert not [e for e in shells if e["status"] in ("started", "succeeded", "failed", "uncertain")]
    assert [(e["tool_name"], e["status"]) for e in entries if e["tool_name"] != "run_shell_command"] == [
        ("write_file", "succeeded")
    ]
    assert user_state(repo) == before
    assert sandbox_cmd("apply", run_id, cwd=repo).returncode == 0 and (repo / "ok.txt").read_text() == "ok\n"
    assert sandbox_cmd("undo", run_id, cwd=repo).returncode == 0 and not (repo / "ok.txt").exists()


def test_kill_9_of_gemini_during_a_long_command_then_resume(
    repo: Path, run_id: str, gemini_home: Path, gemini_bin: str, tmp_path: Path
) -> None:
    """kill -9 of Gemini CLI mid-command: its shell (its own process group) is stopped, resume reports."""
    before = user_state(repo)
    started = tmp_path / "started"
    command = f"echo $$ > {started}; echo partial > partial.txt; sleep 300; echo late > late.txt"
    turns = [gs.call("run_shell_command", command=command, description=SHELL_DESC)]
    wt = worktree_of(repo, run_id)
    exe = Path(sys.executable).parent / "sandbox"
    with gs.serve(turns) as server:
        proc = subprocess.Popen(
            # --isolate off: the supervisor's way of stopping the tree (and pids written to tmp_path) is the subject.
            [str(exe), "run", run_id, "--isolate", "off", "--", gemini_bin, "-p", "do the task", "--yolo"],
            cwd=repo,
            env={**os.environ, **agent_env(server, gemini_home)},
            stdout=(tmp_path / "out").open("wb"),
            stderr=(tmp_path / "err").open("wb"),
            stdin=subprocess.DEVNULL,
        )
        try:
            # The shell makes the file before it writes the pid: wait for the whole line, not the file.
            wait_for(lambda: started.exists() and started.read_text().endswith("\n"), 90)
            shell = int(started.read_text())
            kill_gemini(proc.pid)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = (tmp_path / "err").read_text()
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert procs.start_time(shell) is None, "the shell the agent started outlived it"
    assert "never finished" in err, err
    # The shell (its own process group) outlives Gemini's processes; the sandbox stops it and says so.
    if "they were stopped" in err:
        assert "sleep" in err or "sh" in err, err
    time.sleep(0.3)
    assert (wt / "partial.txt").exists() and not (wt / "late.txt").exists()
    entries = log(repo, run_id)
    assert [(e["tool_name"], e["status"]) for e in entries] == [("run_shell_command", "started")]
    res = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert [(u["tool_name"], u["processes_alive"]) for u in report["uncertain"]] == [("run_shell_command", False)]
    assert [d["path"] for d in report["drift"]] == ["partial.txt"]  # never the sandbox's .gemini/settings.json
    assert [d["attributed_to"] for d in report["drift"]] == [entries[0]["call_id"]]
    assert user_state(repo) == before
    # What the killed command wrote is booked to its call (its one owner): the call's change, which `log`
    # names and `apply` brings like any other (never the next session's).
    booked = log(repo, run_id)
    assert [(e["tool_name"], e["status"], files_of(e)) for e in booked] == [
        ("run_shell_command", "uncertain", ["partial.txt"])
    ]
    assert sandbox_cmd("apply", run_id, cwd=repo).returncode == 0
    assert (repo / "partial.txt").read_text() == "partial\n"


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def kill_gemini(sandbox_pid: int) -> None:
    """kill -9 of Gemini CLI: its launcher and the child it relaunches itself as (node processes under it),
    the child first. Killing only the launcher left the child alive to end the call itself (it noticed its
    launcher's death, its shell ended, and its AfterTool recorded the call) on a busy machine: not the
    kill -9 of the agent under test."""
    top = top_gemini(sandbox_pid)
    family = [top]
    for pid in family:  # grows as it is walked: every descendant that is node (never the tool's shell)
        for child in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            try:
                node = "node" in os.readlink(f"/proc/{child}/exe")
            except OSError:
                continue
            if node and procs.parent(child) == pid:
                family.append(child)
    for pid in reversed(family):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def top_gemini(sandbox_pid: int) -> int:
    """The pid of the Gemini CLI process ``sandbox run`` (``sandbox_pid``) started, found by parentage
    (sandbox run -> its supervisor -> gemini), never by words in command lines: a clone's path may hold any."""
    children: dict[int, list[int]] = {}
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        children.setdefault(procs.parent(pid) or 0, []).append(pid)

    def of_the_run(pid: int) -> bool:  # not a host `sandbox run` may have started beside the supervisor
        try:
            return b"SANDBOX_RUN=" in Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False

    tops = [agent for sup in children.get(sandbox_pid, []) for agent in children.get(sup, []) if of_the_run(agent)]
    assert len(tops) == 1, (sandbox_pid, children.get(sandbox_pid))
    return tops[0]


def test_interactive_session_in_a_terminal(repo: Path, run_id: str, gemini_home: Path, gemini_bin: str) -> None:
    """``sandbox run RUN -- gemini -i PROMPT`` in a pseudo-terminal: the trust, the hooks and the calls
    work as headless; closing the terminal (SIGHUP) ends Gemini (its launcher ignores the signal
    itself; the sandbox passes it on as a terminal would) and leaves nothing running."""
    import pty
    import select

    wt = worktree_of(repo, run_id)
    turns = [
        gs.call("write_file", file_path=str(wt / "notes.md"), content="# notes\n"),
        gs.call("run_shell_command", command="exit 5", description=SHELL_DESC),
        gs.text("Done."),
    ]
    exe = Path(sys.executable).parent / "sandbox"
    with gs.serve(turns) as server:
        env = {**os.environ, **agent_env(server, gemini_home), "TERM": "xterm"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: the session leader of the new terminal, like a shell's job
            os.chdir(repo)
            os.execve(
                str(exe),
                [str(exe), "run", run_id, "--isolate", "off", "--", gemini_bin, "-i", "do the task", "--yolo"],
                env,
            )  # noqa: E501
        screen = b""
        status: int | None = None
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and len(server.conversation()) < 3:
                if select.select([fd], [], [], 0.2)[0]:
                    try:
                        screen += os.read(fd, 65536)
                    except OSError:
                        break
            assert len(server.conversation()) >= 3, screen.decode(errors="replace")[-2000:]
            wait_for(lambda: len(log(repo, run_id)) == 2 and log(repo, run_id)[-1]["status"] != "started", 30)
            os.kill(pid, signal.SIGHUP)  # the terminal goes away
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and status is None:
                with contextlib.suppress(OSError):
                    if select.select([fd], [], [], 0.2)[0]:
                        screen += os.read(fd, 65536)
                done, code = os.waitpid(pid, os.WNOHANG)
                status = code if done else None
        finally:
            if status is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)
    assert status is not None, "sandbox run did not end after SIGHUP"
    entries = log(repo, run_id)
    assert [(e["tool_name"], e["status"], e["error"]) for e in entries] == [
        ("write_file", "succeeded", None),
        ("run_shell_command", "failed", "exit code 5"),
    ]
    assert [files_of(e) for e in entries] == [["notes.md"], []]
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _of_run(int(p), run_id)]
    assert "WriteFile" in screen.decode(errors="replace")
    assert sandbox_cmd("apply", run_id, cwd=repo).returncode == 0 and (repo / "notes.md").read_text() == "# notes\n"
    assert sandbox_cmd("undo", run_id, cwd=repo).returncode == 0 and not (repo / "notes.md").exists()


def _of_run(pid: int, run_id: str) -> bool:
    try:
        return f"SANDBOX_RUN={run_id}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def test_hooks_install_then_gemini_started_by_the_user(
    repo: Path, run_id: str, gemini_home: Path, gemini_bin: str
) -> None:
    """``sandbox hooks install gemini RUN`` prints how to start Gemini with the worktree trusted; done so,
    its hooks record each call (in-process here: the background service is off in tests)."""
    installed = sandbox_cmd("hooks", "install", "gemini", run_id, cwd=repo)
    assert installed.returncode == 0, installed.stderr
    line = [x for x in installed.stdout.decode().splitlines() if "GEMINI_CLI_TRUSTED_FOLDERS_PATH=" in x][0]
    trust = line.split("GEMINI_CLI_TRUSTED_FOLDERS_PATH=")[1].split()[0].strip("'")
    wt = worktree_of(repo, run_id)
    turns = [gs.call("write_file", file_path=str(wt / "by_user.txt"), content="x\n"), gs.text("Done.")]
    with gs.serve(turns) as server:
        env = {**os.environ, **agent_env(server, gemini_home), "GEMINI_CLI_TRUSTED_FOLDERS_PATH": trust}
        proc = subprocess.run(
            [gemini_bin, "-p", "do the task", "--yolo"], cwd=wt, env=env, capture_output=True, timeout=120, check=False
        )
    assert proc.returncode == 0, proc.stderr.decode()
    entries = log(repo, run_id)
    assert [(e["tool_name"], e["status"], files_of(e)) for e in entries] == [
        ("write_file", "succeeded", ["by_user.txt"])
    ]


def test_sigint_without_a_terminal_stops_confined_gemini_and_its_call_is_interrupted(
    repo: Path, run_id: str, gemini_home: Path, gemini_bin: str, tmp_path: Path
) -> None:
    """Ctrl-C as a script sends it (SIGINT to ``sandbox run``'s process group, no terminal): it reaches the
    confined Gemini CLI's whole group, as a terminal's would, so Gemini stops (its launcher ignores SIGINT and
    its relaunched child ran on for the whole command); the running shell call is ``interrupted`` with the
    file it wrote, never left ``started`` or taken for a success."""
    command = "echo partial > partial.txt; sleep 300; echo late > late.txt"
    turns = [gs.call("run_shell_command", command=command, description=SHELL_DESC), gs.text("done")]
    wt = worktree_of(repo, run_id)
    exe = Path(sys.executable).parent / "sandbox"
    with gs.serve(turns) as server:
        proc = subprocess.Popen(
            [str(exe), "run", run_id, "--", gemini_bin, "-p", "do the task", "--yolo"],
            cwd=repo,
            env={**os.environ, **agent_env(server, gemini_home)},
            stdout=(tmp_path / "out").open("wb"),
            stderr=(tmp_path / "err").open("wb"),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a group of its own, as a script's job; no terminal
        )
        try:
            wait_for(lambda: (wt / "partial.txt").exists() and log(repo, run_id), 120)
            time.sleep(0.5)
            signalled = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=scaled(60))
            took = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    err = (tmp_path / "err").read_text()
    assert took < scaled(30), err  # the command alone would have run 300 s
    assert not (wt / "late.txt").exists()
    # The call, then the session's end (an interrupted session's last cut says so, with no file of its own:
    # the file the stopped command wrote is the call's alone).
    entries = log(repo, run_id)
    shown = str([(e["tool_name"], e["status"], files_of(e)) for e in entries])
    assert [(e["tool_name"], e["status"]) for e in entries][:1] == [("run_shell_command", "interrupted")], shown
    assert files_of(entries[0]) == ["partial.txt"], shown
    assert all(e["tool_name"] == "agent_session" and not files_of(e) for e in entries[1:]), shown
    assert "bwrap" not in err, err  # the sandbox's own bubblewrap is never "a process the agent left running"
