"""End to end: a fake Claude Code replays recorded hook payloads under ``sandbox run``; then log,
apply and undo."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import sandbox_cmd, tree_digest, user_state
from tests.hook_fixtures import FIXTURES, fixture

FAKE_AGENT = FIXTURES / "agents" / "fake_claude.py"


def script(worktree: str) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The session's steps and, per tool_use_id, the files the log must show."""
    steps: list[dict[str, Any]] = []
    expected: dict[str, list[str]] = {}

    def call(tool: str, effect: dict[str, Any] | None, files: list[str], which: str = "post") -> None:
        doc = fixture("claude-code", tool, worktree)
        post = doc[which]
        pre = {**doc["pre"], "tool_use_id": post["tool_use_id"]}
        steps.append({"pre": pre, "effect": effect, "post": post})
        expected[post["tool_use_id"]] = files

    call("Read", None, [])
    call("Write", {"write": {"src/greet.py": "def greet(name):\n    return f'hello {name}'\n"}}, ["src/greet.py"])
    call("Edit", {"write": {"src/app.py": "print('app v2')\n"}}, ["src/app.py"])
    call("MultiEdit", {"write": {"src/util.py": "X = 3\n"}}, ["src/util.py"])
    call("NotebookEdit", {"write": {"notebooks/analysis.ipynb": '{"cells": []}\n'}}, ["notebooks/analysis.ipynb"])
    call("Glob", None, [])
    call("Grep", None, [])
    call("LS", None, [])
    call(
        "Bash",
        {"sh": "mkdir -p build && echo built > build/out.txt && echo data > data.txt"},
        ["build/out.txt", "data.txt"],
    )
    call("Bash", {"sh": "echo half > half.txt; false"}, ["half.txt"], which="failure")
    call("mcp__memory__create_entities", None, [])
    call("WebFetch", None, [])
    call("WebSearch", None, [])
    call("Edit", None, [], which="failure")  # old_string not found: nothing changed
    return steps, expected


def test_scripted_claude_session(repo: Path, tmp_path: Path) -> None:
    before_state = user_state(repo)
    before_files = tree_digest(repo)
    start = sandbox_cmd("start", "--json", cwd=repo)
    info = json.loads(start.stdout)
    run_id, worktree = info["run"], info["worktree"]
    assert sandbox_cmd("hooks", "install", "claude-code", run_id, cwd=repo).returncode == 0
    steps, expected = script(worktree)
    steps.append({"effect": {"write": {"outside.txt": "made between tool calls\n"}}})  # no hook
    proc = sandbox_cmd(  # the steps on stdin: the confined agent has a /tmp of its own
        "run",
        run_id,
        "--hooks",
        "none",
        "--",
        sys.executable,
        str(FAKE_AGENT),
        "-",
        cwd=repo,
        input=json.dumps(steps).encode(),
    )
    assert proc.returncode == 0, proc.stderr.decode()

    entries = json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)
    by_id = {e["call_id"]: e for e in entries}
    for call_id, files in expected.items():
        assert sorted(f["path"] for f in by_id[call_id]["files"]) == files, call_id
    assert len([e for e in entries if e["call_id"] in expected]) == len(expected)  # one call per tool_use_id
    failed = [e["tool_name"] for e in entries if e["status"] == "failed"]
    assert failed == ["Bash", "Edit"]
    assert by_id["toolu_01FetchK1l2M3n4O5p6Q7r8"]["replay_policy"] == "never"
    extra = [e for e in entries if e["call_id"] not in expected]
    assert [(e["tool_name"], [f["path"] for f in e["files"]]) for e in extra] == [("agent_session", ["outside.txt"])]
    diff = sandbox_cmd("diff", run_id, "--stat", cwd=repo).stdout.decode()
    assert "settings.local.json" not in diff and "outside.txt" in diff
    assert user_state(repo) == before_state and tree_digest(repo) == before_files

    pytest.importorskip("sandbox.merge.mergeback")
    applied = sandbox_cmd("apply", run_id, cwd=repo)
    assert applied.returncode == 0, applied.stderr.decode()
    assert (repo / "src/greet.py").read_text() == "def greet(name):\n    return f'hello {name}'\n"
    assert (repo / "src/app.py").read_text() == "print('app v2')\n"
    assert (repo / "build/out.txt").exists() and not (repo / ".claude").exists()
    for _ in range(len(entries) + 1):
        if tree_digest(repo) == before_files:
            break
        undone = sandbox_cmd("undo", run_id, cwd=repo)
        assert undone.returncode == 0, undone.stderr.decode()
    assert tree_digest(repo) == before_files
    assert user_state(repo)["refs"] == before_state["refs"]
