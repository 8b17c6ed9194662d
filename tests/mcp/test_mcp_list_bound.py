"""``list_files`` without a pattern reads at most the same number of entries as its glob walk, and
says when it stopped (a model's build can put any number of files in one directory)."""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.mcp import find
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store.project import Project
from tests.conftest import make_repo

ENTRIES = 1_500


def workspace(tmp_path: Path) -> tuple[Workspace, Path]:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    assert ws.run is not None
    return ws, Path(ws.run.worktree)


def test_listing_one_directory_is_bounded_and_says_so(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    many = wt / "out"
    many.mkdir()
    for i in range(ENTRIES):
        (many / f"f{i:05}").write_text("x")
    (many / "Sub").mkdir()
    os.symlink("f00000", many / "Link")
    assert ws.max_visit == find.MAX_VISIT  # the same bound as the glob walk's, by default

    whole = ws.list_files("out").splitlines()
    assert whole[-1].startswith(f"[more than {find.MAX_LIST} entries")  # under the bound: all read, as before
    assert whole[:3] == ["Link@", "Sub/", "f00000"] and "has more than" not in whole[-1]

    ws.max_visit = 500
    cut = ws.list_files("out").splitlines()
    names, note = cut[:-1], cut[-1]
    # Counted, not timed: the answer holds exactly the entries read before the bound, each once.
    assert len(names) == len(set(names)) == 500
    assert all(n.startswith("f") or n in ("Sub/", "Link@") for n in names) and names == sorted(names)
    assert note == (
        "[out has more than 500 entries: the names above are drawn from the first 500 entries read (in the "
        "directory's own order), so a name missing here may still exist; give a pattern or a deeper path]"
    )
    ws.max_visit = 10_000
    marks = [n for n in ws.list_files("out").splitlines() if not n.startswith("f")]
    assert marks == ["Link@", "Sub/", f"[more than {find.MAX_LIST} entries; narrow the path or the pattern]"]


def test_the_glob_walk_has_the_same_bound(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    for d in range(30):
        (wt / "tree" / f"d{d:02}").mkdir(parents=True)
        for i in range(20):
            (wt / "tree" / f"d{d:02}" / f"f{i:02}.txt").write_text("x")
    ws.max_visit = 100
    answer = ws.list_files("tree", "*.txt").splitlines()
    assert answer[-1].startswith("[the walk stopped after visiting 100 entries")
    assert len(answer) - 1 < 100


def test_a_cut_directory_listing_says_what_its_names_are_drawn_from(tmp_path: Path) -> None:
    """Past both bounds (entries read, names shown) the note said the first N read 'are listed' while
    the answer listed MAX_LIST of them: a model took a name missing from it for a file that is not there."""
    ws, wt = workspace(tmp_path)
    many = wt / "out"
    many.mkdir()
    for i in range(ENTRIES):
        (many / f"f{i:05}").write_text("x")
    ws.max_visit = find.MAX_LIST + 200
    lines = ws.list_files("out").splitlines()
    assert len(lines) == find.MAX_LIST + 2
    note = lines[-1]
    assert f"only the first {ws.max_visit} read are listed" not in note
    assert f"the names above are drawn from the first {ws.max_visit} entries read" in note, note
