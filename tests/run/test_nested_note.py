"""A repository the agent makes inside its worktree is recorded as nothing, and the call says so (#32
leftovers): ``log --call`` names the directory in one escaped sentence, and ``--json`` carries it in the
call's result (``nested_repositories``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import sandbox_cmd


@pytest.mark.parametrize("how", ["scan", "host"])
def test_a_nested_repository_the_agent_makes_and_stages_is_named_in_the_call(repo: Path, how: str) -> None:
    env = {"SANDBOX_HOOK_AUTOSTART": "1"} if how == "host" else {}
    started = sandbox_cmd("start", "--json", cwd=repo)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    name = "vend\x1b]0;owned\x07or"  # a title-setting escape in the directory's name
    script = (
        'mkdir "$1" && cd "$1" && git init -q && echo x > a && git add a && cd .. && '
        'git add "$1" 2>/dev/null; echo plain > top.txt'
    )
    argv = ["exec", run_id, "--call-id", "c-nested", "--", "sh", "-c", script, "sh", name]
    try:
        ran = sandbox_cmd(*argv, cwd=repo, env=env)
    finally:
        if how == "host":
            sandbox_cmd("serve", "--stop", cwd=repo)
    assert ran.returncode == 0, ran.stderr

    shown = sandbox_cmd("log", run_id, "--call", "c-nested", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert "file:    top.txt" in text  # the rest of the call is recorded as ever
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, text
    assert '"vend\\033]0;owned\\aor/" holds a git repository of its own' in notes[0]
    assert "\x1b" not in text and "\x07" not in text
    assert notes[0].count(". ") == 0 and notes[0].endswith(".")

    data = json.loads(sandbox_cmd("log", run_id, "--call", "c-nested", "--json", cwd=repo).stdout)
    assert data["result"]["nested_repositories"] == [name]
    assert [f["path"] for f in data["files"]] == ["top.txt"]


def test_a_call_that_makes_no_nested_repository_has_no_note(repo: Path) -> None:
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    ran = sandbox_cmd("exec", run_id, "--call-id", "c-plain", "--", "sh", "-c", "echo x > f", cwd=repo)
    assert ran.returncode == 0, ran.stderr
    text = sandbox_cmd("log", run_id, "--call", "c-plain", cwd=repo).stdout.decode()
    assert "note:" not in text
    data = json.loads(sandbox_cmd("log", run_id, "--call", "c-plain", "--json", cwd=repo).stdout)
    assert "nested_repositories" not in data["result"]
