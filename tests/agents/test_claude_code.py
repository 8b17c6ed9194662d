"""The real Claude Code, end to end, in every permission mode (issue #9 sections 2, 3, 4, 8).

Claude Code 2.1.x (``make agents``) talks to the scripted model server of
:mod:`tests.agents.anthropic_server` on 127.0.0.1. Each scenario checks the ledger (one call per
tool use, call ids = tool_use ids, statuses, files per call), ``sandbox diff``, that the user's
files, index, refs and stash are byte-identical until ``apply``, and then ``apply`` + ``undo``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.models import CallStatus
from tests import cliserver
from tests.agents.anthropic_server import ModelServer, ToolUse, Turn, bash, edit, read, result_text, write
from tests.agents.claude_harness import (
    claude_args,
    claude_env,
    cli_start,
    in_worktree,
    install_hooks,
    sandbox,
    stop_services,
    via_run,
)
from tests.conftest import tree_digest, user_state
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents

NEW_FILE = "src/new.py"
NEW_TEXT = "def new():\n    return 1\n"


def _statuses(run: object) -> list[tuple[str, str, str, list[str]]]:
    from sandbox.run.run import Run

    assert isinstance(run, Run)
    return [(e.call_id, e.tool_name, e.status.value, [f.path for f in e.files]) for e in reopen(run).entries()]


def _apply_and_undo(repo: Path, run_id: str, expected: dict[str, str]) -> None:
    """``apply`` brings exactly the agent's files; undoing each applied call restores the user's tree."""
    before, state = tree_digest(repo), user_state(repo)
    done = sandbox("apply", run_id, cwd=repo)
    assert done.returncode == 0, done.stderr
    for rel, text in expected.items():
        assert (repo / rel).read_text() == text
    assert not (repo / ".claude").exists()  # the sandbox's own hook settings never reach the user
    assert user_state(repo)["index"] == state["index"] and user_state(repo)["refs"] == state["refs"]
    for _ in range(10):
        if tree_digest(repo) == before:
            break
        undone = sandbox("undo", run_id, cwd=repo)
        assert undone.returncode == 0, undone.stderr
    assert tree_digest(repo) == before and user_state(repo) == state


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    """Hooks started by hand spawn the run's service, as for users: stopped after each test."""
    yield
    stop_services(repo)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HOME for Claude Code (its settings, sessions and logs)."""
    return tmp_path / "claude-home"


def test_every_tool_via_sandbox_run(claude_bin: str, repo: Path, home: Path) -> None:
    """Write, Edit, Bash that succeeds, Bash that fails, Read: one call each, with their files."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        write(str(wt / NEW_FILE), NEW_TEXT),
        edit(str(wt / "src/app.py"), "print('app')", "print('edited')"),
        bash("echo built > out.txt"),
        bash("echo first-line-of-failure >&2; echo second >&2; exit 3"),
        read(str(wt / "src/app.py")),
    ]
    ids = [t.tools[0].id for t in turns]
    user_before, files_before = user_state(repo), tree_digest(repo)
    with ModelServer(turns) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    assert _statuses(run) == [
        (ids[0], "Write", "succeeded", [NEW_FILE]),
        (ids[1], "Edit", "succeeded", ["src/app.py"]),
        (ids[2], "Bash", "succeeded", ["out.txt"]),
        (ids[3], "Bash", "failed", []),
        (ids[4], "Read", "succeeded", []),
    ]
    failed = reopen(run).entry(ids[3])
    assert failed.error == "Exit code 3"  # one line in the ledger ...
    shown = sandbox("log", run.run_id, "--call", ids[3], cwd=repo)
    assert "first-line-of-failure" in shown.stdout and "second" in shown.stdout  # ... the whole text beside it
    result = server.tool_result(ids[3])
    assert result is not None and result.get("is_error") is True
    assert user_state(repo) == user_before and tree_digest(repo) == files_before  # nothing reached the user
    diff = sandbox("diff", run.run_id, "--stat", cwd=repo)
    assert diff.returncode == 0 and NEW_FILE in diff.stdout and "out.txt" in diff.stdout
    assert ".claude" not in diff.stdout
    _apply_and_undo(repo, run.run_id, {NEW_FILE: NEW_TEXT, "src/app.py": "print('edited')\n", "out.txt": "built\n"})


def _ids(params: list[object]) -> list[str]:
    out = []
    for p in params:
        values = getattr(p, "values", p)
        assert isinstance(values, tuple)
        out.append(f"{values[0]}-{values[1]}")
    return out


