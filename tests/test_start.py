"""Starting runs: the snapshot, the worktree, the refs, and that nothing of the user's changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox import objects
from sandbox.cli import cli
from sandbox.errors import NotARepositoryError
from sandbox.project import Project
from sandbox.run import Run
from tests.conftest import commit_all, git, make_repo, tree_digest, user_state, write


def start(root: Path, label: str | None = None) -> Run:
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir, label=label)


def test_snapshot_includes_uncommitted_and_untracked_but_not_ignored(repo: Path) -> None:
    run = start(repo)
    wt = Path(run.worktree)
    assert (wt / "README.md").read_text() == "hello\nuser edit\n"
    assert (wt / "notes.txt").read_text() == "untracked notes\n"
    assert not (wt / "debug.log").exists()
    base = run.repo[run.base]
    assert [str(p) for p in base.parent_ids] == [git(repo, "rev-parse", "HEAD").strip()]


def test_user_state_is_byte_identical(repo: Path) -> None:
    git(repo, "add", "src/app.py")  # something staged, so the index is not trivially HEAD's
    write(repo, "src/app.py", "print('changed after staging')\n")
    git(repo, "stash", "list")
    before_state, before_files = user_state(repo), tree_digest(repo)
    start(repo)
    assert user_state(repo) == before_state
    assert tree_digest(repo) == before_files


def test_worktree_is_detached_locked_and_refs_hidden(repo: Path) -> None:
    run = start(repo)
    assert "sandbox" not in git(repo, "branch", "-a")
    porcelain = git(repo, "worktree", "list", "--porcelain")
    block = porcelain.split(f"worktree {run.worktree}\n")[1].split("\n\n")[0]
    assert "detached" in block
    assert "locked sandbox run" in block
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objecttype)", "refs/sandbox").split("\n")
    names = {line.split()[0].rsplit("/", 1)[1]: line.split()[1] for line in refs if line}
    assert names == {"base": "commit", "head": "commit", "ledger": "commit"}
    git(repo, "worktree", "prune")
    assert os.path.isdir(run.worktree)
    assert run.worktree.startswith(os.path.realpath(repo / ".git" / "sandbox" / "worktrees"))


def test_repository_without_commits(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "empty", {"a.txt": "a\n"}, commit=False)
    run = start(root)
    assert run.info.head is None
    assert (Path(run.worktree) / "a.txt").read_text() == "a\n"
    assert not list(run.repo[run.base].parent_ids)


def test_detached_head(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "--detach")
    run = start(repo)
    assert run.info.head == head
    assert run.info.head_ref is None


def test_symlinks_exec_bits_binary_and_non_utf8_names(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    os.symlink("a.txt", root / "link")
    write(root, "tool.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "blob.bin", bytes(range(256)) * 10)
    odd = os.fsdecode(b"caf\xe9.txt")
    write(root, odd, "latin-1 name\n")
    run = start(root)
    wt = Path(run.worktree)
    assert os.readlink(wt / "link") == "a.txt"
    assert os.stat(wt / "tool.sh").st_mode & 0o111
    assert (wt / "blob.bin").read_bytes() == bytes(range(256)) * 10
    assert (wt / odd).read_text() == "latin-1 name\n"
    tree = objects.commit_tree(run.repo, run.base)
    assert objects.lookup(run.repo, tree, odd) is not None


def test_submodule_left_as_gitlink(tmp_path: Path) -> None:
    sub = make_repo(tmp_path / "sub", {"s.txt": "s\n"})
    root = make_repo(tmp_path / "super", {"a.txt": "a\n"})
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "libs/sub")
    commit_all(root, "add submodule")
    run = start(root)
    assert run.info.submodules == ["libs/sub"]
    entry = objects.lookup(run.repo, objects.commit_tree(run.repo, run.base), "libs/sub")
    assert entry is not None and entry.mode == objects.MODE_GITLINK


def test_bare_repository_and_non_repository_are_refused(tmp_path: Path, runner: CliRunner) -> None:
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    with pytest.raises(NotARepositoryError):
        Project.discover(str(tmp_path / "bare.git"))
    plain = tmp_path / "plain"
    plain.mkdir()
    for target in (tmp_path / "bare.git", plain):
        result = runner.invoke(cli, ["-C", str(target), "start"], catch_exceptions=False)
        assert result.exit_code == 2
        assert result.output.count("\n") == 1 and result.output.startswith("sandbox: ")
        assert "Traceback" not in result.output


def test_cli_start_json_and_path(repo: Path, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["-C", str(repo), "start", "--json", "--label", "first"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) >= {"run", "worktree", "base", "head"}
    assert data["head"] == git(repo, "rev-parse", "HEAD").strip()
    assert os.path.isabs(data["worktree"]) and os.path.isdir(data["worktree"])
    result = runner.invoke(cli, ["-C", str(repo), "path", data["run"]], catch_exceptions=False)
    assert result.output.strip() == data["worktree"]
    # RUN may be omitted inside the run's worktree
    result = runner.invoke(cli, ["-C", data["worktree"], "path"], catch_exceptions=False)
    assert result.output.strip() == data["worktree"]


def test_embedded_repository_is_reported_as_gitlink(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "outer", {"a.txt": "a\n"})
    make_repo(root / "vendor" / "inner", {"i.txt": "i\n"})
    run = start(root)
    assert run.info.submodules == ["vendor/inner"]
    entry = objects.lookup(run.repo, objects.commit_tree(run.repo, run.base), "vendor/inner")
    assert entry is not None and entry.mode == objects.MODE_GITLINK
