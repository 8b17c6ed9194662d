"""``sandbox.store.beneath``: opening paths beneath a directory, with ``openat2`` and with the walk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_repo

from sandbox.errors import SandboxError
from sandbox.mcp import worktree
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store import beneath
from sandbox.store.project import Project

MODES = [pytest.param(False, id="openat2"), pytest.param(True, id="walk")]


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("inside\n")
    (tmp_path / "secret").write_text("outside\n")
    (root / "in_link").symlink_to("d/f")
    (root / "out_link").symlink_to(tmp_path / "secret")
    (root / "out_dir").symlink_to(tmp_path)
    (root / "up_link").symlink_to("../secret")
    (root / "magic").symlink_to("/proc/self/root/etc/hostname")
    fd = beneath.open_root(str(root))
    yield root, fd
    os.close(fd)


def read(fd: int) -> str:
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode()


@pytest.mark.parametrize("walk", MODES)
def test_paths_inside_open_and_paths_out_are_refused(tree: tuple[Path, int], walk: bool) -> None:
    if not walk and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    _root, fd = tree
    assert read(beneath.open_beneath(fd, "d/f", walk=walk)) == "inside\n"
    assert read(beneath.open_beneath(fd, "./d//f", walk=walk)) == "inside\n"
    for escape in ("out_link", "out_dir/secret", "up_link", "magic", "../secret", "d/../../secret"):
        with pytest.raises(beneath.EscapeError):
            beneath.open_beneath(fd, escape, walk=walk)
    with pytest.raises(FileNotFoundError):
        beneath.open_beneath(fd, "d/missing", walk=walk)
    # A symlink that stays inside: openat2 follows it (the kernel keeps it beneath), the walk does not.
    if walk:
        with pytest.raises(beneath.EscapeError):
            beneath.open_beneath(fd, "in_link", walk=walk)
    else:
        opened = beneath.open_beneath(fd, "in_link", walk=walk)
        assert beneath.relative(fd, opened) == "d/f"
        assert read(opened) == "inside\n"


def test_writes_go_through_the_parent_descriptor(tree: tuple[Path, int], tmp_path: Path) -> None:
    root, fd = tree
    dirfd, name = beneath.open_parent(fd, "new/deeper/file.txt")
    try:
        beneath.write_at(dirfd, name, b"made\n", 0o755)
    finally:
        os.close(dirfd)
    made = root / "new" / "deeper" / "file.txt"
    assert made.read_text() == "made\n" and os.stat(made).st_mode & 0o777 == 0o755
    with pytest.raises(beneath.EscapeError):
        beneath.open_parent(fd, "out_dir/planted.txt")
    assert not (tmp_path / "planted.txt").exists()
    # A symlink at the last name is replaced, its target never written.
    dirfd, name = beneath.open_parent(fd, "out_link")
    try:
        beneath.write_at(dirfd, name, b"replaced\n")
    finally:
        os.close(dirfd)
    assert not (root / "out_link").is_symlink() and (root / "out_link").read_text() == "replaced\n"
    assert (tmp_path / "secret").read_text() == "outside\n"
    assert [n for n in os.listdir(root / "new" / "deeper") if n != "file.txt"] == []  # no temporary left


def test_relative_names_where_a_descriptor_landed(tree: tuple[Path, int]) -> None:
    _root, fd = tree
    sub = beneath.open_dir(fd, "d")
    try:
        assert beneath.relative(fd, sub) == "d"
        assert beneath.relative(fd, fd) == ""
        assert beneath.relative(sub, fd) is None
    finally:
        os.close(sub)


def test_read_file_has_a_size_limit_said_in_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    assert ws.run is not None
    big = Path(ws.run.worktree) / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(worktree.MAX_READ_BYTES + 1)
    with pytest.raises(SandboxError) as caught:
        ws.read_file("big.txt")
    assert "big.txt is 10485761 bytes, more than" in caught.value.message and "\n" not in caught.value.message
    assert "more than" in _error(lambda: ws.edit_file("big.txt", "a", "b"))
    assert "hello" in ws.read_file("README.md")


def _error(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except SandboxError as exc:
        return exc.message
    raise AssertionError("no refusal")
