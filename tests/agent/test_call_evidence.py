"""Calls are what they were (issue 26) and hook evidence is bound to its session (issue 25, item 5).

Real Claude Code and Gemini CLI payloads (fixtures/) through the real hook entry point, in this
process and as real hook processes talking to a real host; the sessions are real processes started
with their tokens, as ``sandbox run`` starts them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandbox.agent import wire
from sandbox.agent.host import Host
from sandbox.agent.launch import SessionResult, settle_session
from sandbox.cli import cli
from sandbox.models import ProcessScope
from sandbox.recovery.resume import resume
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import wait_until, write
from tests.hook_fixtures import FIXTURES, hook, payload, reopen, start_run

BASH = "toolu_01BashE5f6G7h8I9j0K1l2"
SESSION = "5f0c9e8a-1b2c-4d3e-9f00-1234567890ab"


def _event(name: str, wt: Path, **more: Any) -> dict[str, Any]:
    recorded = FIXTURES / "claude-code" / "events" / f"{name}.json"
    if recorded.exists():
        data: dict[str, Any] = json.loads(recorded.read_text().replace("__CWD__", str(wt)))
    else:
        data = {"session_id": SESSION, "cwd": str(wt), "hook_event_name": name}
    return {**data, **more}


def _bash(wt: Path, which: str, **more: Any) -> dict[str, Any]:
    return payload("Bash", which, wt, session_id=SESSION, **more)


# -- interrupted, not run -------------------------------------------------------------------------


@pytest.mark.parametrize("moved_on", ["Stop", "UserPromptSubmit", "SessionEnd"])
def test_a_call_that_ran_and_lost_its_result_is_interrupted_with_its_file(repo: Path, moved_on: str) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    assert hook("claude-code", _bash(wt, "pre")).exit_code == 0
    write(wt, "slow_begun.txt", "begun\n")  # what the command wrote before Esc / Ctrl-C stopped it
    assert hook("claude-code", _event(moved_on, wt, session_id=SESSION, reason="prompt_input_exit")).exit_code == 0
    entry = reopen(run).entry(BASH)
    assert entry.status.value == "interrupted" and [f.path for f in entry.files] == ["slow_begun.txt"]
    assert entry.error is not None and entry.error.startswith("interrupted:")
    report = resume(reopen(run))  # never offered again: it is not uncertain, and it is not not_run
    assert BASH not in [u.call_id for u in report.uncertain]
    assert reopen(run).entry(BASH).status.value == "interrupted"


def test_leaving_with_ctrl_c_while_a_call_is_open_interrupts_it(repo: Path) -> None:
    # Claude Code reads Ctrl-C as a key (no SIGINT reaches anyone) and exits 0; its SessionEnd says how.
    run = start_run(repo)
    wt = Path(run.worktree)
    assert hook("claude-code", _bash(wt, "pre")).exit_code == 0  # `sleep 30`: it changes nothing
    assert hook("claude-code", _event("SessionEnd", wt, session_id=SESSION, reason="prompt_input_exit")).exit_code == 0
    entry = reopen(run).entry(BASH)
    assert entry.status.value == "interrupted" and "Ctrl-C" in (entry.error or "")


def test_a_call_with_no_sign_of_running_is_not_run(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    assert hook("claude-code", _bash(wt, "pre")).exit_code == 0  # the user said no at the prompt
    assert hook("claude-code", _event("Stop", wt, session_id=SESSION)).exit_code == 0
    entry = reopen(run).entry(BASH)
    assert entry.status.value == "not_run" and entry.files == []


def test_claude_codes_own_interrupt_is_interrupted(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", _bash(wt, "pre"))
    failure = _bash(wt, "failure", is_interrupt=True, tool_use_id=BASH)
    assert hook("claude-code", failure).exit_code == 0
    assert reopen(run).entry(BASH).status.value == "interrupted"


def test_took_is_the_tools_own_time_and_the_wait_at_the_prompt_is_shown_apart(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", _bash(wt, "pre"))
    time.sleep(1.2)  # the user reads the permission prompt
    assert hook("claude-code", _bash(wt, "post", duration_ms=150)).exit_code == 0
    entry = reopen(run).entry(BASH)
    assert entry.started_at is not None and entry.finished_at is not None
    took = (entry.finished_at - entry.started_at).total_seconds()
    waited = (entry.started_at - entry.created_at).total_seconds()
    assert abs(took - 0.15) < 0.01 and waited >= 1.0
    out = CliRunner().invoke(cli, ["-C", str(repo), "log", run.run_id], catch_exceptions=False).output
    assert "at the agent's prompt]" in out and "0.15s" in out


def test_a_ui_rejected_gemini_call_is_not_run_at_the_next_prompt(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    doc = json.loads((FIXTURES / "gemini" / "run_shell_command.json").read_text().replace("__CWD__", str(wt)))
    before = doc["before"]
    assert hook("gemini", before).exit_code == 0
    (call,) = reopen(run).entries()
    assert call.status.value == "started"
    prompt = {"session_id": before["session_id"], "cwd": str(wt), "hook_event_name": "BeforeAgent", "prompt": "hi"}
    result = hook("gemini", prompt)
    assert result.exit_code == 0 and result.stdout.strip() == "{}"
    assert reopen(run).entry(call.call_id).status.value == "not_run"


# -- bound to its session -------------------------------------------------------------------------


def _session(token: str) -> subprocess.Popen[bytes]:
    """A live process of a sandbox session (what ``sandbox run`` starts with the token)."""
    return subprocess.Popen(["sleep", "60"], env={**os.environ, "SANDBOX_SESSION": token})


def _hook_in(token: str | None, data: dict[str, Any], wt: Path, forged: str | None = None) -> dict[str, Any]:
    """``sandbox hook claude-code`` run by a process of session ``token`` (None: of none), which sets
    ``SANDBOX_SESSION=forged`` for the hook itself when given (what a confined agent can do)."""
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_SESSION"}
    if token:
        env["SANDBOX_SESSION"] = token
    exe = Path(sys.executable).parent / "sandbox"
    # A child of the session's process, not an exec of it: the session's process stays its ancestor.
    inner = f"SANDBOX_SESSION={forged} " if forged else ""
    done = subprocess.run(
        ["sh", "-c", f'{inner}{exe} hook claude-code; code=$?; exit "$code"'],
        cwd=wt,
        env=env,
        input=json.dumps(data).encode(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    return {"code": done.returncode, "err": done.stderr.decode()}


@pytest.fixture
def served(repo: Path) -> Iterator[Run]:
    run = start_run(repo)
    host = Host(Project(run.project.common_dir))
    thread = threading.Thread(target=host.serve, kwargs={"idle_exit": 600.0, "tick": 0.1}, daemon=True)
    thread.start()
    wait_until(lambda: wire.Client(run.project.common_dir).ping())
    yield run
    host.request_stop()
    thread.join(timeout=30)


@pytest.mark.parametrize("hosted", [True, False], ids=["host", "in-process"])
def test_a_payload_from_another_session_touches_nothing(repo: Path, hosted: bool, request: Any) -> None:
    run = request.getfixturevalue("served") if hosted else start_run(repo)
    wt = Path(run.worktree)
    victim, attacker = os.urandom(16).hex(), os.urandom(16).hex()  # machine-wide: none of another suite's
    alive = [_session(victim), _session(attacker)]
    try:
        assert _hook_in(victim, _bash(wt, "pre"), wt)["code"] == 0
        assert reopen(run).state().data.sessions == {SESSION: victim}
        write(wt, "victim.txt", "running\n")
        # The attacker names the victim's agent session, even with the victim's token in its own environment.
        for forged in (None, victim):
            stop = _hook_in(attacker, _event("Stop", wt, session_id=SESSION), wt, forged=forged)
            assert stop["code"] == 1 and "another sandbox session" in stop["err"], stop
            post = _hook_in(attacker, _bash(wt, "post"), wt, forged=forged)
            assert post["code"] == 1 and "another sandbox session" in post["err"]
        assert reopen(run).entry(BASH).status.value == "started"
        assert _hook_in(victim, _bash(wt, "post"), wt)["code"] == 0  # its own session finishes it
        entry = reopen(run).entry(BASH)
        assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["victim.txt"]
    finally:
        for proc in alive:
            proc.kill()
            proc.wait()


def test_an_agent_session_continues_in_a_new_sandbox_session_once_the_old_one_is_gone(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    old, new = os.urandom(16).hex(), os.urandom(16).hex()  # looked for machine-wide: this test's own
    first = _session(old)
    assert _hook_in(old, _bash(wt, "pre"), wt)["code"] == 0
    assert _hook_in(old, _bash(wt, "post"), wt)["code"] == 0
    first.kill()
    first.wait()
    # `sandbox run RUN -- claude --resume ID`: the same agent session under a new sandbox session.
    again = payload("Bash", "pre", wt, "toolu_resumed", session_id=SESSION)
    assert _hook_in(new, again, wt)["code"] == 0
    assert reopen(run).state().data.sessions == {SESSION: new}


def test_a_result_for_a_refused_call_is_a_violation(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", _bash(wt, "pre"))
    call = reopen(run).entry(BASH)
    reopen(run).not_run(call.call_id, "refused")
    assert CliRunner().invoke(cli, ["-C", str(repo), "deny", run.run_id, BASH]).exit_code == 0
    # Same tool and input again: the sandbox refuses it before it runs; the agent reports a result anyway.
    again = payload("Bash", "pre", wt, "toolu_again", session_id=SESSION)
    assert "deny" in hook("claude-code", again).stdout
    assert hook("claude-code", payload("Bash", "post", wt, "toolu_again", session_id=SESSION)).exit_code == 0
    entry = reopen(run).entry("toolu_again")
    assert entry.status.value == "violation" and "ran anyway" in (entry.error or "")
    status = CliRunner().invoke(cli, ["-C", str(repo), "status", run.run_id], catch_exceptions=False).output
    log = CliRunner().invoke(cli, ["-C", str(repo), "log", run.run_id], catch_exceptions=False).output
    assert "violation" in status and "violation" in log


# -- the end of a sandbox session -----------------------------------------------------------------


def _started_in(run: Run, token: str, call_id: str, agent_session: str = SESSION) -> None:
    run.start_call(
        "Bash", {"command": "sleep 30"}, call_id=call_id, procs=ProcessScope(token=token), agent_session=agent_session
    )


def test_ctrl_c_at_the_end_of_a_session_leaves_its_open_call_interrupted(repo: Path) -> None:
    run = start_run(repo)
    _started_in(run, "e" * 32, "toolu_sleep")
    result = SessionResult(returncode=0, hosted_hooks=False, scope=ProcessScope(token="e" * 32))
    result.interrupted = "interrupted: the session was stopped with Ctrl-C and the agent exited 0"
    assert settle_session(run, result) == ["toolu_sleep"]
    entry = reopen(run).entry("toolu_sleep")
    assert entry.status.value == "interrupted" and "Ctrl-C" in (entry.error or "")


def test_a_session_that_ended_normally_leaves_an_untouched_call_not_run(repo: Path) -> None:
    run = start_run(repo)
    _started_in(run, "f" * 32, "toolu_asked")
    _started_in(run, "0" * 32, "toolu_other", "another-agent-session")  # another sandbox session's call
    result = SessionResult(returncode=0, hosted_hooks=False, scope=ProcessScope(token="f" * 32))
    assert settle_session(run, result) == ["toolu_asked"]
    assert reopen(run).entry("toolu_asked").status.value == "not_run"
    assert reopen(run).entry("toolu_other").status.value == "started"


# -- no bubblewrap process is the agent's leftover ------------------------------------------------


def test_the_sandboxs_own_bubblewrap_is_never_reported_as_the_agents_leftover() -> None:
    from sandbox.agent import launch, procs

    token = os.urandom(16).hex()
    env = {**os.environ, "SANDBOX_SESSION": token}
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "bubblewrap is installed on this project's machines (apt-get install bubblewrap)"
    # The sandbox's bubblewrap (and its init in the new PID namespace) still there when the agent ended,
    # and one process the agent really left behind.
    sandbox_proc = subprocess.Popen(
        [bwrap, "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
         "sleep", "60"],
        env=env,
    )  # fmt: skip
    leftover = subprocess.Popen(["sleep", "61"], env=env)
    try:
        wait_until(lambda: len(procs.find(token)) >= 4)  # bwrap, its init, its sleep, the leftover
        result = SessionResult(returncode=0, hosted_hooks=True, scope=ProcessScope(token=token))
        launch._stop_survivors(result, grace=1.0)
        assert [p["pid"] for p in result.stopped] == [leftover.pid], result.stopped
        assert "bwrap" not in json.dumps(result.stopped)
        assert procs.find(token) == []  # the sandbox's own processes were stopped too, unreported
    finally:
        for proc in (sandbox_proc, leftover):
            proc.kill()
            proc.wait()


# -- the agent's transcript as evidence (a Bash stopped with Esc sends no hook) ---------------------


def _transcript(run: Run, records: list[dict[str, Any]], session: str = SESSION) -> Path:
    """The run's Claude Code transcript of ``session`` holding ``records``, where Claude Code writes it."""
    from sandbox.agent.adapters import claude_code
    from sandbox.agent.sessions import ClaudeCode

    path = Path(ClaudeCode().place(claude_code.config_home(run.dir), run.worktree, session))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