# (mode, how Claude Code is started, extra flags, expected status per tool: Write, Edit, Bash, Read)
MODES = [
    pytest.param("default", "run", ("--allowedTools", "Bash,Write,Edit"), ("succeeded",) * 4),
    pytest.param("default", "hooks", ("--allowedTools", "Bash,Write,Edit"), ("succeeded",) * 4),
    # The sandbox gives no "allow" of its own: unlisted edits are Claude Code's to refuse, as outside.
    pytest.param(
        "default",
        "run",
        ("--allowedTools", "Bash"),
        ("not_run", "not_run", "succeeded", "succeeded"),
        id="default-run-edits-unlisted",
    ),
    pytest.param("acceptEdits", "run", (), ("succeeded",) * 4),
    pytest.param("acceptEdits", "hooks", (), ("succeeded",) * 4),
    ("plan", "run", (), ("not_run", "not_run", "not_run", "succeeded")),
    ("bypassPermissions", "hooks", (), ("succeeded", "succeeded", "succeeded", "succeeded")),
]


@pytest.mark.parametrize("mode,driver,extra,expected", MODES, ids=_ids(MODES))
def test_permission_modes(
    claude_bin: str, repo: Path, home: Path, mode: str, driver: str, extra: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        write(str(wt / NEW_FILE), NEW_TEXT),
        edit(str(wt / "src/util.py"), "X = 1", "X = 2"),
        bash("echo made > made.txt"),
        read(str(wt / "README.md")),
    ]
    ids = [t.tools[0].id for t in turns]
    user_before, files_before = user_state(repo), tree_digest(repo)
    with ModelServer(turns) as server:
        if driver == "run":
            session = via_run(claude_bin, repo, run.run_id, server, home, mode, extra)
        else:
            install_hooks(repo, run.run_id)
            session = in_worktree(claude_bin, wt, server, home, mode, extra)
    entries = reopen(run).entries()
    assert [e.call_id for e in entries] == ids, session.stderr  # one call per tool use, ids = tool_use ids
    assert tuple(e.status.value for e in entries) == expected, [(e.status.value, e.error) for e in entries]
    assert all(e.status != CallStatus.started for e in entries)  # never started forever
    files = {"Write": [NEW_FILE], "Edit": ["src/util.py"], "Bash": ["made.txt"], "Read": []}
    for entry, status in zip(entries, expected, strict=True):
        assert [f.path for f in entry.files] == (files[entry.tool_name] if status == "succeeded" else [])
        if status == "not_run":
            assert entry.error and "\n" not in entry.error
            assert not (wt / files[entry.tool_name][0]).exists() or entry.tool_name == "Edit"
    for call_id, status in zip(ids, expected, strict=True):
        result = server.tool_result(call_id)
        assert result is not None and bool(result.get("is_error")) == (status == "not_run")
    assert user_state(repo) == user_before and tree_digest(repo) == files_before
    if "not_run" in expected and driver == "run":
        assert "did not run" in session.stderr  # sandbox run's summary lists them
    if expected[0] == "succeeded":
        diff = sandbox("diff", run.run_id, "--stat", cwd=repo)
        assert diff.returncode == 0 and NEW_FILE in diff.stdout and ".claude" not in diff.stdout
        _apply_and_undo(repo, run.run_id, {NEW_FILE: NEW_TEXT, "src/util.py": "X = 2\n", "made.txt": "made\n"})
    elif "succeeded" in expected[:3]:
        assert reopen(run).changed_paths() == ["made.txt"]
    else:
        assert reopen(run).changed_paths() == []


