"""Starting runs: the snapshot, the worktree, the refs, and that nothing of the user's changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import NotARepositoryError
from sandbox.run.run import Run
from sandbox.store import layout, objects
from sandbox.store.project import Project
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


def test_run_has_its_own_git_dir_outside_the_users_repository(repo: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    project, workdir, _ = Project.discover(str(repo), str(data))
    assert workdir is not None
    run = Run.start(project, workdir)
    home = os.path.realpath(data / "repos" / layout.repo_key(project.common_dir) / run.run_id)
    assert run.place.home == home
    assert run.worktree == os.path.join(home, "worktree") and run.git_dir == os.path.join(home, "git")
    assert not run.worktree.startswith(os.path.realpath(repo) + os.sep)
    # Its own repository: HEAD on its own branch at the snapshot, the user's objects by alternates.
    assert os.path.realpath(git(run.worktree, "rev-parse", "--absolute-git-dir").strip()) == run.git_dir
    assert git(run.worktree, "rev-parse", "--git-common-dir").strip() in (run.git_dir, "../git", ".")
    assert git(run.worktree, "symbolic-ref", "HEAD").strip() == f"refs/heads/sandbox/{run.run_id}"
    assert git(run.worktree, "rev-parse", "HEAD").strip() == run.base
    # Its own store first (what the host records for it: sandbox.store.runstore), then your objects.
    alternates = (Path(run.git_dir) / "objects" / "info" / "alternates").read_text().splitlines()
    assert alternates == [os.path.realpath(run.repo.sandbox_store), os.path.join(project.common_dir, "objects")]
    assert git(run.worktree, "status", "--porcelain") == ""
    # Nothing of it in the user's repository but the hidden refs and the run's directory.
    assert "sandbox" not in git(repo, "branch", "-a")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objecttype)", "refs/sandbox").split("\n")
    names = {line.split()[0].rsplit("/", 1)[1]: line.split()[1] for line in refs if line}
    assert names == {"base": "commit", "head": "commit", "ledger": "commit"}
    # Found from inside its worktree, without git and without the environment.
    loc = layout.locate(os.path.join(run.worktree, "src"))
    assert loc is not None and (loc.common_dir, loc.run_id) == (project.common_dir, run.run_id)
    assert Project.discover(os.path.join(run.worktree, "src"))[2] == run.run_id


def test_cli_places_runs_in_the_xdg_data_dir_or_data_dir_of_sandbox_toml(
    repo: Path, tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    result = runner.invoke(cli, ["-C", str(repo), "start", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["worktree"].startswith(os.path.realpath(tmp_path / "xdg" / "sandbox" / "repos") + os.sep)
    assert data["git_dir"] == os.path.join(os.path.dirname(data["worktree"]), "git")
    write(repo, ".sandbox.toml", 'data_dir = "~/elsewhere"\n')
    result = runner.invoke(cli, ["-C", str(repo), "start", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    second = json.loads(result.output)["worktree"]
    assert second.startswith(os.path.realpath(os.path.expanduser("~/elsewhere/repos")) + os.sep)
    # Both found from the repository, each from inside its own worktree.
    for wt in (data["worktree"], second):
        found = runner.invoke(cli, ["-C", wt, "path"], catch_exceptions=False)
        assert found.output.strip() == wt


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
    assert set(data) >= {"run", "worktree", "base", "user_head", "run_head"}
    assert data["user_head"] == git(repo, "rev-parse", "HEAD").strip()
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


def test_git_lfs_files_are_checked_out_from_the_users_lfs_store(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "lfs", {"a.txt": "a\n"})
    git(root, "lfs", "install", "--local")
    git(root, "lfs", "track", "*.bin")
    write(root, "big.bin", bytes(range(256)) * 64)
    commit_all(root, "lfs file")
    write(root, "new.bin", b"uncommitted lfs content\n")
    run = start(root)
    wt = Path(run.worktree)
    assert (wt / "big.bin").read_bytes() == bytes(range(256)) * 64
    assert (wt / "new.bin").read_bytes() == b"uncommitted lfs content\n"
    assert git(wt, "status", "--porcelain") == ""


def _awkward_changes(root: Path, extra: int) -> None:
    """Uncommitted changes of every kind the run's checkout must reproduce, plus ``extra`` new files."""
    write(root, "a.txt", "a, edited\n")  # modified
    os.unlink(root / "gone.txt")  # deleted
    os.unlink(root / "was_file")  # a file that becomes a directory
    write(root, "was_file/inside.txt", "now a dir\n")
    for name in os.listdir(root / "was_dir"):  # a directory that becomes a file
        os.unlink(root / "was_dir" / name)
    os.rmdir(root / "was_dir")
    write(root, "was_dir", "now a file\n")
    os.chmod(root / "tool.sh", 0o755)  # mode only
    os.unlink(root / "link")  # a symlink retargeted
    os.symlink("a.txt", root / "link")
    write(root, "*.txt", "a name that is a glob\n")  # pathspec magic, taken literally
    write(root, ":(top)odd", "a name that looks like magic\n")
    for i in range(extra):
        write(root, f"new/{i}.txt", f"{i}\n")


@pytest.mark.parametrize("extra", [0, 40], ids=["paths-checked-out", "whole-index-merge"])
def test_the_snapshot_is_checked_out_exactly_over_the_users_head(tmp_path: Path, extra: int) -> None:
    """The run's worktree starts as the user's HEAD and then only the paths the snapshot changed are
    written (by path, or in one pass over the index above PATHS_AT_MOST): the result is the snapshot,
    byte for byte, with a clean status and the run's branch on it."""
    from sandbox.store import worktree

    assert extra == 0 or extra > worktree.PATHS_AT_MOST  # the ten changes below fit under it
    root = make_repo(
        tmp_path / "r",
        {"a.txt": "a\n", "gone.txt": "g\n", "was_file": "f\n", "was_dir/x.txt": "x\n", "tool.sh": "#!/bin/sh\n"},
    )
    os.symlink("gone.txt", root / "link")
    commit_all(root, "with a link")
    _awkward_changes(root, extra)
    run = start(root)
    wt = Path(run.worktree)
    assert {k: v for k, v in tree_digest(wt).items() if k != ".git"} == tree_digest(root)
    assert os.readlink(wt / "link") == "a.txt"
    assert os.stat(wt / "tool.sh").st_mode & 0o111
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(wt, "rev-parse", "HEAD").strip() == run.base


def test_a_clean_tree_is_checked_out_once(repo: Path) -> None:
    """No uncommitted change: the snapshot's tree is HEAD's, so nothing is written after the checkout
    (the index is the checkout's own) and the run's branch is moved to the snapshot commit."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "everything")
    run = start(repo)
    wt = Path(run.worktree)
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(wt, "rev-parse", "HEAD").strip() == run.base
    assert git(wt, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", "HEAD^{tree}")
