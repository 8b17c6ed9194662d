"""The real Claude Code and Gemini CLI used interactively in ``sandbox run``, typed into with tmux (issue 26).

Each agent draws its full-screen UI in a tmux pane (160x45) against the scripted model servers; the
test types, reads the pane (``capture-pane``, bounded polling) and checks the ledger: a Bash the user
approved and then stopped with Ctrl-C is ``interrupted`` with the file it wrote (never ``not_run``), one
stopped with Esc that wrote nothing is ``interrupted`` at the next prompt (from Claude Code's transcript)
while one refused at its prompt is ``not_run``,
its TOOK is the tool's own time with the wait at the prompt shown apart, a Gemini call rejected with
Esc is ``not_run`` at the next prompt, and the exit summary speaks of its own session only.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents import gemini_server as gs
from tests.agents.anthropic_server import ModelServer, bash
from tests.agents.claude_harness import SANDBOX, claude_env, stop_services
from tests.conftest import sandbox_cmd

pytestmark = pytest.mark.agents

#: Claude Code's first-run dialogs, answered as a user who has used it before would have.
SEEN = {"fullscreenUpsellSeenCount": 99, "passesUpsellSeenCount": 99, "remoteControlUpsellSeenCount": 99}


class Pane:
    """One tmux session running a command, on a tmux server of its own (the developer's is never
    touched); what it shows, and keys typed into it."""

    def __init__(self, where: Path, name: str, command: str) -> None:
        self.tmux = ["tmux", "-S", str(where / f"{name}.sock")]
        self.name = name
        shell = f"{command}; echo SANDBOX-EXITED $?; sleep 600"
        subprocess.run([*self.tmux, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "160", "-y", "45",
                        shell], check=True)  # fmt: skip

    def text(self) -> str:
        """What the pane shows now."""
        done = subprocess.run([*self.tmux, "capture-pane", "-p", "-J", "-S", "-200", "-t", self.name],
                              capture_output=True, text=True, check=False)  # fmt: skip
        return done.stdout

    def shows(self, wanted: str, timeout: float) -> bool:
        """Whether the pane shows ``wanted`` within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if wanted in self.text():
                return True
            time.sleep(0.2)
        return False

    def wait(self, wanted: str, timeout: float = 60.0) -> str:
        """The pane's text once it shows ``wanted`` (fails the test after ``timeout`` s)."""
        if not self.shows(wanted, timeout):
            pytest.fail(f"the pane never showed {wanted!r}; it shows:\n{self.text()}")
        return self.text()

    def keys(self, *keys: str) -> None:
        """Type ``keys`` (tmux key names: Enter, Escape, C-c, or text)."""
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, check=False)


@pytest.fixture(autouse=True)
def _tmux(repo: Path) -> Iterator[None]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed; the interactive tests need it (apt-get install tmux).")
    yield
    stop_services(repo)


def _env_prefix(env: dict[str, str], keys: tuple[str, ...]) -> str:
    return "env " + " ".join(f"{k}={shlex.quote(env[k])}" for k in keys if k in env)


def _start(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    return str(info["run"]), Path(info["worktree"])


def _log(repo: Path, run_id: str) -> list[dict[str, Any]]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries: list[dict[str, Any]] = json.loads(proc.stdout)
    return entries


def _settle(repo: Path, run_id: str) -> None:
    """Wait (up to 30 s) until the run's first call is no longer ``started``."""
    deadline = time.monotonic() + 30
    while _log(repo, run_id)[0]["status"] == "started" and time.monotonic() < deadline:
        time.sleep(0.2)


def _claude_home(home: Path, worktree: Path) -> None:
    """A HOME where Claude Code was used before: onboarding done, the test key approved, the worktree trusted."""
    home.mkdir(parents=True, exist_ok=True)
    trusted = {"hasTrustDialogAccepted": True}
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": ["sk-ant-test-0000"[-20:]], "rejected": []},
        "projects": {str(worktree): trusted, os.path.realpath(worktree): trusted},
        **SEEN,
    }
    (home / ".claude.json").write_text(json.dumps(state))