#: The tool result's text for a tool the user stopped (Claude Code 2.1.328).
STOPPED_TEXT = "[Request interrupted by user for tool use]"


def _asked(call_id: str = BASH) -> dict[str, Any]:
    """The assistant record asking for the Bash call (as Claude Code 2.1.328 writes it)."""
    block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "sleep 30"}}
    message = {"id": "msg_01", "role": "assistant", "type": "message", "content": [block]}
    return {"type": "assistant", "sessionId": SESSION, "uuid": "a1", "parentUuid": None, "message": message}


def _result(tool_use_result: Any, call_id: str = BASH, text: str = STOPPED_TEXT, **more: Any) -> dict[str, Any]:
    """The user record holding the call's tool result and Claude Code's ``toolUseResult`` for it."""
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": True}
    return {"type": "user", "sessionId": SESSION, "uuid": "u1", "parentUuid": "a1",
            "message": {"role": "user", "content": [block]}, "toolUseResult": tool_use_result, **more}  # fmt: skip


#: What Claude Code 2.1.328 wrote (measured, tests/agents/test_interactive_calls.py) for a Bash stopped
#: with Esc while it ran, and for one refused at its permission prompt.
REFUSED_TEXT = "The user doesn't want to proceed with this tool use. The tool use was rejected."
STOPPED = _result("User rejected tool use", text=REFUSED_TEXT, toolDenialKind="user-rejected")
#: A headless call Claude Code's permission check refused (measured with 2.1.328): it never started.
NOT_ALLOWED = _result(
    "Error: Claude requested permissions to write to /w/src/new.py, but you haven't granted it yet.",
    text="Claude requested permissions to write to /w/src/new.py, but you haven't granted it yet.",
    toolDenialKind="user-rejected",
)
REFUSED = {**STOPPED, "toolDenialBeforeRun": True}
#: A tool's own output object (the Bash tool's, with its ``interrupted`` flag).
OWN_OUTPUT = _result({"stdout": "", "stderr": "", "interrupted": True, "isImage": False})