def test_refused_then_denied_then_retried_under_a_new_id(claude_bin: str, repo: Path, home: Path) -> None:
    """Claude Code's own check refuses a Bash call; the user denies it; a retry is refused the same way."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    install_hooks(repo, run.run_id)
    user_before, files_before = user_state(repo), tree_digest(repo)
    command = "touch denied.txt"
    first, second, third = (ToolUse("Bash", {"command": command, "description": "touch"}) for _ in range(3))
    with ModelServer([Turn(tools=[first])]) as server:
        session = in_worktree(claude_bin, wt, server, home, "default")  # no --allowedTools: Bash is refused
    refused = reopen(run).entry(first.id)
    assert refused.status == CallStatus.not_run and "Claude Code" in (refused.error or ""), session.stderr
    answer = server.tool_result(first.id)
    assert answer is not None and answer.get("is_error") is True
    denied = sandbox("deny", run.run_id, first.id, "--reason", "no touching files today", cwd=repo)
    assert denied.returncode == 0, denied.stderr

    # Retried under a new id, even in bypassPermissions mode: refused at PreToolUse with the reason.
    with ModelServer([Turn(tools=[second])]) as server:
        in_worktree(claude_bin, wt, server, home, "bypassPermissions")
    retry = reopen(run).entry(second.id)
    assert retry.status == CallStatus.not_run and "no touching files today" in (retry.error or "")
    told = server.tool_result(second.id)
    assert told is not None and "no touching files today" in result_text(told)  # the model was told why
    assert not (wt / "denied.txt").exists()

    approved = sandbox("approve", run.run_id, first.id, cwd=repo)
    assert approved.returncode == 0 and "lifted" in approved.stdout
    with ModelServer([Turn(tools=[third])]) as server:
        in_worktree(claude_bin, wt, server, home, "bypassPermissions")
    assert reopen(run).entry(third.id).status == CallStatus.succeeded and (wt / "denied.txt").exists()
    assert [e.call_id for e in reopen(run).entries()] == [first.id, second.id, third.id]
    assert user_state(repo) == user_before and tree_digest(repo) == files_before
    assert "denied.txt" in sandbox("diff", run.run_id, "--stat", cwd=repo).stdout
    _apply_and_undo(repo, run.run_id, {"denied.txt": ""})


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and int(entry) != os.getpid():
                found.append(int(entry))
    return found


@pytest.fixture
def marker_processes() -> Iterator[str]:
    """A unique marker for a test's long commands; processes carrying it are stopped at the end."""
    marker = f"41.{os.getpid() % 1000:03d}{time.monotonic_ns() % 1000:03d}"
    yield marker
    for pid in _with_marker(f"sleep {marker}"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kill_9_during_a_long_bash_then_resume(claude_bin: str, repo: Path, home: Path, marker_processes: str) -> None:
    run = cli_start(repo)
    wt = Path(run.worktree)
    user_before, files_before = user_state(repo), tree_digest(repo)
    command = f"echo started > started.txt; sleep {marker_processes}; echo late > late.txt"
    long_call = ToolUse("Bash", {"command": command})
    turns = [write(str(wt / NEW_FILE), NEW_TEXT), Turn(tools=[long_call])]
    with ModelServer(turns) as server:
        debug_log = home / "debug.log"
        proc = cliserver.popen(  # forked by the tests' command server: its pid is sandbox run's own
            *("run", run.run_id, "--", *claude_args(claude_bin, "bypassPermissions", debug_log)),
            cwd=repo,
            env=claude_env(server, home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not (wt / "started.txt").exists() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert (wt / "started.txt").exists(), proc.communicate(timeout=30)
            # sandbox run -> its supervisor (sandbox.agent.reaper, which owns the agent's tree) -> claude
            supervisor = _children(proc.pid)
            claude = [p for s in supervisor for p in _children(s) if "claude" in Path(f"/proc/{p}/cmdline").read_text()]
            assert len(claude) == 1
            os.kill(claude[0], signal.SIGKILL)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    entries = reopen(run).entries()
    assert [(e.call_id, e.status.value) for e in entries][0][1] == "succeeded"
    assert entries[1].call_id == long_call.id and entries[1].status == CallStatus.started, err
    resumed = sandbox("resume", run.run_id, "--json", cwd=repo)
    report = json.loads(resumed.stdout or "{}")
    assert [u["call_id"] for u in report["uncertain"]] == [long_call.id], resumed.stderr
    assert long_call.id in report["ask_first"]  # a command: check before repeating it
    assert reopen(run).entry(long_call.id).status == CallStatus.uncertain  # no evidence either way
    assert "started.txt" in [d["path"] for d in report["drift"]] or any(
        f.path == "started.txt" for f in reopen(run).entries()[-1].files
    )
    assert user_state(repo) == user_before and tree_digest(repo) == files_before
    for pid in _with_marker(f"sleep {marker_processes}"):  # the Bash child, if nothing stopped it
        os.kill(pid, signal.SIGKILL)
    assert NEW_FILE in sandbox("diff", run.run_id, "--stat", cwd=repo).stdout
    _apply_and_undo(repo, run.run_id, {NEW_FILE: NEW_TEXT})
