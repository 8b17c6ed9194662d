"""``sandbox start`` begun before click, pygit2 and pydantic are imported (sandbox.cli.earlystart).

What is begun early is what a start begins anyway, in the same order; these tests hold that a start
begun early is finished into the same run, that one nobody takes over leaves nothing, and that the
forms and repositories the early part does not read for certain are left to the click command.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.cli import earlystart
from sandbox.run.run import Run
from sandbox.store import layout
from sandbox.store.locks import file_lock
from sandbox.store.project import Project
from tests.conftest import git, make_repo, sandbox_cmd, tree_digest, user_state, write


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_DATA_HOME`` of this test: where the CLI puts the runs' homes."""
    path = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(path))
    return path


def leftovers(root: Path, data_home: Path) -> tuple[list[str], list[str]]:
    """The run directories in the repository and the homes under the data directory."""
    runs = root / ".git" / "sandbox" / "runs"
    homes = data_home / "sandbox" / "repos"
    return (
        sorted(os.listdir(runs)) if runs.exists() else [],
        sorted(h for key in (os.listdir(homes) if homes.exists() else []) for h in os.listdir(homes / key)),
    )


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["start"], (None, False, None, None)),
        (["-C", "d", "--json", "start", "--label", "x", "--no-progress"], ("d", True, "x", False)),
        (["start", "--json", "--label=y", "--progress"], (None, True, "y", True)),
        (["start", "--count", "2"], None),
        (["start", "--help"], None),
        (["start", "--label"], None),
        (["--color", "never", "start"], None),
        (["list"], None),
        (["path", "start"], None),
    ],
)
def test_only_the_plain_forms_are_begun_early(argv: list[str], parsed: object) -> None:
    assert earlystart._parse(argv) == parsed


def test_a_start_begun_early_is_finished_into_the_run(repo: Path, data_home: Path) -> None:
    before = user_state(repo), tree_digest(repo)
    earlystart.begin(["-C", str(repo), "start", "--label", "early"])
    begun, _relay = earlystart.take()
    assert begun is not None and begun.checkout is not None
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    project.data_root = str(data_home / "sandbox")
    run = Run.start(project, workdir, label="early", begun=begun)
    assert run.run_id == begun.run_id
    wt = Path(run.worktree)
    assert (wt / "README.md").read_text() == "hello\nuser edit\n"
    assert (wt / "notes.txt").read_text() == "untracked notes\n"
    assert not (wt / "debug.log").exists()
    assert str(run.repo[run.base].parent_ids[0]) == git(repo, "rev-parse", "HEAD").strip()
    assert run.info.head_ref == git(repo, "symbolic-ref", "HEAD").strip()
    assert git(wt, "status", "--porcelain").strip() == ""
    assert (user_state(repo), tree_digest(repo)) == before
    # The lock the early part took is let go with the start: a writer can take it at once.
    with file_lock(layout.run_lock_path(project.common_dir, run.run_id), "test", timeout=0):
        pass


def test_a_start_begun_early_that_no_command_takes_over_leaves_nothing(repo: Path, data_home: Path) -> None:
    before = user_state(repo), tree_digest(repo)
    earlystart.begin(["-C", str(repo), "start"])
    runs, homes = leftovers(repo, data_home)
    assert len(runs) == 1 and homes == runs
    earlystart.abandon_unused()
    assert leftovers(repo, data_home) == ([], [])
    assert (user_state(repo), tree_digest(repo)) == before


def test_a_start_begun_for_another_tree_is_undone_and_made_again(repo: Path, tmp_path: Path, data_home: Path) -> None:
    other = make_repo(tmp_path / "other", {"a.txt": "a\n"})
    earlystart.begin(["-C", str(other), "start"])
    begun, _ = earlystart.take()
    assert begun is not None
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir, begun=begun)
    assert run.run_id != begun.run_id
    assert (Path(run.worktree) / "README.md").read_text() == "hello\nuser edit\n"
    assert leftovers(other, data_home) == ([], [])


def test_a_linked_worktree_of_yours_is_begun_early(repo: Path, tmp_path: Path, data_home: Path) -> None:
    git(repo, "commit", "-qam", "edit")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    write(linked, "side.txt", "only in the linked tree\n")
    earlystart.begin(["-C", str(linked), "start"])
    begun, _ = earlystart.take()
    assert begun is not None and begun.workdir == str(linked.resolve())
    assert begun.head_ref == "refs/heads/side"
    begun.abandon()
    proc = sandbox_cmd("start", "--json", cwd=linked, env={"XDG_DATA_HOME": str(data_home)})
    assert proc.returncode == 0, proc.stderr.decode()
    made = json.loads(proc.stdout)
    assert (Path(made["worktree"]) / "side.txt").read_text() == "only in the linked tree\n"
    assert made["user_head"] == git(linked, "rev-parse", "HEAD").strip()


def test_a_tree_set_by_core_worktree_is_left_to_the_click_command(tmp_path: Path, data_home: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git(root, "config", "core.worktree", str(root))
    earlystart.begin(["-C", str(root), "start"])
    assert earlystart.take() == (None, None)
    proc = sandbox_cmd("start", "--json", cwd=root, env={"XDG_DATA_HOME": str(data_home)})
    assert proc.returncode == 0, proc.stderr.decode()


def test_the_progress_relay_shows_the_newest_line_once_attached() -> None:
    relay = earlystart.Relay()
    relay("Updating files: 10%")
    relay("Updating files: 20%")
    shown: list[str] = []
    relay.attach(shown.append)
    relay("Updating files: 30%")
    assert shown == ["Updating files: 20%", "Updating files: 30%"]


def test_a_first_part_that_fails_leaves_nothing(repo: Path, tmp_path: Path) -> None:
    from sandbox.run import prestart

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    common = str((repo / ".git").resolve())
    head = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(OSError):
        prestart.begin(common, common, str(repo.resolve()), str(blocker / "homes"), head, "refs/heads/main")
    runs = repo / ".git" / "sandbox" / "runs"
    assert not runs.exists() or os.listdir(runs) == []