@pytest.mark.parametrize(("moved_on", "said"), [("UserPromptSubmit", STOPPED), ("Stop", OWN_OUTPUT)])
def test_a_bash_stopped_with_esc_that_wrote_nothing_is_interrupted_from_the_transcript(
    repo: Path, moved_on: str, said: dict[str, Any]
) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    assert hook("claude-code", _bash(wt, "pre")).exit_code == 0
    # Esc while `sleep 30` ran: no PostToolUse, no file; the transcript has a result for it after it started.
    _transcript(run, [_asked(), said])
    assert hook("claude-code", _event(moved_on, wt, session_id=SESSION)).exit_code == 0
    entry = reopen(run).entry(BASH)
    assert entry.status.value == "interrupted" and entry.files == [], entry.error
    assert "transcript" in (entry.error or "")
    assert BASH not in [u.call_id for u in resume(reopen(run)).uncertain]


PLAN_MODE = _result("Error: Cannot write to /w/src/new.py while in plan mode.", toolDenialKind="user-rejected")


@pytest.mark.parametrize(
    "said", [REFUSED, NOT_ALLOWED, PLAN_MODE], ids=["rejected-at-the-prompt", "not-allowed-headless", "plan-mode"]
)
def test_a_bash_the_user_rejected_at_its_prompt_stays_not_run(repo: Path, said: dict[str, Any]) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", _bash(wt, "pre"))
    _transcript(run, [_asked(), said])
    hook("claude-code", _event("UserPromptSubmit", wt, session_id=SESSION))
    assert reopen(run).entry(BASH).status.value == "not_run"


