"""The Claude Code hook handler: each tool type, bad input, and the installed settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from tests.conftest import user_state, write
from tests.hook_fixtures import CLAUDE_TOOLS, FIXTURES, hook, payload, reopen, start_run


def test_fixtures_cover_every_tool_type() -> None:
    expected = {"Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "Read", "Glob", "Grep", "LS"}
    assert expected | {"WebFetch", "WebSearch"} <= set(CLAUDE_TOOLS)
    assert any(t.startswith("mcp__") for t in CLAUDE_TOOLS)


def test_write_captures_exactly_its_path(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, "stray.txt", "changed outside the call\n")
    assert hook("claude-code", payload("Write", "pre", wt)).exit_code == 0
    entry = reopen(run).entry("toolu_01WriteA1b2C3d4E5f6G7h8")
    assert entry.status.value == "started" and entry.tool_name == "Write"
    assert entry.idempotency.value == "idempotent" and entry.replay_policy.value == "auto"
    write(wt, "src/greet.py", "def greet(name):\n    return f'hello {name}'\n")
    result = hook("claude-code", payload("Write", "post", wt))
    assert result.exit_code == 0, result.output
    entry = reopen(run).entry("toolu_01WriteA1b2C3d4E5f6G7h8")
    assert entry.status.value == "succeeded"
    assert [f.path for f in entry.files] == ["src/greet.py"]  # stray.txt is not this call's


@pytest.mark.parametrize("tool,path", [("Edit", "src/app.py"), ("MultiEdit", "src/util.py")])
def test_edits_capture_their_file(repo: Path, tool: str, path: str) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload(tool, "pre", wt))
    write(wt, path, "edited\n")
    assert hook("claude-code", payload(tool, "post", wt)).exit_code == 0
    entry = reopen(run).entries()[0]
    assert [f.path for f in entry.files] == [path]
    assert entry.idempotency.value == "conditional" and entry.replay_policy.value == "ask"


def test_notebook_edit_uses_notebook_path(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("NotebookEdit", "pre", wt))
    write(wt, "notebooks/analysis.ipynb", '{"cells": []}\n')
    hook("claude-code", payload("NotebookEdit", "post", wt))
    assert [f.path for f in reopen(run).entries()[0].files] == ["notebooks/analysis.ipynb"]


def test_bash_scans_without_a_watcher(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("Bash", "pre", wt))
    write(wt, "build/out.txt", "built\n")
    write(wt, "data.txt", "data\n")
    (wt / "src" / "util.py").unlink()
    assert hook("claude-code", payload("Bash", "post", wt)).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.tool_name == "Bash" and entry.replay_policy.value == "ask"
    assert sorted(f.path for f in entry.files) == ["build/out.txt", "data.txt", "src/util.py"]


@pytest.mark.parametrize("tool", ["Read", "Glob", "Grep", "LS"])
def test_read_only_calls_are_recorded_without_a_commit(repo: Path, tool: str) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, "src/app.py", "changed meanwhile\n")  # not this call's doing: not captured
    hook("claude-code", payload(tool, "pre", wt))
    assert hook("claude-code", payload(tool, "post", wt)).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "succeeded" and entry.commit is None and entry.files == []
    assert entry.idempotency.value == "idempotent"


@pytest.mark.parametrize("tool", ["WebFetch", "WebSearch", "mcp__memory__create_entities"])
def test_external_calls_are_never_replayed(repo: Path, tool: str) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload(tool, "pre", wt))
    hook("claude-code", payload(tool, "post", wt))
    entry = reopen(run).entries()[0]
    assert entry.idempotency.value == "non_idempotent" and entry.replay_policy.value == "never"
    assert entry.side_effects == [f"external:{tool}"] and entry.commit is None


def test_configured_mcp_tool_policy(repo: Path) -> None:
    write(repo, ".sandbox.toml", '[[tools]]\nmatch = "mcp__memory__*"\nkind = "read"\n')
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("mcp__memory__create_entities", "pre", wt))
    entry = reopen(run).entries()[0]
    assert entry.idempotency.value == "idempotent" and entry.replay_policy.value == "auto"


def test_unknown_tool_is_recorded_conservatively(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    pre = payload("Bash", "pre", wt, "toolu_task", tool_name="Task", tool_input={"prompt": "refactor"})
    assert hook("claude-code", pre).exit_code == 0
    write(wt, "subagent.txt", "made by a subagent\n")
    post = payload("Bash", "post", wt, "toolu_task", tool_name="Task", tool_input={"prompt": "refactor"})
    assert hook("claude-code", post).exit_code == 0
    entry = reopen(run).entries()[0]
    assert (entry.tool_name, entry.idempotency.value, entry.replay_policy.value) == ("Task", "conditional", "ask")
    assert [f.path for f in entry.files] == ["subagent.txt"]


def test_failure_event_marks_the_call_failed(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    fail = payload("Bash", "failure", wt)
    hook("claude-code", {**fail, "hook_event_name": "PreToolUse"})
    write(wt, "partial.txt", "half done\n")
    assert hook("claude-code", fail).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "failed" and entry.error == "Exit code 2"  # the real payload's first line
    assert [f.path for f in entry.files] == ["partial.txt"]


def test_finish_without_start_is_recorded_late(repo: Path) -> None:
    # Recorded with its changes, but as a violation: the sandbox never vouched for it (issue 25.5).
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, "src/greet.py", "late\n")
    assert hook("claude-code", payload("Write", "post", wt)).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "violation" and [f.path for f in entry.files] == ["src/greet.py"]
    assert entry.error is not None and "without asking first" in entry.error


def test_repeated_events_are_idempotent(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    for _ in range(2):
        assert hook("claude-code", payload("Write", "pre", wt)).exit_code == 0
    write(wt, "src/greet.py", "x\n")
    for _ in range(2):
        assert hook("claude-code", payload("Write", "post", wt)).exit_code == 0
    assert len(reopen(run).entries()) == 1


@pytest.mark.parametrize(
    "data,words",
    [
        (b"{not json", "not valid JSON"),
        (b"", "empty"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"hook_event_name": "PreToolUse", "cwd": "/"}', "no 'tool_name'"),
    ],
)
def test_bad_input_one_line_non_blocking(repo: Path, data: bytes, words: str) -> None:
    run = start_run(repo)
    result = hook("claude-code", data)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.output
    assert reopen(run).entries() == []


def test_oversized_payload(repo: Path) -> None:
    start_run(repo)
    result = hook("claude-code", b" " * (8 * 1024 * 1024 + 10))
    assert result.exit_code == 1 and "larger than 8 MiB" in result.stderr


def test_strict_blocks_with_exit_2(repo: Path) -> None:
    result = hook("claude-code", b"{oops", "--strict")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1


def test_strict_from_settings(repo: Path, tmp_path: Path) -> None:
    write(repo, ".sandbox.toml", "[hooks]\nstrict = true\n")
    run = start_run(repo)
    outside = payload("Write", "pre", run.worktree, file_path=str(tmp_path / "elsewhere.txt"))
    outside["tool_input"] = {"file_path": str(tmp_path / "elsewhere.txt"), "content": "x"}
    assert hook("claude-code", outside).exit_code == 2


def test_cwd_outside_any_run(repo: Path) -> None:
    start_run(repo)
    result = hook("claude-code", payload("Read", "pre", repo))
    assert result.exit_code == 1 and "not inside a sandbox run's worktree" in result.stderr


def test_file_path_outside_worktree_is_refused(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    target = str(repo / "README.md")  # the user's own file
    for which in ("pre", "post"):
        data = payload("Write", which, wt)
        data["tool_input"] = {"file_path": target, "content": "x"}
        result = hook("claude-code", data)
        assert result.exit_code == 1 and "outside the worktree" in result.stderr
    assert reopen(run).entries() == []


def test_non_tool_events_are_ignored(repo: Path) -> None:
    run = start_run(repo)
    event = {"session_id": "s", "cwd": run.worktree, "hook_event_name": "SessionStart", "source": "startup"}
    assert hook("claude-code", event).exit_code == 0
    assert reopen(run).entries() == []


# -- sandbox hooks install ------------------------------------------------------------------------


def test_install_merges_and_never_reaches_the_patch(repo: Path) -> None:
    before = user_state(repo)
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, ".claude/settings.local.json", json.dumps({"permissions": {"allow": ["Bash(ls:*)"]}}))
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(cli, ["-C", str(repo), "hooks", "install", "claude-code", run.run_id])
        assert result.exit_code == 0, result.output
    settings = json.loads((wt / ".claude/settings.local.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(ls:*)"]}
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        commands = [h["command"] for g in settings["hooks"][event] for h in g["hooks"]]
        assert len(commands) == 1 and commands[0].endswith("hook claude-code")
    assert not (repo / ".claude").exists()
    # A Bash call scans the worktree: the settings file must not be captured.
    hook("claude-code", payload("Bash", "pre", wt))
    write(wt, "data.txt", "data\n")
    write(wt, ".claude/other.json", "{}")
    hook("claude-code", payload("Bash", "post", wt))
    diff = runner.invoke(cli, ["-C", str(repo), "diff", run.run_id, "--stat"])
    assert "data.txt" in diff.output and "settings.local.json" not in diff.output
    assert ".claude/other.json" in diff.output
    assert user_state(repo) == before


def test_install_refuses_malformed_settings(repo: Path) -> None:
    run = start_run(repo)
    write(Path(run.worktree), ".claude/settings.local.json", "{broken")
    result = CliRunner().invoke(cli, ["-C", str(repo), "hooks", "install", "claude-code", run.run_id])
    assert result.exit_code == 1 and "not valid JSON" in result.stderr


def test_shipped_settings_match_the_handler() -> None:
    shipped = json.loads((Path(__file__).resolve().parents[2] / "hooks/claude-code/settings.json").read_text())
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert shipped["hooks"][event][0]["hooks"][0]["command"] == "sandbox hook claude-code"


# -- honest end states, denials and the sandbox's own permission answers (issue #9) -----------


def _settle(event: str, wt: Path, **more: Any) -> dict[str, Any]:
    """A real session event payload from fixtures/claude-code/events/ (StopFailure: none recorded)."""
    recorded = FIXTURES / "claude-code" / "events" / f"{event}.json"
    if recorded.exists():
        data: dict[str, Any] = json.loads(recorded.read_text().replace("__CWD__", str(wt)))
    else:
        data = {"session_id": "5f0c9e8a-1b2c-4d3e-9f00-1234567890ab", "cwd": str(wt), "hook_event_name": event}
    return {**data, **more}


def _decision(result: Any) -> dict[str, Any] | None:
    out = result.stdout.strip()
    if not out:
        return None
    answer: dict[str, Any] = json.loads(out)["hookSpecificOutput"]
    return answer


@pytest.mark.parametrize("event", ["Stop", "SessionEnd", "UserPromptSubmit", "StopFailure"])
def test_a_call_the_agent_never_ran_ends_not_run(repo: Path, event: str) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    assert hook("claude-code", payload("Bash", "pre", wt)).exit_code == 0  # refused by Claude Code: no Post*
    other = payload("Bash", "pre", wt, "toolu_other_session", session_id="another-session")
    assert hook("claude-code", other).exit_code == 0
    # (Not prompt_input_exit: leaving with Ctrl-C while a call is open interrupts it, test_call_evidence.)
    result = hook("claude-code", _settle(event, wt, reason="logout"))
    assert result.exit_code == 0 and result.stdout == ""
    entry = reopen(run).entry("toolu_01BashE5f6G7h8I9j0K1l2")
    assert entry.status.value == "not_run" and entry.files == [] and entry.commit is None
    assert entry.error and "\n" not in entry.error and "Claude Code" in entry.error
    assert reopen(run).entry("toolu_other_session").status.value == "started"  # not this session's
    # A finish that arrives afterwards says it ran after all: a violation, never succeeded, never uncertain.
    assert hook("claude-code", payload("Bash", "post", wt)).exit_code == 0
    assert reopen(run).entry("toolu_01BashE5f6G7h8I9j0K1l2").status.value == "violation"


def test_resume_tells_the_model_a_call_did_not_run(repo: Path) -> None:
    from sandbox.recovery.resume import resume

    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("Bash", "pre", wt))
    hook("claude-code", _settle("Stop", wt))
    report = resume(reopen(run))
    assert report.uncertain == [] and "did not run" in report.note
    assert "Do not repeat" not in report.note  # it may be asked for again


def test_stop_leaves_finished_calls_alone(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("Write", "pre", wt))
    write(wt, "src/greet.py", "x\n")
    hook("claude-code", payload("Write", "post", wt))
    assert hook("claude-code", _settle("Stop", wt)).exit_code == 0
    assert reopen(run).entries()[0].status.value == "succeeded"


def test_a_denial_blocks_retries_under_new_ids_until_approved(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    runner = CliRunner()
    hook("claude-code", payload("Bash", "pre", wt))
    hook("claude-code", _settle("Stop", wt))
    first = "toolu_01BashE5f6G7h8I9j0K1l2"
    base = ["-C", str(repo)]
    result = runner.invoke(cli, [*base, "deny", run.run_id, first, "--reason", "no builds here"])
    assert result.exit_code == 0, result.output
    for retry in ("toolu_retry1", "toolu_retry2"):
        result = hook("claude-code", payload("Bash", "pre", wt, retry))
        assert result.exit_code == 0
        answer = _decision(result)
        assert answer is not None and answer["permissionDecision"] == "deny"
        assert "no builds here" in answer["permissionDecisionReason"] and first in answer["permissionDecisionReason"]
        entry = reopen(run).entry(retry)
        assert entry.status.value == "not_run" and "no builds here" in (entry.error or "")
    # The same tool with another input is not covered.
    changed = payload("Bash", "pre", wt, "toolu_other", tool_input={"command": "ls"})
    assert _decision(hook("claude-code", changed)) is None
    result = runner.invoke(cli, [*base, "approve", run.run_id, first])
    assert result.exit_code == 0 and "lifted" in result.output
    assert _decision(hook("claude-code", payload("Bash", "pre", wt, "toolu_retry3"))) is None
    assert reopen(run).entry("toolu_retry3").status.value == "started"


def test_a_policy_denial_blocks_in_every_mode(repo: Path) -> None:
    write(repo, ".sandbox.toml", '[[tools]]\nmatch = "WebFetch"\ndeny = "no network from the sandbox"\n')
    run = start_run(repo)
    wt = Path(run.worktree)
    for mode in ("default", "acceptEdits", "plan", "bypassPermissions"):
        data = payload("WebFetch", "pre", wt, f"toolu_fetch_{mode}", permission_mode=mode)
        answer = _decision(hook("claude-code", data))
        assert answer is not None and answer["permissionDecision"] == "deny"
        assert "no network from the sandbox" in answer["permissionDecisionReason"]


@pytest.mark.parametrize(
    "mode,answered", [("default", True), ("acceptEdits", True), ("plan", False), ("bypassPermissions", False)]
)
def test_edits_in_the_worktree_are_allowed_by_the_sandbox_when_asked_to(repo: Path, mode: str, answered: bool) -> None:
    write(repo, ".sandbox.toml", "[hooks]\nallow_edits = true\n")
    run = start_run(repo)
    wt = Path(run.worktree)
    answer = _decision(hook("claude-code", payload("Write", "pre", wt, permission_mode=mode)))
    if answered:
        assert answer is not None and answer["permissionDecision"] == "allow"
    else:
        assert answer is None  # plan mode means no edits; bypass needs no answer
    # Bash and the sandbox's own files are left to Claude Code and the user.
    assert _decision(hook("claude-code", payload("Bash", "pre", wt, permission_mode=mode))) is None
    own = payload("Write", "pre", wt, "toolu_settings", permission_mode=mode)
    own["tool_input"] = {"file_path": str(wt / ".claude" / "settings.local.json"), "content": "{}"}
    assert _decision(hook("claude-code", own)) is None


def test_by_default_the_agent_asks_as_it_does_outside(repo: Path) -> None:
    """No "allow" of the sandbox's own (issue #26): Claude Code asks before a Write in default mode."""
    run = start_run(repo)
    for mode in ("default", "acceptEdits"):
        answer = hook("claude-code", payload("Write", "pre", run.worktree, f"toolu_w_{mode}", permission_mode=mode))
        assert _decision(answer) is None
    write(repo, ".sandbox.toml", "[hooks]\nallow_edits = false\n")
    assert _decision(hook("claude-code", payload("Write", "pre", run.worktree, permission_mode="default"))) is None


