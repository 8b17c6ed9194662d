"""The run's own view of your ``packed-refs`` (:mod:`sandbox.confine.gitview`): its lines alone.

The mounts themselves are tested from inside real runs in tests/reliability/test_private_runs.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.confine import gitview
from sandbox.store import layout

A, B = "a" * 40, "b" * 40


def _view(common: Path, run_id: str, packed: str) -> str:
    (common / "packed-refs").write_text(packed)
    run_dir = common / "sandbox" / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / layout.PLACE_FILE).write_text(str(common.parent / "home" / run_id))
    view = gitview.user_git_view(str(common), run_id, history_view=True)
    assert view.hidden == {os.path.realpath(common): gitview.WHY}
    [(made, shown)] = view.files
    assert shown == os.path.join(os.path.realpath(common), "packed-refs")
    return Path(made).read_text()


def test_only_the_runs_own_lines_with_their_peeled_lines_whether_sorted_or_not(tmp_path: Path) -> None:
    common = tmp_path / ".git"
    (common / "objects").mkdir(parents=True)
    lines = [
        f"{A} refs/heads/main",
        f"{A} refs/sandbox/r1/base",
        f"{A} refs/sandbox/r1/git/refs/tags/v1",
        f"^{B}",
        f"{A} refs/sandbox/r1/head",
        f"{B} refs/sandbox/r10/head",
        f"{B} refs/stash",
        f"{A} refs/tags/v1",
        f"^{B}",
    ]
    sorted_header = "# pack-refs with: peeled fully-peeled sorted \n"
    own = "\n".join(lines[1:5]) + "\n"
    assert _view(common, "r1", sorted_header + "\n".join(lines) + "\n") == sorted_header + own
    # Not sorted (an old git, or written by hand): the whole file is read.
    unsorted = [lines[0], lines[5], lines[1], lines[6], lines[2], lines[3], lines[4]]
    got = _view(common, "r1", "# pack-refs with: peeled \n" + "\n".join(unsorted) + "\n")
    assert got == "# pack-refs with: peeled \n" + "\n".join([lines[1], lines[2], lines[3], lines[4]]) + "\n"
    # A run with no packed refs gets the header alone; the refs of r10 are not r1's.
    assert _view(common, "r2", sorted_header + "\n".join(lines) + "\n") == sorted_header
    assert _view(common, "r10", sorted_header + "\n".join(lines) + "\n") == sorted_header + lines[5] + "\n"


def test_a_legacy_run_keeps_the_older_view(tmp_path: Path) -> None:
    common = tmp_path / ".git"
    (common / "sandbox" / "runs" / "old").mkdir(parents=True)  # no place: made before homes
    view = gitview.user_git_view(str(common), "old", history_view=True)
    assert (view.hidden, view.readable, view.files) == ({}, [], [])


def test_your_objects_are_your_history_only_where_bubblewrap_binds_it(tmp_path: Path) -> None:
    """With a store, bubblewrap shows your committed history as your objects; Seatbelt (which cannot hide
    a read) and a command already inside a sandbox read your objects where they are, and build nothing."""
    from conftest import make_repo

    from sandbox.confine.policy import Isolation, policy_for
    from sandbox.store import history

    repo = make_repo(tmp_path / "repo")
    common = os.path.realpath(repo / ".git")
    run_dir = Path(common) / "sandbox" / "runs" / "r1"
    (run_dir / layout.RUN_OBJECTS).mkdir(parents=True)
    (run_dir / layout.PLACE_FILE).write_text(str(tmp_path / "home" / "r1"))
    worktree = str(tmp_path / "home" / "r1" / "worktree")
    objects = os.path.join(common, "objects")
    for isolation in (Isolation(backend="seatbelt"), Isolation(inherited=True)):
        policy = policy_for(isolation, common_dir=common, run_id="r1", worktree=worktree, user_workdir=None)
        assert objects in policy.readable and all(dest != objects for _made, dest in policy.views)
        assert not os.path.exists(history.root(common))
    policy = policy_for(Isolation(), common_dir=common, run_id="r1", worktree=worktree, user_workdir=None)
    assert objects not in policy.readable
    assert [made for made, dest in policy.views if dest == objects] == [history.shown(common)]
