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
    view = gitview.user_git_view(str(common), run_id)
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
    view = gitview.user_git_view(str(common), "old")
    assert (view.hidden, view.readable, view.files) == ({}, [], [])
