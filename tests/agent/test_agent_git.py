"""The agent's own git in the worktree: the run's own repository. Its commits and resets are its
changes; its branches, tags and stash stay in the run; nothing reaches the user's repository.
(tests/reliability/test_git_confinement.py tries the hostile cases.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from click.testing import CliRunner

from sandbox.agent import launch as agent
from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store import objects
from tests.conftest import git, user_state, write
from tests.hook_fixtures import reopen, start_run


def agent_git(run: Run, *args: str) -> subprocess.CompletedProcess[str]:
    """git as the agent runs it under 'sandbox run' (the run's environment)."""
    env = agent.agent_env(os.environ, run)
    return subprocess.run(["git", *args], cwd=run.worktree, env=env, capture_output=True, text=True, check=False)


def bash_call(run: Run, command: str) -> list[str]:
    """A recorded command call whose changes are found by a scan; returns the changed paths."""
    run = reopen(run)
    call_id = run.start_call("Bash", {"command": command})
    entry = run.finish_call(call_id, "succeeded", paths=None)
    return sorted(f.path for f in entry.files)


def head_file(run: Run, rel: str) -> bytes | None:
    run = reopen(run)
    entry = objects.lookup(run.repo, objects.commit_tree(run.repo, run.head()), rel)
    return None if entry is None else objects.read_blob(run.repo, entry.oid)


def test_stash_branch_and_tag_work_in_the_run_and_do_not_reach_the_user(repo: Path) -> None:
    git(repo, "stash", "list")
    before = user_state(repo)
    run = start_run(repo)
    write(Path(run.worktree), "src/app.py", "agent edit\n")
    stash = agent_git(run, "stash")
    assert stash.returncode == 0, stash.stderr
    assert (Path(run.worktree) / "src/app.py").read_text() == "print('app')\n"
    assert agent_git(run, "stash", "pop").returncode == 0
    assert (Path(run.worktree) / "src/app.py").read_text() == "agent edit\n"
    for args in (
        ["checkout", "-q", "-b", "agent-branch"],
        ["tag", "v9"],
        ["branch", "other"],
        ["update-ref", "refs/x", "HEAD"],
    ):
        result = agent_git(run, *args)
        assert result.returncode == 0, (args, result.stderr)
    assert agent_git(run, "rev-parse", "--verify", "-q", "refs/tags/v9").returncode == 0
    assert user_state(repo) == before
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/x", "refs/heads/agent-branch", "refs/tags") == ""


def test_agent_commit_counts_as_its_change(repo: Path) -> None:
    before = user_state(repo)
    run = start_run(repo)
    write(Path(run.worktree), "feature.py", "x = 1\n")
    assert agent_git(run, "add", "-A").returncode == 0
    commit = agent_git(run, "-c", "user.name=agent", "-c", "user.email=a@e", "commit", "-qm", "agent work")
    assert commit.returncode == 0, commit.stderr
    assert bash_call(run, "git commit") == ["feature.py"]
    assert head_file(run, "feature.py") == b"x = 1\n"
    assert user_state(repo) == before
    # Committing again keeps working on the run's own branch.
    write(Path(run.worktree), "feature.py", "x = 2\n")
    assert agent_git(run, "-c", "user.name=a", "-c", "user.email=a@e", "commit", "-qam", "more").returncode == 0
    assert bash_call(run, "git commit -a") == ["feature.py"]
    assert user_state(repo) == before


def test_checkout_file_and_reset_hard_are_changes(repo: Path) -> None:
    before = user_state(repo)
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, "src/app.py", "agent edit\n")
    assert bash_call(run, "edit") == ["src/app.py"]
    assert agent_git(run, "checkout", "--", "src/app.py").returncode == 0
    assert bash_call(run, "git checkout -- src/app.py") == ["src/app.py"]
    assert head_file(run, "src/app.py") == b"print('app')\n"
    # The worktree's HEAD is the snapshot; its parent is the user's HEAD: resetting to it drops the
    # user's uncommitted edit and untracked file from the worktree, and that is the agent's change.
    reset = agent_git(run, "reset", "--hard", "HEAD~1")
    assert reset.returncode == 0, reset.stderr
    assert bash_call(run, "git reset --hard HEAD~1") == ["README.md", "notes.txt"]
    assert head_file(run, "README.md") == b"hello\n" and head_file(run, "notes.txt") is None
    assert user_state(repo) == before
    assert (repo / "README.md").read_text() == "hello\nuser edit\n"


