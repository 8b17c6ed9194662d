"""The inotify watcher: what it reports, sync, windows, and when it refuses to vouch (real watchdog)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent.watcher import SYNC_PREFIX, Watcher, kernel_watch_count, measure_startup
from sandbox.store import capture
from tests.conftest import write


def sh(root: Path, script: str) -> None:
    """Change files from another process, as an agent's command would."""
    subprocess.run(["sh", "-c", script], cwd=root, check=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    write(root, "a.txt", "a\n")
    write(root, "b.txt", "b\n")
    write(root, "dir/one.txt", "1\n")
    write(root, "dir/sub/two.txt", "2\n")
    write(root, "gone/x.txt", "x\n")
    write(root, "gone/deep/y.txt", "y\n")
    return root


@pytest.fixture
def watcher(tree: Path) -> Iterator[Watcher]:
    w = Watcher(str(tree))
    w.start()
    assert w.vouching, w.lost_reason
    yield w
    w.stop()


def test_start_watches_every_directory(tree: Path, watcher: Watcher) -> None:
    dirs = sum(1 for _ in os.walk(tree))
    assert watcher.stats.directories == dirs
    assert watcher.stats.watches == dirs
    assert kernel_watch_count(watcher._observer) == dirs
    assert watcher.take() == set()


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("echo new > c.txt", {"c.txt"}),
        ("echo more >> a.txt", {"a.txt"}),
        ("rm b.txt", {"b.txt"}),
        ("mv a.txt dir/moved.txt", {"a.txt", "dir/moved.txt"}),
        ("chmod +x a.txt", {"a.txt"}),
        ("touch a.txt", {"a.txt"}),
        ("ln -s a.txt link", {"link"}),
        ("mv dir renamed", {"dir", "renamed", "renamed/one.txt", "renamed/sub", "renamed/sub/two.txt"}),
    ],
)
def test_reports_each_kind_of_change(tree: Path, watcher: Watcher, script: str, expected: set[str]) -> None:
    sh(tree, script)
    seen = watcher.take()
    assert seen is not None
    assert expected <= seen
    assert not any(p.startswith(SYNC_PREFIX) for p in seen)


def test_new_directory_with_files_is_covered(tree: Path, watcher: Watcher) -> None:
    # Files written right after mkdir race with the new directory's watch: both paths must report.
    sh(tree, "mkdir -p n/m/k && echo 1 > n/m/k/f1 && echo 2 > n/m/f2 && echo 3 > n/f3")
    first = watcher.take()
    assert first is not None
    assert {"n/m/k/f1", "n/m/f2", "n/f3"} <= first
    # ... and the new directories are watched from then on.
    sh(tree, "echo again >> n/m/k/f1 && rm n/f3")
    assert watcher.take() == {"n/m/k/f1", "n/f3"}


def test_deleted_directory_reports_itself_and_its_files(tree: Path, watcher: Watcher) -> None:
    sh(tree, "rm -rf gone")
    seen = watcher.take()
    assert seen is not None
    assert {"gone", "gone/x.txt", "gone/deep", "gone/deep/y.txt"} <= seen


def test_git_dir_and_ignored_paths_are_dropped(tree: Path) -> None:
    with Watcher(str(tree), ignore=lambda rel: rel.split("/")[0] == "build") as w:
        sh(tree, "mkdir -p .git/objects build && echo x > .git/objects/o && echo y > build/out && echo z > kept")
        assert w.take() == {"kept"}


def test_take_resets_and_sync_flushes(tree: Path, watcher: Watcher) -> None:
    sh(tree, "for i in $(seq 200); do echo $i > f$i; done")
    seen = watcher.take()  # take syncs: every file written before it is there
    assert seen is not None and {f"f{i}" for i in range(1, 201)} <= seen
    assert watcher.take() == set()
    assert watcher.sync()
    assert not [n for n in os.listdir(tree) if n.startswith(SYNC_PREFIX)]
    assert SYNC_PREFIX == capture.SYNC_NAME  # capture skips the sentinels by this name


