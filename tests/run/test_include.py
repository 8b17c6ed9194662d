"""Ignored files brought into new worktrees (.worktreeinclude, [tool.sandbox], .sandbox.toml)."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from tests.conftest import commit_all, make_repo, write
from tests.hook_fixtures import reopen, start_run


def make(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo", {"README.md": "hi\n", ".gitignore": ".env\nnode_modules/\n*.log\ncache/\n"})
    write(root, ".env", "SECRET=1\n")
    write(root, "node_modules/pkg/index.js", "module.exports = 1\n")
    write(root, "debug.log", "log\n")
    write(root, "cache/big.bin", b"\0" * 100)
    write(root, "notes.txt", "untracked, not ignored\n")
    return root


def scan_call(run_dir_run: object) -> None:
    run = reopen(run_dir_run)  # type: ignore[arg-type]
    call_id = run.start_call("Bash", {"command": "touch"})
    run.finish_call(call_id, "succeeded", paths=None)  # a full scan of the worktree


def test_worktreeinclude_copies_only_ignored_matches(tmp_path: Path) -> None:
    root = make(tmp_path)
    write(root, ".worktreeinclude", ".env\nnotes.txt\nREADME.md\ncache/\n")
    run = start_run(root)
    wt = Path(run.worktree)
    report = run.include_report
    assert sorted(report.copied) == [".env", "cache"] and report.linked == []
    assert (wt / ".env").read_text() == "SECRET=1\n" and not (wt / ".env").is_symlink()
    assert (wt / "cache/big.bin").read_bytes() == b"\0" * 100
    assert not (wt / "node_modules").exists() and not (wt / "debug.log").exists()
    write(wt, ".env", "SECRET=changed by the agent\n")
    write(wt, "new.txt", "agent\n")
    scan_call(run)
    diff = CliRunner().invoke(cli, ["-C", str(root), "diff", run.run_id, "--stat"])
    assert "new.txt" in diff.output and ".env" not in diff.output and "cache" not in diff.output
    assert (root / ".env").read_text() == "SECRET=1\n"  # a copy: the user's file is untouched


def test_link_mode_from_sandbox_toml(tmp_path: Path) -> None:
    root = make(tmp_path)
    write(root, ".sandbox.toml", 'include = [".env"]\nlink = ["node_modules"]\n')
    run = start_run(root)
    wt = Path(run.worktree)
    assert run.include_report.copied == [".env"] and run.include_report.linked == ["node_modules"]
    assert any("share" in w for w in run.include_report.warnings)
    assert os.path.islink(wt / "node_modules")
    assert os.readlink(wt / "node_modules") == str(root / "node_modules")
    scan_call(run)
    assert reopen(run).changed_paths() == []  # the link is private: never part of the patch


def test_pyproject_tool_sandbox_and_bad_settings(tmp_path: Path) -> None:
    root = make(tmp_path)
    write(root, "pyproject.toml", '[project]\nname = "p"\n[tool.sandbox]\ninclude = ["*.log"]\n')
    commit_all(root, "pyproject")
    run = start_run(root)
    assert run.include_report.copied == ["debug.log"]
    write(root, ".sandbox.toml", "include = [\n")
    run2 = start_run(root)
    assert run2.include_report.copied == []
    assert any("settings ignored" in w for w in run2.include_report.warnings)


def test_no_settings_no_work(repo: Path) -> None:
    run = start_run(repo)
    assert run.include_report.copied == [] and run.include_report.warnings == []