def test_the_transcript_evidence_is_read_only_inside_the_runs_agent_home(repo: Path, tmp_path: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", _bash(wt, "pre"))
    # The agent points its project folder at a transcript of its own making elsewhere: not read.
    path = _transcript(run, [_asked(), STOPPED])
    outside = tmp_path / "forged"
    path.parent.rename(outside)
    path.parent.symlink_to(outside)
    # The payload's transcript_path names it too: never trusted.
    prompt = _event("UserPromptSubmit", wt, session_id=SESSION, transcript_path=str(outside / path.name))
    assert hook("claude-code", prompt).exit_code == 0
    assert reopen(run).entry(BASH).status.value == "not_run"


def test_a_fifo_or_a_huge_transcript_neither_hangs_nor_slows_the_hook(repo: Path) -> None:
    from sandbox.agent.adapters import claude_code

    run = start_run(repo)
    path = _transcript(run, [])
    path.unlink()
    os.mkfifo(path)  # opening it for reading would wait for a writer forever
    began = time.monotonic()
    assert claude_code.call_evidence(run.dir, SESSION, BASH) is None
    path.unlink()
    filler = json.dumps({"type": "progress", "data": "x" * 1000}) + "\n"
    old = _result("User rejected tool use", call_id="toolu_early", toolDenialKind="user-rejected")  # beyond the tail
    path.write_text(json.dumps(old) + "\n" + filler * 4000 + json.dumps(STOPPED) + "\n")
    assert claude_code.call_evidence(run.dir, SESSION, BASH) == "ran"
    assert claude_code.call_evidence(run.dir, SESSION, "toolu_early") is None
    assert time.monotonic() - began < 1.0


def test_a_gemini_calls_took_says_it_includes_the_wait_at_its_prompt(repo: Path) -> None:
    # Gemini CLI's BeforeTool comes before its permission prompt and no payload gives a tool time:
    # its TOOK runs from the BeforeTool, and log says so rather than show it as the tool's own time.
    run = start_run(repo)
    wt = Path(run.worktree)
    doc = json.loads((FIXTURES / "gemini" / "run_shell_command.json").read_text().replace("__CWD__", str(wt)))
    assert hook("gemini", doc["before"]).exit_code == 0
    assert hook("gemini", doc["after"]).exit_code == 0
    (call,) = reopen(run).entries()
    assert call.status.value == "succeeded"
    log = CliRunner().invoke(cli, ["-C", str(repo), "log", run.run_id], catch_exceptions=False).output
    assert "[TOOK includes any wait at Gemini's prompt: it reports no tool time]" in log
    shown = CliRunner().invoke(cli, ["-C", str(repo), "log", run.run_id, "--call", call.call_id]).output
    assert "includes any wait at Gemini's prompt" in shown
    # A Claude Code call, timed by the agent (duration_ms), says nothing of the kind.
    hook("claude-code", _bash(wt, "pre"))
    hook("claude-code", _bash(wt, "post", duration_ms=150))
    log = CliRunner().invoke(cli, ["-C", str(repo), "log", run.run_id], catch_exceptions=False).output
    assert log.count("includes any wait") == 1