def test_windows_overlap(tree: Path, watcher: Watcher) -> None:
    first = watcher.open_window()
    sh(tree, "echo 1 > w1")
    assert watcher.sync()  # else w1's event may still be on its way, and the second window sees it too
    second = watcher.open_window()
    sh(tree, "echo 2 > w2")
    assert watcher.close_window(second) == {"w2"}
    assert watcher.close_window(first) == {"w1", "w2"}
    assert watcher.close_window(first) is None  # closed windows are gone


def test_stopped_watcher_cannot_vouch(tree: Path) -> None:
    w = Watcher(str(tree))
    assert w.take() is None
    w.start()
    w.stop()
    assert not w.vouching
    assert w.take() is None
    assert not w.sync()


def test_deleting_the_root_loses_the_watcher(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    w = Watcher(str(root))
    w.start()
    token = w.open_window()
    shutil.rmtree(root)
    deadline = time.monotonic() + 10
    while w.lost_reason is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.lost_reason is not None
    assert w.close_window(token) is None
    w.stop()


def _pause_reader(w: Watcher, wake: Path) -> threading.Lock:
    """Hold watchdog's inotify reader between two reads, so the kernel queue fills up."""
    fd_obj = w._observer._inotify_fd
    lock: threading.Lock = fd_obj._lock
    lock.acquire()
    wake.write_text("wake")  # the reader wakes, reads this event, then waits for the lock
    time.sleep(0.2)
    return lock


def test_real_queue_overflow_stops_vouching_until_restart(tree: Path, watcher: Watcher) -> None:
    max_queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    token = watcher.open_window()
    lock = _pause_reader(watcher, tree / "wake")
    try:
        # Alternate two files: the kernel merges an event only with an identical one queued last.
        for i in range(max_queued + 4096):  # more than one read buffer (2048 events) beyond the limit
            os.utime(tree / ("a.txt" if i % 2 else "b.txt"))
    finally:
        lock.release()
    deadline = time.monotonic() + 20
    while watcher.lost_reason is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watcher.lost_reason is not None and "overflow" in watcher.lost_reason
    assert watcher.take() is None
    assert watcher.close_window(token) is None
    assert watcher.open_window() and not watcher.sync()
    # The observer was stopped (watchdog would otherwise rebuild its watches in a loop).
    deadline = time.monotonic() + 10
    while watcher._observer is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watcher._observer is None
    watcher.restart()
    assert watcher.vouching
    assert watcher.take() is None  # the interval since the last take had a gap
    sh(tree, "echo after > after.txt")
    assert watcher.take() == {"after.txt"}


def _in_user_namespace(script: str, max_watches: int) -> subprocess.CompletedProcess[str]:
    """Run python code in a user namespace whose inotify watch limit is ``max_watches``."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    import sys

    code = f'echo {max_watches} > /proc/sys/user/max_inotify_watches && exec {sys.executable} -c "$0"'
    proc = subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", code, script], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"user namespaces are not available: {proc.stderr.strip()}")
    return proc


def test_watch_limit_at_start_refuses_to_vouch(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"d{i}").mkdir()
    script = (
        "from sandbox.agent.watcher import Watcher\n"
        f"w = Watcher({str(tmp_path)!r}); w.start()\n"
        "print(w.vouching, w.take(), w.lost_reason)\n"
    )
    proc = _in_user_namespace(script, max_watches=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("False None could not watch"), proc.stdout


def test_watch_limit_for_a_new_directory_refuses_to_vouch(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"d{i}").mkdir()
    script = (
        "import os\n"
        "from sandbox.agent.watcher import Watcher\n"
        f"root = {str(tmp_path)!r}\n"
        "w = Watcher(root); w.start(); print(w.vouching, w.take())\n"
        "for i in range(30): os.makedirs(os.path.join(root, 'new', str(i)))\n"
        "print(w.take(), w.lost_reason)\n"
    )
    proc = _in_user_namespace(script, max_watches=20)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "True set()"
    assert lines[1].startswith("None could not watch"), proc.stdout


def test_measure_startup_reports_numbers(tree: Path) -> None:
    result = measure_startup(str(tree))
    assert result["vouching"] is True
    assert result["watches"] == result["directories"] == sum(1 for _ in os.walk(tree))
    assert result["seconds"] > 0
