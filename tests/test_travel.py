"""A run fetched into another clone acts on that clone only: paths come from the repository the
command runs in, never from the run's record (which names the clone it was made in)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from tests.conftest import git, make_repo, tree_digest, user_state


def sb(runner: CliRunner, where: Path, *args: str) -> str:
    result = runner.invoke(cli, ["-C", str(where), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_fetched_run_applies_and_resumes_in_the_clone_it_was_fetched_into(tmp_path: Path) -> None:
    runner = CliRunner()
    a = make_repo(tmp_path / "a", {"README.md": "hello\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "push", "-q", str(bare), "main")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(bare), str(b))
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo from-the-agent > made.txt")
    git(a, "push", "-q", str(bare), "refs/sandbox/*:refs/sandbox/*")
    git(b, "fetch", "-q", "origin", "refs/sandbox/*:refs/sandbox/*")
    a_before, a_state = tree_digest(a), user_state(a)

    # In B: status names B's place for the run (none yet), apply writes into B only.
    status = json.loads(sb(runner, b, "status", run_id, "--json"))
    assert not status["worktree_exists"] and not status["worktree"].startswith(str(a))
    sb(runner, b, "apply", run_id)
    assert (b / "made.txt").read_text() == "from-the-agent\n"
    assert not (a / "made.txt").exists()
    # resume makes the run a home in B; exec then runs there and records into B's ledger.
    sb(runner, b, "resume", run_id)
    wt = Path(sb(runner, b, "path", run_id).strip())
    assert (wt / "made.txt").read_text() == "from-the-agent\n"
    assert not wt.is_relative_to(a)
    sb(runner, b, "exec", run_id, "--", "sh", "-c", "echo second > second.txt")
    assert (wt / "second.txt").exists()
    b_calls = json.loads(sb(runner, b, "log", run_id, "--json"))
    a_calls = json.loads(sb(runner, a, "log", run_id, "--json"))
    assert len(b_calls) == len(a_calls) + 1
    assert tree_digest(a) == a_before and user_state(a) == a_state
