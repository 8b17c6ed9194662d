"""``list_files`` with a glob walks what a model can build: a 5,000-deep chain, a huge ignored
directory, symlink loops, a planted FIFO ``.gitignore``; bounded, in a stable order, never a crash."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import sandbox
from sandbox.mcp import find
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store.fsutil import remove_tree
from sandbox.store.project import Project
from tests import cliserver
from tests.conftest import make_repo

DEPTH = 5_000


def workspace(tmp_path: Path, files: dict[str, str | bytes] | None = None) -> tuple[Workspace, Path]:
    repo = make_repo(
        tmp_path / "repo", {"README.md": "hello\n", ".gitignore": "node_modules/\n.venv/\n", **(files or {})}
    )
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    assert ws.run is not None
    return ws, Path(ws.run.worktree)


@pytest.fixture
def chains() -> Iterator[list[Path]]:
    """Chains made by :func:`chain`, removed here: pytest's own clean-up of old temporary
    directories recurses per level and would fail on them (in a later session, anyone's)."""
    made: list[Path] = []
    yield made
    for top in made:
        remove_tree(str(top / "d"))


def chain(top: Path, depth: int, leaf: str, made: list[Path]) -> str:
    """``depth`` nested directories ``d`` below ``top`` (made through descriptors: the path is longer
    than PATH_MAX) with the file ``leaf`` at the bottom; its path relative to ``top``."""
    made.append(top)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open(leaf, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return "d/" * depth + leaf


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def walk(ws: Workspace, path: str = "", **kwargs: Any) -> tuple[list[str], find.FileWalk]:
    assert ws.run is not None
    w = find.FileWalk(find.IgnoreRules(ws.run, path), **kwargs)
    fd = os.open(os.path.join(ws.run.worktree, path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return list(w.files(fd)), w
    finally:
        os.close(fd)


def test_a_5000_deep_chain_is_listed_whole(tmp_path: Path, chains: list[Path]) -> None:
    ws, wt = workspace(tmp_path)
    deep = chain(wt, DEPTH, "deep.txt", chains)
    before = open_fds()
    answer = ws.list_files(pattern="*.txt")
    assert answer.splitlines() == [deep]
    assert open_fds() <= before  # every descriptor of the walk was let go


def test_the_mcp_client_gets_the_deep_file_and_the_server_goes_on(tmp_path: Path, chains: list[Path]) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})

    async def main() -> tuple[bool, str, str]:
        command, argv = cliserver.stdio_command("mcp", "--new")
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("run_command", {"command": "true"})
            wt = Path(sandbox.open_run(str(repo)).worktree)
            deep = chain(wt, DEPTH, "deep.txt", chains)
            (wt / "loop").symlink_to(".")
            with anyio.fail_after(60):
                answer = await session.call_tool("list_files", {"pattern": "**/*.txt"})
                after = await session.call_tool("read_file", {"path": "README.md"})
            text = "".join(getattr(c, "text", "") for c in answer.content)
            return answer.is_error, text, deep + "|" + "".join(getattr(c, "text", "") for c in after.content)

    failed, text, rest = anyio.run(main)
    deep, after = rest.split("|", 1)
    assert not failed, text
    assert text.splitlines() == [deep]
    assert "hello" in after


def test_an_ignored_directory_is_never_read(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    for top in ("node_modules/pkg", ".venv/lib", "src/node_modules/x"):
        (wt / top).mkdir(parents=True)
        for i in range(500):
            (wt / top / f"m{i}.js").write_text("x")
    (wt / "src" / "app.js").write_text("app")
    files, w = walk(ws)
    assert files == [".gitignore", "README.md", "src/app.js"]
    assert w.pruned == [".venv", "node_modules", "src/node_modules"]
    assert w.visited < 20  # not one of the 1,500 entries below them
    answer = ws.list_files(pattern="*.js")
    assert answer.splitlines()[0] == "src/app.js"
    assert "node_modules/" in answer.splitlines()[1] and "m1.js" not in answer
    # Named as the path, an ignored directory is listed: the model asked for it.
    inside = ws.list_files(path="node_modules", pattern="*.js").splitlines()
    assert len(inside) == 500 and inside[0] == "node_modules/pkg/m0.js"


def test_symlink_loops_are_not_followed(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    (wt / "a").mkdir()
    (wt / "a" / "f.txt").write_text("f")
    (wt / "a" / "up").symlink_to("..")
    (wt / "self").symlink_to("self")
    (wt / "x").symlink_to("y")
    (wt / "y").symlink_to("x")
    files, w = walk(ws)
    assert files == [".gitignore", "README.md", "self", "x", "y", "a/f.txt", "a/up"]
    assert w.cut is None
    assert ws.list_files(pattern="*.txt").splitlines() == ["a/f.txt"]


def test_the_order_is_a_directory_s_files_then_its_subdirectories_by_name(tmp_path: Path) -> None:
    layout = {"b.txt": "", "a.txt": "", "c/d/e.txt": "", "c/a.txt": "", "a/z.txt": "", "a/b/c.txt": ""}
    ws, _wt = workspace(tmp_path, layout)
    expected = [".gitignore", "README.md", "a.txt", "b.txt", "a/z.txt", "a/b/c.txt", "c/a.txt", "c/d/e.txt"]
    assert walk(ws)[0] == expected
    assert walk(ws)[0] == expected


def test_the_walk_stops_at_its_entry_budget_and_says_so(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    (wt / "many").mkdir()
    for i in range(200):
        (wt / "many" / f"{i:03}.txt").write_text("x")
    before = open_fds()
    files, w = walk(ws, max_entries=50)
    assert w.visited == 51 and w.cut == "stopped after visiting 50 entries"
    assert files == [".gitignore", "README.md"]
    assert open_fds() <= before


def test_a_wide_tree_nested_past_the_descriptor_bound_is_walked_but_there(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    here = wt
    for _ in range(find.MAX_HELD + 10):  # every level keeps a sibling to visit later: a descriptor held each
        (here / "b").mkdir()
        (here / "b" / "f.txt").write_text("x")
        here = here / "a"
        here.mkdir()
    try:
        before = open_fds()
        files, w = walk(ws)
        assert w.too_deep == 1 and w.cut is None  # one directory (and all below it) left out, its siblings not
        # Deepest first (a before b at every level), down to the level where the bound was reached.
        assert files[2:] == ["a/" * k + "b/f.txt" for k in range(len(files) - 3, -1, -1)]
        assert find.MAX_HELD <= len(files) - 2 <= find.MAX_HELD + 1
        assert open_fds() <= before
        answer = ws.list_files(pattern="*.txt")
        assert answer.splitlines()[-1].startswith(f"[1 directories nested more than {find.MAX_HELD} levels")
    finally:
        # 266 levels: pytest's own clean-up of old temporary directories (shutil.rmtree, recursive)
        # fails on them with RecursionError, and every later pytest session (anyone's) exited 1.
        remove_tree(str(wt / "a"))


def test_a_fifo_gitignore_below_neither_hangs_nor_prunes(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    (wt / "src" / "node_modules").mkdir(parents=True)
    (wt / "src" / "node_modules" / "m.js").write_text("x")
    os.mkfifo(wt / "src" / ".gitignore")
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(ws.list_files(pattern="*.js")), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "list_files hung on a FIFO .gitignore"
    # libgit2 is not asked below a rule file that is not plain: the directory is listed, not judged.
    assert out == ["src/node_modules/m.js"]


def test_an_answer_cut_at_max_list_inside_a_subdirectory_lets_go_of_its_descriptor(tmp_path: Path) -> None:
    ws, wt = workspace(tmp_path)
    many = wt / "a" / "b"
    many.mkdir(parents=True)
    for i in range(find.MAX_LIST + 5):
        (many / f"f{i:05}.txt").write_text("x")
    before = open_fds()
    for _ in range(3):
        answer = ws.list_files(pattern="*.txt")
        assert f"more than {find.MAX_LIST} entries" in answer
    assert open_fds() <= before  # the list stopped while the walk held a/b open: it was closed too