def test_failed_bash_error_is_one_line_and_kept_in_full(repo: Path, runner: CliRunner) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    fail = payload("Bash", "failure", wt, error="Exit code 3\n" + "".join(f"line {i}\n" for i in range(2000)))
    hook("claude-code", {**fail, "hook_event_name": "PreToolUse"})
    assert hook("claude-code", fail).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "failed" and entry.error == "Exit code 3"
    assert entry.error_ref is not None  # long: a blob beside the event
    base = ["-C", str(repo)]
    listing = runner.invoke(cli, [*base, "log", run.run_id], catch_exceptions=False).output
    assert "error: Exit code 3  (in full: sandbox log" in listing and "line 5" not in listing
    full = runner.invoke(cli, [*base, "log", run.run_id, "--call", entry.call_id], catch_exceptions=False)
    assert full.exit_code == 0 and "line 1999" in full.output and "status:  failed" in full.output
    as_json = json.loads(runner.invoke(cli, [*base, "log", run.run_id, "--call", entry.call_id, "--json"]).output)
    assert as_json["error"] == "Exit code 3" and as_json["error_text"].endswith("line 1999\n")


def test_permission_denied_ends_the_call_not_run_with_claude_codes_reason(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("Bash", "pre", wt, permission_mode="plan"))
    denied = _settle("PermissionDenied", wt)  # the real payload, recorded in plan mode
    denied["tool_use_id"] = "toolu_01BashE5f6G7h8I9j0K1l2"
    assert hook("claude-code", denied).exit_code == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "not_run" and "Classifier unavailable" in (entry.error or "")
    # One that never got a PreToolUse (hooks installed late) is recorded as one not-run call.
    late = payload("Bash", "pre", wt, "toolu_late", hook_event_name="PermissionDenied", reason="rule")
    assert hook("claude-code", late).exit_code == 0
    assert reopen(run).entry("toolu_late").status.value == "not_run"


