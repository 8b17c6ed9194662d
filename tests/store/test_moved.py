"""A repository moved on disk takes its runs along (:mod:`sandbox.store.moved`).

A run's home names your repository by path (its ``origin``, its git dir's alternates). Moved with
``mv``, the runs broke: ``exec`` could not record ("cannot be peeled"), the agent's git in the
worktree found no HEAD ("bad object HEAD"), a command started inside the worktree found no
repository, and ``gc`` called the live runs' homes those of a repository that no longer exists, which
``gc --orphans`` removes. The first command in the moved repository puts every home right; a copy
(``cp -r``) leaves the original's homes alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from conftest import git, make_repo

from tests.reliability.helpers import ok, sb


def _start_with_a_change(repo: Path) -> str:
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    ok("exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo agent > a.txt", cwd=repo)
    return run_id


def _origin(repo: Path, run_id: str) -> str:
    worktree = Path(ok("path", run_id, cwd=repo).strip())
    return (worktree.parent / "origin").read_text().strip()


def test_the_runs_of_a_moved_repository_follow_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project", {"a.txt": "user\n"})
    run_id = _start_with_a_change(repo)
    moved = tmp_path / "renamed"
    repo.rename(moved)

    listed = json.loads(ok("list", "--json", cwd=moved))  # any command in the new place puts the homes right
    assert [r["run"] for r in listed] == [run_id]
    assert _origin(moved, run_id) == str(moved / ".git")
    # The run records again, and the agent's git in the worktree reads the run's objects and yours.
    ok("exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo more > b.txt", cwd=moved)
    log = json.loads(ok("log", run_id, "--json", cwd=moved))
    assert [c["status"] for c in log] == ["succeeded", "succeeded"]
    worktree = Path(ok("path", run_id, cwd=moved).strip())
    assert git(worktree, "rev-parse", "HEAD")
    assert git(worktree, "status", "--porcelain")
    # Started inside the worktree (as an agent's hook is), a command finds the repository.
    status = json.loads(ok("status", "--json", cwd=worktree))
    assert status["run"] == run_id
    # gc sees a live run, not the home of a repository that no longer exists.
    gc = json.loads(ok("gc", "--json", cwd=moved))
    assert str(worktree.parent) not in [o["home"] for o in gc["orphan_homes"]]  # (other tests' may be there)
    assert worktree.is_dir()
    # And what the run did still applies, to the tree where the repository is now.
    ok("apply", run_id, cwd=moved)
    assert (moved / "a.txt").read_text() == "agent\n" and (moved / "b.txt").read_text() == "more\n"


def test_a_copy_of_the_repository_leaves_the_originals_runs_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project", {"a.txt": "user\n"})
    run_id = _start_with_a_change(repo)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    ok("list", cwd=copy)
    assert _origin(repo, run_id) == str(repo / ".git")  # still the original's
    ok("exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo more > b.txt", cwd=repo)
    worktree = Path(ok("path", run_id, cwd=repo).strip())
    assert git(worktree, "rev-parse", "HEAD")


def test_a_moved_repositorys_state_dir_remembers_where_it_is(tmp_path: Path) -> None:
    """Nothing is written when nothing moved: the marker names the place, and a second command reads it."""
    repo = make_repo(tmp_path / "project", {"a.txt": "user\n"})
    _start_with_a_change(repo)
    marker = repo / ".git" / "sandbox" / "at"
    assert marker.read_text().strip() == str(repo / ".git")
    before = marker.stat().st_mtime_ns
    ok("list", cwd=repo)
    assert marker.stat().st_mtime_ns == before
    plain = make_repo(tmp_path / "plain", {"x": "x\n"})
    assert sb("list", cwd=plain).returncode == 0
    assert not (plain / ".git" / "sandbox").exists()  # a repository never used with the sandbox gets nothing
    assert subprocess.run(["git", "-C", str(plain), "status", "--porcelain"], capture_output=True).stdout == b""


def test_homes_inside_the_git_dir_move_along(tmp_path: Path) -> None:
    """The library without a data directory keeps homes in ``.git/sandbox/homes``: they moved with the
    repository, and the run's recorded place is put right with the rest."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    repo = make_repo(tmp_path / "project", {"a.txt": "user\n"})
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None and project.data_root is None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "a.txt"}) as call:
        call.write("a.txt", "agent\n")
    assert run.worktree.startswith(str(repo / ".git"))
    moved = tmp_path / "renamed"
    repo.rename(moved)

    project, workdir, _ = Project.discover(str(moved))
    run = Run.open(project, run.run_id)
    assert run.worktree.startswith(str(moved / ".git")) and Path(run.worktree).is_dir()
    with run.tool_call("write_file", {"path": "b.txt"}) as call:
        call.write("b.txt", "more\n")
    assert [e.status.value for e in run.entries()] == ["succeeded", "succeeded"]
    assert git(Path(run.worktree), "rev-parse", "HEAD")


def test_a_symlink_the_agent_planted_in_its_git_dir_is_never_written_through(tmp_path: Path) -> None:
    """The run's git dir is the agent's to write: its ``objects/info`` made a symlink to a directory of
    yours, the move's rewrite of the alternates is refused there (by descriptor), and the rest follows."""
    repo = make_repo(tmp_path / "project", {"a.txt": "user\n"})
    run_id = _start_with_a_change(repo)
    worktree = Path(ok("path", run_id, cwd=repo).strip())
    info = worktree.parent / "git" / "objects" / "info"
    yours = tmp_path / "yours"
    yours.mkdir()
    shutil.rmtree(info)
    info.symlink_to(yours)  # what an agent can do in its own git dir
    moved = tmp_path / "renamed"
    repo.rename(moved)

    ok("list", "--json", cwd=moved)
    assert list(yours.iterdir()) == []  # nothing written through the link
    assert info.is_symlink()
    assert _origin(moved, run_id) == str(moved / ".git")  # the home itself follows
