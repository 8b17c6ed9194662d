"""The host's shared inotify instance: many trees, one instance, counted watches, honest losses (real files)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.fast.inotify import Inotify, instances_of


def tree_of(root: Path, dirs: int = 3) -> Path:
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    for i in range(dirs):
        (root / f"d{i}").mkdir()
        (root / f"d{i}" / "f.txt").write_text(f"{i}\n")
    (root / ".git").mkdir()
    return root


@pytest.fixture
def inotify() -> Iterator[Inotify]:
    instance = Inotify()
    assert instance.error is None
    yield instance
    instance.close()


def test_every_kind_of_change_is_seen(tmp_path: Path, inotify: Inotify) -> None:
    root = tree_of(tmp_path / "wt")
    tree = inotify.watch(str(root))
    assert tree.vouching and tree.watches == 4  # the root and d0..d2; never .git
    token = tree.open_window()
    script = (
        "echo new > created.txt && echo more >> README.md && rm d0/f.txt && mv d1/f.txt d1/g.txt"
        " && chmod +x d2/f.txt && mkdir -p pkg/sub && echo 1 > pkg/sub/mod.py && echo x > .git/HEAD"
        " && mv d2 d9"
    )
    subprocess.run(["sh", "-c", script], cwd=root, check=True)
    seen = tree.close_window(token)
    assert seen is not None
    assert {"created.txt", "README.md", "d0/f.txt", "d1/f.txt", "d1/g.txt", "d2/f.txt", "pkg", "d2", "d9"} <= seen
    assert "pkg/sub/mod.py" in seen or "pkg/sub" in seen  # a new directory's files, by event or by walk
    # A directory moved in is walked before the window's sync is answered: its files are this window's
    # (they came in the next one when the walk ran after the sync, seen once in a full run).
    assert "d9/f.txt" in seen
    assert not any(p.startswith(".git") for p in seen)
    token = tree.open_window()  # the moved and the created directories are watched under their new names
    (root / "d9" / "later.txt").write_text("later\n")
    (root / "pkg" / "sub" / "later.txt").write_text("later\n")
    assert tree.close_window(token) == {"d9/later.txt", "pkg/sub/later.txt"}


def test_many_trees_share_one_instance_and_are_counted(tmp_path: Path, inotify: Inotify) -> None:
    before = instances_of(os.getpid())[0]
    trees = [inotify.watch(str(tree_of(tmp_path / f"wt{i}"))) for i in range(25)]
    assert instances_of(os.getpid())[0] == before  # the instance was made by the fixture: no more
    assert inotify.watches == 25 * 4 == sum(t.watches for t in trees)
    assert instances_of(os.getpid())[1] >= inotify.watches
    tokens = [t.open_window() for t in trees]
    (tmp_path / "wt7" / "d1" / "only.txt").write_text("x")
    answers = [t.close_window(tok) for t, tok in zip(trees, tokens, strict=True)]
    assert answers[7] == {"d1/only.txt"}
    assert all(a == set() for i, a in enumerate(answers) if i != 7)
    inotify.unwatch(trees[7])
    assert inotify.watches == 24 * 4 and not trees[7].vouching


def test_a_tree_beyond_the_budget_holds_no_watch_and_says_why(tmp_path: Path) -> None:
    capped = Inotify(max_watches=6, max_trees=3)
    try:
        first = capped.watch(str(tree_of(tmp_path / "a")))
        second = capped.watch(str(tree_of(tmp_path / "b")))  # needs 4 more: only 2 left
        assert first.vouching and not second.vouching and second.watches == 0
        assert second.lost_reason is not None and "watch budget (6) is used up" in second.lost_reason
        assert capped.watches == 4
        token = second.open_window()
        assert second.close_window(token) is None  # the caller scans
        small = [capped.watch(str(tree_of(tmp_path / f"s{i}", dirs=0))) for i in range(3)]
        assert [t.vouching for t in small] == [True, True, False]  # max_trees=3 with `first`
        assert small[2].lost_reason is not None and "watches 3 runs already" in small[2].lost_reason
    finally:
        capped.close()


def test_a_queue_overflow_makes_every_tree_stop_vouching(tmp_path: Path, inotify: Inotify) -> None:
    a = inotify.watch(str(tree_of(tmp_path / "a")))
    b = inotify.watch(str(tree_of(tmp_path / "b")))
    token = b.open_window()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    with inotify.lock:  # the reader cannot drain the queue meanwhile: the kernel drops events
        for i in range(limit + 100):
            (tmp_path / "a" / f"f{i}").touch()
    assert b.close_window(token, timeout=10) is None
    assert a.lost_reason is not None and "overflowed" in a.lost_reason
    again = inotify.rewatch(a)
    assert again.vouching
    token = again.open_window()
    (tmp_path / "a" / "after.txt").write_text("x")
    assert again.close_window(token) == {"after.txt"}


def test_a_deleted_root_stops_vouching(tmp_path: Path, inotify: Inotify) -> None:
    root = tree_of(tmp_path / "gone")
    tree = inotify.watch(str(root))
    token = tree.open_window()
    subprocess.run(["rm", "-rf", str(root)], check=True)
    assert tree.close_window(token, timeout=2) is None
    assert tree.lost_reason is not None


def test_loading_and_using_inotify_starts_no_process(tmp_path: Path) -> None:
    """libc is loaded directly: ``ctypes.util.find_library`` ran ``ldconfig -p`` (and maybe gcc) at first use."""
    root = tree_of(tmp_path / "root")
    child = f"""
import sys
spawned = []
def hook(event, args):
    if event.startswith(("subprocess.Popen", "os.posix_spawn", "os.fork", "os.system", "os.exec", "os.spawn")):
        spawned.append(event)
sys.addaudithook(hook)
from sandbox.fast.inotify import Inotify
instance = Inotify()
assert instance.error is None, instance.error
tree = instance.watch({str(root)!r})
token = tree.open_window()
open({str(root / "d0" / "new.txt")!r}, "w").close()
seen = tree.close_window(token)
instance.close()
print(sorted(seen or []), spawned)
"""
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "['d0/new.txt'] []", out.stderr
