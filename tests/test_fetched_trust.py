"""A run from someone else is data, not instructions (issue 25).

A run travels through a shared remote, and whoever controls the remote writes its record. Here:
every command acts on the repository it runs in (never on a directory the record names); a fetched
ledger is checked against its commits before anything uses it; a plan is checked whole before the
journal, so a malformed one never half-applies; ``approve``/``deny`` are refused inside a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import NoWorkingTreeError, Project
from tests import ledger_forge as forge
from tests.conftest import git, make_repo, sandbox_cmd, tree_digest


def sb(where: Path, *args: str, code: int = 0, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(cli, ["-C", str(where), *args], catch_exceptions=False, env=env)
    assert result.exit_code == code, result.output
    return result.output


def shared(tmp_path: Path, separate: bool = True) -> tuple[Path, Path, Path]:
    """Clone A with a remote, and clone B of it (with its git dir apart from its tree: ``b.git``)."""
    a = make_repo(tmp_path / "a", {"README.md": "hello\n", "Makefile": "all:\n\ttrue\n", "src/app.py": "x = 1\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "-u", "origin", "main")
    b = tmp_path / "b"
    extra = [f"--separate-git-dir={tmp_path / 'b.git'}"] if separate else []
    git(tmp_path, "clone", "-q", *extra, str(bare), str(b))
    return a, b, bare


def made_in_a(a: Path, *commands: str) -> str:
    run_id: str = json.loads(sb(a, "start", "--json"))["run"]
    for command in commands:
        sb(a, "exec", run_id, "--", "sh", "-c", command)
    sb(a, "push", run_id)
    return run_id


# -- 1. every command acts on the repository it runs in ---------------------------------------------


def test_a_run_fetched_into_a_separate_git_dir_clone_is_applied_to_that_clone_only(tmp_path: Path) -> None:
    a, b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    before_a = tree_digest(a)
    sb(b, "fetch", "origin", run_id)
    out = sb(b, "apply", run_id, "--allow-moved-head")
    assert "Applied 1 path" in out
    assert (b / "README.md").read_text() == "hello\nagent\n"
    assert tree_digest(a) == before_a and (a / "README.md").read_text() == "hello\n"


def test_a_forged_record_naming_another_repository_or_the_git_dir_changes_nothing_there(tmp_path: Path) -> None:
    a, b, bare = shared(tmp_path)
    other = make_repo(tmp_path / "other", {"README.md": "hello\n"})
    hook = "mkdir -p hooks && printf '#!/bin/sh\\necho owned\\n' > hooks/post-checkout"
    run_id = made_in_a(a, hook, "echo x >> README.md")
    gitdir = tmp_path / "b.git"
    for target in (other, gitdir, b / ".git", a):

        def point(_i: int, event: dict[str, Any], where: Path = target) -> dict[str, Any]:
            if event["kind"] == "run_started":
                event["run"]["user_workdir"] = str(where)
            return event

        forge.rewrite(bare, run_id, point)
        shutil.rmtree(gitdir / "sandbox", ignore_errors=True)
        for ref in git(b, "for-each-ref", "--format=%(refname)", "refs/sandbox").split():
            git(b, "update-ref", "-d", ref)
        sb(b, "fetch", "origin", run_id)
        state = {p: tree_digest(p) for p in (other, a, b)}
        hooks = sorted(os.listdir(gitdir / "hooks"))
        # Inside the run's worktree (no tree of the user's around) the record is not taken either.
        project = Project(str(gitdir))
        with pytest.raises(NoWorkingTreeError):
            _ = Run.open(project, run_id).user_workdir
        # From B's tree, B's tree is the target whatever the record says.
        sb(b, "apply", run_id, "--allow-moved-head", "--dry-run")
        assert {p: tree_digest(p) for p in (other, a, b)} == state
        assert sorted(os.listdir(gitdir / "hooks")) == hooks and not (gitdir / "hooks" / "post-checkout").exists()


def test_commands_inside_the_runs_worktree_take_the_tree_noted_here_not_the_record(tmp_path: Path) -> None:
    a, b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    sb(b, "fetch", "origin", run_id)
    worktree = Path(sb(b, "path", run_id).strip().splitlines()[-1])
    assert worktree.is_dir()
    proc = sandbox_cmd("apply", "--allow-moved-head", cwd=worktree)
    assert proc.returncode == 0, proc.stderr
    assert (b / "README.md").read_text() == "hello\nagent\n" and (a / "README.md").read_text() == "hello\n"


def test_a_bare_repository_or_a_tree_of_another_repository_is_refused_in_one_line(tmp_path: Path) -> None:
    a, _b, bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    other = make_repo(tmp_path / "other", {"README.md": "hello\n"})
    for env in ({"GIT_DIR": str(bare)}, {"GIT_DIR": str(a / ".git"), "GIT_WORK_TREE": str(other)}):
        proc = sandbox_cmd("apply", run_id, cwd=other, env=env)
        assert proc.returncode != 0
        lines = proc.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr.decode(), proc.stderr
    assert (other / "README.md").read_text() == "hello\n" and (a / "README.md").read_text() == "hello\n"
    # GIT_DIR naming the repository of the tree it runs in is that repository.
    proc = sandbox_cmd("apply", run_id, cwd=a, env={"GIT_DIR": str(a / ".git")})
    assert proc.returncode == 0, proc.stderr
    assert (a / "README.md").read_text() == "hello\nagent\n"


def test_a_linked_worktree_of_the_users_is_the_target_when_the_command_runs_there(tmp_path: Path) -> None:
    a, _b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> src/app.py")
    linked = tmp_path / "linked"
    git(a, "worktree", "add", "-q", str(linked), "-b", "side")
    sb(linked, "apply", run_id)
    assert (linked / "src/app.py").read_text() == "x = 1\nagent\n"
    assert (a / "src/app.py").read_text() == "x = 1\n"


# -- 5. approve and deny are the user's ---------------------------------------------------------------


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("command", ["approve", "deny"])
def test_approve_and_deny_inside_a_sandbox_are_refused_in_one_line(repo: Path, command: str) -> None:
    run_id: str = json.loads(sb(repo, "start", "--json"))["run"]
    sb(repo, "call", "plan", run_id, "--tool", "deploy", "--call-id", "c_plan")
    exe = Path(sys.executable).parent / "sandbox"
    script = f"{exe} {command} {run_id} c_plan 2> err.txt; echo $? > code.txt"
    proc = sandbox_cmd("run", run_id, "--hooks", "none", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    worktree = Path(sb(repo, "path", run_id).strip().splitlines()[-1])
    err = (worktree / "err.txt").read_text()
    assert (worktree / "code.txt").read_text().strip() == "1", err
    assert len(err.strip().splitlines()) == 1 and "refused inside a sandbox" in err, err
    entry = json.loads(sb(repo, "log", run_id, "--json"))
    planned = [e for e in entry if e["call_id"] == "c_plan"][0]
    assert planned["status"] == "planned" and planned["approval"] is None
    # Outside any sandbox the variable alone changes nothing: the user's own shell may answer.
    proc = sandbox_cmd(command, run_id, "c_plan", cwd=repo, env={"SANDBOX_CONFINED": "1"})
    assert proc.returncode == 0, proc.stderr
