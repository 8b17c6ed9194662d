"""A run's disk use as ``status``, ``list`` and the ui count it (:func:`sandbox.store.fsutil.disk_usage_upto`):
what the agent built cannot make the figure lie (hard links, a tree deeper than PATH_MAX) or make the
bounded count read a whole huge directory."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from conftest import make_repo, sandbox_cmd

from sandbox.store.fsutil import disk_usage_upto, remove_tree

MIB = 1 << 20


def big(path: Path) -> int:
    path.write_bytes(os.urandom(MIB))
    return os.stat(path).st_blocks * 512


def test_a_file_with_many_hard_links_is_counted_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    size = big(home / "blob")
    for i in range(20):
        os.link(home / "blob", home / f"link{i}")
    used, complete = disk_usage_upto(str(home), None)
    assert complete
    assert size <= used < 2 * size  # 21 names, one file (du says the same)


def test_a_tree_deeper_than_path_max_is_not_a_complete_count(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(60):  # 60 x 101 bytes: past PATH_MAX (4096)
            os.mkdir("d" * 100, dir_fd=fd)
            sub = os.open("d" * 100, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        out = os.open("hidden", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
        os.write(out, os.urandom(MIB))
        os.close(out)
    finally:
        os.close(fd)
    try:
        used, complete = disk_usage_upto(str(home), None)
        assert used < MIB
        assert not complete  # the hidden MiB was not counted: the figure says it is a lower bound
    finally:
        remove_tree(str(home))


def test_the_bound_holds_inside_one_huge_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for i in range(20_000):
        (home / f"f{i:05}").touch()
    tracemalloc.start()
    try:
        used, complete = disk_usage_upto(str(home), 10)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not complete
    assert peak < 500_000  # not 20,000 entries held (2.8 MB when the directory was read whole)


def test_status_disk_says_when_it_could_not_read_every_directory(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"README.md": "hello\n", ".gitignore": "build/\n"})
    assert sandbox_cmd("start", cwd=repo).returncode == 0
    worktree = sandbox_cmd("path", cwd=repo).stdout.decode().strip()
    fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(60):
        os.mkdir("b" * 100, dir_fd=fd)
        sub = os.open("b" * 100, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    try:
        out = sandbox_cmd("status", "--disk", cwd=repo).stdout.decode()
        line = next(x for x in out.splitlines() if x.strip().startswith("disk:"))
        assert "more than" in line and "could not be read" in line and "None" not in line, line
        listed = sandbox_cmd("list", "--disk", cwd=repo).stdout.decode()
        assert "could be read" in listed and "None" not in listed, listed
    finally:
        remove_tree(os.path.join(worktree, "b" * 100))