def test_user_hooks_still_run_for_agent_commits(repo: Path) -> None:
    hook_file = repo / ".git" / "hooks" / "pre-commit"
    hook_file.write_text('#!/bin/sh\necho ran > "$(git rev-parse --show-toplevel)/hook-ran.txt"\n')
    hook_file.chmod(0o755)
    run = start_run(repo)
    write(Path(run.worktree), "a.txt", "a\n")
    agent_git(run, "add", "a.txt")
    assert agent_git(run, "-c", "user.name=a", "-c", "user.email=a@e", "commit", "-qm", "c").returncode == 0
    assert (Path(run.worktree) / "hook-ran.txt").exists()


def test_status_shows_the_agents_git_and_apply_keeps_it(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    write(wt, "feature.py", "x = 1\n")
    agent_git(run, "add", "feature.py")
    assert agent_git(run, "-c", "user.name=a", "-c", "user.email=a@e", "commit", "-qm", "agent work").returncode == 0
    assert agent_git(run, "branch", "feat").returncode == 0
    assert agent_git(run, "tag", "v9").returncode == 0
    write(wt, "README.md", "stashed edit\n")
    assert agent_git(run, "stash").returncode == 0
    assert bash_call(run, "git work") == ["feature.py"]
    runner = CliRunner()
    result = runner.invoke(cli, ["-C", str(repo), "status", run.run_id, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    seen = json.loads(result.output)["agent_git"]
    assert seen["branch"] == f"sandbox/{run.run_id}" and seen["commit_count"] == 1
    assert seen["commits"][0]["subject"] == "agent work"
    assert set(seen["branches"]) == {f"sandbox/{run.run_id}", "feat"} and set(seen["tags"]) == {"v9"}
    assert seen["stash"] == 1
    text = runner.invoke(cli, ["-C", str(repo), "status", run.run_id], catch_exceptions=False).output
    assert "agent git: on branch sandbox/" in text and "1 stash entry" in text and "agent work" in text
    logged = runner.invoke(cli, ["-C", str(repo), "log", run.run_id], catch_exceptions=False).output
    assert "agent git: on branch sandbox/" in logged and "1 commit(s) by the agent" in logged
    # apply applies the agent's files only; its commits, branches, tags and stash stay in the run.
    applied = runner.invoke(cli, ["-C", str(repo), "apply", run.run_id], catch_exceptions=False)
    assert applied.exit_code == 0, applied.output
    assert (repo / "feature.py").read_text() == "x = 1\n"
    after = runner.invoke(cli, ["-C", str(repo), "status", run.run_id, "--json"], catch_exceptions=False)
    assert json.loads(after.output)["agent_git"] == seen
    assert "feat" not in git(repo, "branch") and git(repo, "tag") == ""


def test_a_fifo_the_agent_puts_in_its_git_dir_does_not_hang_status_or_log(repo: Path) -> None:
    """The run's git dir is the agent's to write: a FIFO where git keeps refs or packs would block
    any reader in open() (libgit2's too); status and log, on either read path, say nothing of the
    agent's git instead."""
    from tests.conftest import sandbox_cmd

    run = start_run(repo)
    git_dir = Path(run.git_dir)
    for where in ("packed-refs", "refs/heads/trap", "objects/pack/pack-trap.idx"):
        fifo = git_dir / where
        fifo.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(fifo)
        for args in (["status", run.run_id], ["log", run.run_id], ["status", run.run_id, "--json"]):
            done = sandbox_cmd(*args, cwd=repo, timeout=60)  # raises if it hangs
            assert done.returncode == 0, (where, args, done.stderr)
        status = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo, timeout=60).stdout)
        assert status["agent_git"] is None, where
        fifo.unlink()
    status = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo, timeout=60).stdout)
    assert status["agent_git"] is not None  # read again once the directory is plain
