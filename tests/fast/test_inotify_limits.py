"""The kernel's own watch limit (``fs.inotify.max_user_watches``) meets a tree: it says so and never vouches.

Each test runs in a user namespace whose inotify limits are its own (they are counted per user per user
namespace), so the machine's limit is never touched. What ``sandbox exec`` watches in its own process is
one such tree (:func:`sandbox.agent.execute.execute` with ``local_watcher``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _in_user_namespace(script: str, max_watches: int) -> subprocess.CompletedProcess[str]:
    """Run python code in a user namespace whose inotify watch limit is ``max_watches``."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    code = f'echo {max_watches} > /proc/sys/user/max_inotify_watches && exec {sys.executable} -c "$0"'
    proc = subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", code, script], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"user namespaces are not available: {proc.stderr.strip()}")
    return proc


def test_the_user_watch_limit_at_start_leaves_the_tree_unvouched(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"d{i}").mkdir()
    script = (
        "from sandbox.fast.inotify import Inotify\n"
        f"tree = Inotify().watch({str(tmp_path)!r})\n"
        "t = tree.open_window()\n"
        "print(tree.vouching, tree.watches, tree.close_window(t), tree.lost_reason)\n"
    )
    proc = _in_user_namespace(script, max_watches=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("False 0 None the user's inotify watches are used up"), proc.stdout


def test_the_user_watch_limit_for_a_new_directory_leaves_the_tree_unvouched(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"d{i}").mkdir()
    script = (
        "import os\n"
        "from sandbox.fast.inotify import Inotify\n"
        f"root = {str(tmp_path)!r}\n"
        "tree = Inotify().watch(root)\n"
        "t = tree.open_window(); print(tree.vouching, tree.close_window(t))\n"
        "t = tree.open_window()\n"
        "for i in range(30): os.makedirs(os.path.join(root, 'new', str(i)))\n"
        "print(tree.close_window(t), tree.lost_reason)\n"
    )
    proc = _in_user_namespace(script, max_watches=20)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "True set()", proc.stdout
    assert lines[1].startswith("None "), proc.stdout
    assert "inotify watches are used up" in lines[1], proc.stdout