def test_strict_never_blocks_a_turn_end(repo: Path, tmp_path: Path) -> None:
    """Exit 2 on Stop would make Claude Code go on instead of stopping: strict is about tool calls."""
    write(repo, ".sandbox.toml", "[hooks]\nstrict = true\n")
    start_run(repo)
    elsewhere = tmp_path / "not-a-run"
    elsewhere.mkdir()
    for event in ("Stop", "SessionEnd", "UserPromptSubmit"):
        result = hook("claude-code", _settle(event, elsewhere), "--strict")
        assert result.exit_code == 1 and "not inside a sandbox run" in result.stderr
    assert hook("claude-code", payload("Bash", "pre", elsewhere), "--strict").exit_code == 2


def test_the_fast_hook_command_records_with_or_without_a_host(repo: Path) -> None:
    """Claude Code's hook command starts Python without site-packages; with no host it falls back."""
    import subprocess

    from sandbox.cli.hooks_cmd import hook_command

    write(repo, ".sandbox.toml", "[hooks]\nallow_edits = true\n")  # an answer to read back
    run = start_run(repo)
    wt = Path(run.worktree)
    command = hook_command("claude-code")
    assert " -I -S -c " in command and "sandbox hook claude-code" in command  # the install marker is kept
    data = json.dumps(payload("Write", "pre", wt, permission_mode="default")).encode()
    proc = subprocess.run(command, shell=True, input=data, capture_output=True, cwd=wt, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert reopen(run).entry("toolu_01WriteA1b2C3d4E5f6G7h8").status.value == "started"
    bad = subprocess.run(command, shell=True, input=b"{oops", capture_output=True, cwd=wt, timeout=60)
    assert bad.returncode == 1 and bad.stderr.decode().count("\n") == 1 and "not valid JSON" in bad.stderr.decode()


def test_a_call_made_in_a_repository_the_agent_nested_in_its_worktree_is_recorded(repo: Path) -> None:
    """``git init sub && cd sub``: the hook's cwd lies in a repository inside the worktree, which is no
    run; the hook looks past it to the run (it found none and recorded nothing: the call went unrecorded)."""
    import subprocess

    run = start_run(repo)
    nested = Path(run.worktree) / "sub"
    nested.mkdir()
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    assert hook("claude-code", payload("Bash", "pre", nested, "toolu_nested")).exit_code == 0
    write(Path(run.worktree), "made.txt", "made from sub\n")  # cd .. && echo ... > made.txt
    assert hook("claude-code", payload("Bash", "post", nested, "toolu_nested")).exit_code == 0
    entry = reopen(run).entry("toolu_nested")
    assert entry.status.value == "succeeded"
    assert [f.path for f in entry.files] == ["made.txt"]
