"""A run's checkout follows the user's ``checkout.workers`` wherever it is set, as ``git worktree add`` would;
when the user set none, it is parallel only on cores the machine leaves idle (:func:`checkout_workers`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.store import worktree
from tests.conftest import git, sandbox_cmd


def _run_config(repo: Path, env: dict[str, str] | None = None) -> str:
    started = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert started.returncode == 0, started.stderr
    wt = json.loads(started.stdout)["worktree"]
    return git(Path(wt), "config", "--local", "--list")


def test_the_users_own_repository_setting_is_the_runs(repo: Path) -> None:
    git(repo, "config", "checkout.workers", "3")
    assert "checkout.workers=3" in _run_config(repo)


def test_the_users_global_setting_is_the_runs_too(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[safe]\n\tdirectory = *\n[checkout]\n\tworkers = -1\n")
    assert "checkout.workers=-1" in _run_config(repo, env={"HOME": str(home), "XDG_CONFIG_HOME": str(home)})


def test_the_nearest_setting_wins_and_nothing_else_of_the_users_levels_comes_along(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[safe]\n\tdirectory = *\n[checkout]\n\tworkers = 8\n[alias]\n\tst = status\n")
    git(repo, "config", "checkout.workers", "2")
    config = _run_config(repo, env={"HOME": str(home), "XDG_CONFIG_HOME": str(home)})
    assert "checkout.workers=2" in config and "checkout.workers=8" not in config, config
    assert "alias." not in config and "safe." not in config, config


def test_no_setting_no_config_entry(repo: Path) -> None:
    assert "checkout.workers" not in _run_config(repo)


@pytest.mark.parametrize("key", ["checkout.workers", "Checkout.Workers"])
def test_a_users_choice_is_never_overridden(key: str) -> None:
    assert worktree.checkout_workers([(key, "1")]) is None


def test_without_a_choice_the_idle_cores_decide() -> None:
    cores = len(os.sched_getaffinity(0))
    workers = worktree.checkout_workers([("core.autocrlf", "false")])
    # None (git's sequential default) on a busy machine or one of fewer than two cores, else 2..cores.
    assert workers is None or 2 <= workers <= cores, workers


def test_a_parallel_checkout_gives_the_same_worktree_as_a_sequential_one(tmp_path: Path) -> None:
    """The parallel path (your checkout.workers, or idle cores) on more files than git's threshold for it
    (100), with line-ending conversion, a symlink, an executable and a binary: the same files as git's
    sequential checkout, and the snapshot's uncommitted edit on top."""
    from tests.conftest import commit_all, make_repo, tree_digest, write

    files: dict[str, str | bytes] = {f"pkg/m{i:03d}.txt": f"line {i}\nnext\n" for i in range(150)}
    files[".gitattributes"] = "*.txt text eol=crlf\n*.bin binary\n"
    files["data.bin"] = bytes(range(256)) * 4
    files["tool.sh"] = "#!/bin/sh\necho hi\n"
    trees = {}
    for workers in ("1", "4"):
        repo = make_repo(tmp_path / f"w{workers}", files, commit=False)
        (repo / "tool.sh").chmod(0o755)
        os.symlink("pkg/m001.txt", repo / "link")
        commit_all(repo, "initial")
        git(repo, "config", "checkout.workers", workers)
        write(repo, "pkg/m007.txt", "edited, not committed\n")
        trace = tmp_path / f"trace{workers}"
        started = sandbox_cmd("start", "--json", cwd=repo, env={"GIT_TRACE2_EVENT": str(trace)})
        assert started.returncode == 0, started.stderr
        wt = Path(json.loads(started.stdout)["worktree"])
        trees[workers] = tree_digest(wt)
        # git's parallel checkout runs its workers as `git checkout--worker` children; the sequential one none.
        assert ("checkout--worker" in trace.read_text()) == (workers == "4")
    assert trees["1"] == trees["4"]
    assert (wt / "pkg" / "m007.txt").read_bytes() == b"edited, not committed\r\n"  # as the attributes say
    assert (wt / "pkg" / "m008.txt").read_bytes() == b"line 8\r\nnext\r\n"