CLAUDE_KEYS = ("HOME", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
               "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "IS_SANDBOX", "SANDBOX_HOOK_AUTOSTART", "PATH")  # fmt: skip


def _claude_pane(tmp_path: Path, name: str, repo: Path, run_id: str, claude_bin: str, server: ModelServer) -> Pane:
    """``sandbox run RUN -- claude --permission-mode default`` typed in ``repo``, its HOME the test's."""
    env = _env_prefix(claude_env(server, tmp_path / "claude-home"), CLAUDE_KEYS)
    agent = f"{SANDBOX} run {run_id} -- {claude_bin} --permission-mode default"
    return Pane(tmp_path, f"{name}-{os.getpid()}", f"cd {shlex.quote(str(repo))} && {env} {agent} 2>&1")


def _quit_claude(pane: Pane) -> str:
    """Two Ctrl-C at Claude Code's prompt (the second leaves); the pane once ``sandbox run`` exited.

    A model request still in flight (the prompt just sent) takes the first Ctrl-C for itself, and the second
    only arms the exit: so the pair is typed again (at most 4 times) until ``sandbox run`` has exited."""
    for _ in range(4):
        pane.keys("C-c")
        time.sleep(0.3)
        pane.keys("C-c")
        if pane.shows("SANDBOX-EXITED", 15.0):
            break
    return pane.wait("SANDBOX-EXITED")


def test_ctrl_c_during_a_running_bash_leaves_the_call_interrupted_with_its_file(
    claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    run_id, wt = _start(repo)
    _claude_home(tmp_path / "claude-home", wt)
    turns = [bash("sleep 1 && echo done > quick.txt"), bash("echo begun > slow_begun.txt && sleep 30")]
    with ModelServer(turns) as server:
        pane = _claude_pane(tmp_path, "sbx-claude", repo, run_id, claude_bin, server)
        try:
            pane.wait("manual mode")
            pane.keys("run both")
            pane.keys("Enter")
            pane.wait("Do you want to proceed?")
            time.sleep(2.0)  # the user reads the first command before saying yes
            pane.keys("Enter")
            pane.wait("slow_begun.txt && sleep 30")
            pane.wait("Do you want to proceed?")
            pane.keys("Enter")
            deadline = time.monotonic() + 30
            while not (wt / "slow_begun.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            for _ in range(3):  # stops the running command ("Interrupted"); a key can go unread while it draws
                pane.keys("C-c")
                if pane.shows("Interrupted", 5.0):
                    break
            pane.wait("Interrupted")
            shown = _quit_claude(pane)
        finally:
            pane.close()
    quick, slow = _log(repo, run_id)
    assert quick["status"] == "succeeded" and [f["path"] for f in quick["files"]] == ["quick.txt"]
    assert slow["status"] == "interrupted", shown
    assert [f["path"] for f in slow["files"]] == ["slow_begun.txt"]  # its file is its own, not a session cut's
    took = _seconds(quick["finished_at"]) - _seconds(quick["started_at"])
    waited = _seconds(quick["started_at"]) - _seconds(quick["created_at"])
    assert waited >= 1.5 and took < waited, (took, waited)
    human = sandbox_cmd("log", run_id, cwd=repo).stdout.decode()
    assert "at the agent's prompt]" in human
    resumed = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert json.loads(resumed.stdout)["uncertain"] == []  # nothing offered again
    assert "did not run" not in shown

    # A second session that does nothing: its exit summary names none of the first session's calls.
    with ModelServer([]) as server:
        pane = _claude_pane(tmp_path, "sbx-claude2", repo, run_id, claude_bin, server)
        try:
            pane.wait("manual mode")
            shown = _quit_claude(pane)
        finally:
            pane.close()
    assert "0 call(s) recorded in this session" in shown and "did not run" not in shown, shown
    assert "toolu_" not in shown  # no call of the first session is named


def test_esc_during_a_bash_that_writes_nothing_then_a_new_prompt_leaves_it_interrupted(
    claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    # No hook says a Bash stopped with Esc ran (no PostToolUse, no file); the run's transcript does.
    run_id, wt = _start(repo)
    _claude_home(tmp_path / "claude-home", wt)
    with ModelServer([bash("echo waiting && sleep 30")]) as server:
        pane = _claude_pane(tmp_path, "sbx-claude-esc", repo, run_id, claude_bin, server)
        try:
            pane.wait("manual mode")
            pane.keys("wait a bit")
            pane.keys("Enter")
            pane.wait("Bash(echo waiting && sleep 30)")
            if pane.shows("Do you want to proceed?", 3.0):  # Claude Code runs echo and sleep unasked
                pane.keys("Enter")
            time.sleep(2.0)  # the command runs
            for _ in range(3):  # Esc stops the running command; a key can go unread while it draws
                pane.keys("Escape")
                if pane.shows("Interrupted", 5.0):
                    break
            pane.wait("Interrupted")
            time.sleep(0.5)
            pane.keys("go on")
            pane.keys("Enter")  # UserPromptSubmit: the call is settled on the evidence
            _settle(repo, run_id)
            (call,) = _log(repo, run_id)  # read while the session still runs: no exit decided it
            shown = _quit_claude(pane)
        finally:
            pane.close()
    assert call["status"] == "interrupted" and call["files"] == [], (call, shown)
    assert "transcript" in (call["error"] or "")
    resumed = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert json.loads(resumed.stdout)["uncertain"] == []  # never offered again


def test_esc_at_claude_codes_permission_prompt_then_a_new_prompt_leaves_the_call_not_run(
    claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    # The other side of the evidence: a Bash the user refused at its prompt never ran.
    run_id, wt = _start(repo)
    _claude_home(tmp_path / "claude-home", wt)
    with ModelServer([bash("echo refused > refused.txt")]) as server:
        pane = _claude_pane(tmp_path, "sbx-claude-no", repo, run_id, claude_bin, server)
        try:
            pane.wait("manual mode")
            pane.keys("write it")
            pane.keys("Enter")
            pane.wait("Do you want to proceed?")
            time.sleep(0.5)
            pane.keys("Escape")
            time.sleep(1.0)
            pane.keys("go on")
            pane.keys("Enter")
            _settle(repo, run_id)
            (call,) = _log(repo, run_id)
            shown = _quit_claude(pane)
        finally:
            pane.close()
    assert call["status"] == "not_run" and call["files"] == [], (call, shown)
    assert not (wt / "refused.txt").exists()


def _seconds(text: str) -> float:
    from sandbox.fast.views import parse_time

    return parse_time(text).timestamp()


def _gemini_at_its_prompt(tmp_path: Path, name: str, repo: Path, run_id: str, gemini_bin: str, server: Any) -> Pane:
    """``sandbox run RUN -- gemini`` in a pane (API-key auth, a HOME of the test's), told "run it", once it
    asks "Allow execution" for the scripted shell call. The pane is the caller's to close."""
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    env = {
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": server.base_url,
        "GEMINI_API_KEY": "test-key",
        "SANDBOX_HOOK_AUTOSTART": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    agent = f"{SANDBOX} run {run_id} -- {gemini_bin}"
    command = f"cd {shlex.quote(str(repo))} && {_env_prefix(env, tuple(env))} {agent} 2>&1"
    pane = Pane(tmp_path, f"{name}-{os.getpid()}", command)
    try:
        pane.wait("Type your message", timeout=90)
        time.sleep(1.0)  # its input box takes keys a moment after it is drawn
        pane.keys("run it")
        pane.wait("> run it")
        time.sleep(0.5)
        pane.keys("Enter")
        pane.wait("Allow execution")
    except BaseException:
        pane.close()
        raise
    return pane


def test_esc_rejected_gemini_call_is_not_run(gemini_bin: str, repo: Path, tmp_path: Path) -> None:
    run_id, wt = _start(repo)
    turns = [gs.call("run_shell_command", command="echo hi > rejected.txt", description="scripted"), gs.text("OK.")]
    with gs.serve(turns) as server:
        pane = _gemini_at_its_prompt(tmp_path, "sbx-gemini", repo, run_id, gemini_bin, server)
        try:
            pane.keys("Escape")  # "No, suggest changes (esc)"
            time.sleep(1.0)
            pane.keys("next")
            pane.wait("> next")
            time.sleep(0.5)
            pane.keys("Enter")  # the next prompt: the rejected call is settled
            _settle(repo, run_id)
            pane.keys("/quit")
            for _ in range(3):  # the first Enter may only pick the completion it offers
                time.sleep(0.5)
                pane.keys("Enter")
                if pane.shows("SANDBOX-EXITED", 5.0):
                    break
            shown = pane.wait("SANDBOX-EXITED")
        finally:
            pane.close()
    (call,) = _log(repo, run_id)
    assert call["tool_name"] == "run_shell_command" and call["status"] == "not_run", shown
    assert call["files"] == [] and not (wt / "rejected.txt").exists()


def test_ctrl_c_during_a_running_gemini_shell_call_leaves_it_interrupted_with_its_file(
    gemini_bin: str, repo: Path, tmp_path: Path
) -> None:
    """Gemini CLI stops a running command on Ctrl-C and says so only in the tool's text ("Command was cancelled
    by user"): the call is ``interrupted`` with the file it wrote (it was recorded ``succeeded``)."""
    run_id, wt = _start(repo)
    command = "echo partial > partial.txt; sleep 120; echo late > late.txt"
    turns = [gs.call("run_shell_command", command=command, description="scripted"), gs.text("OK.")]
    with gs.serve(turns) as server:
        pane = _gemini_at_its_prompt(tmp_path, "sbx-gemcc", repo, run_id, gemini_bin, server)
        try:
            pane.keys("Enter")  # "Allow once"
            deadline = time.monotonic() + 60
            while not (wt / "partial.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert (wt / "partial.txt").exists(), pane.text()
            time.sleep(1.0)
            pane.keys("C-c")  # stops the running command
            _settle(repo, run_id)
            time.sleep(0.5)
            pane.keys("/quit")
            for _ in range(3):  # the first Enter may only pick the completion it offers
                time.sleep(0.5)
                pane.keys("Enter")
                if pane.shows("SANDBOX-EXITED", 5.0):
                    break
            shown = pane.wait("SANDBOX-EXITED")
        finally:
            pane.close()
    calls = [c for c in _log(repo, run_id) if c["tool_name"] == "run_shell_command"]
    assert len(calls) == 1, shown
    (call,) = calls
    assert call["status"] == "interrupted", (call, shown)
    assert [f["path"] for f in call["files"]] == ["partial.txt"]
    assert not (wt / "late.txt").exists()
