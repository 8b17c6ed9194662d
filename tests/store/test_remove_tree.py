"""``fsutil.remove_tree`` on a tree an agent may be changing while it is removed (real files, a real thread)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sandbox.store.fsutil import remove_tree

FILES = 20000


def test_a_directory_moved_out_while_it_is_emptied_leads_the_removal_nowhere_above(tmp_path: Path) -> None:
    """The removal goes back up through ``..``: when an agent moves the directory being emptied
    elsewhere meanwhile, ``..`` is that other place, and the removal must stop there instead of
    emptying it (another run's home, the run directory). The move is made while the removal is
    inside the directory (its file count has begun to fall)."""
    deep = tmp_path / "run" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for n in range(FILES):
        (deep / f"f{n}").write_bytes(b"")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.txt").write_text("keep me\n")
    moved = threading.Event()

    def mover() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if len(os.listdir(deep)) < FILES:
                    os.rename(deep, elsewhere / "c")
                    moved.set()
                    return
            except OSError:
                return
            time.sleep(0.0005)

    thread = threading.Thread(target=mover)
    thread.start()
    remove_tree(str(tmp_path / "run"))
    thread.join()
    assert (elsewhere / "victim.txt").read_text() == "keep me\n"
    if moved.is_set():
        assert (elsewhere).is_dir()


def test_drop_removes_a_run_whose_agent_home_is_nested_past_the_recursion_limit(repo: Path) -> None:
    """``sandbox drop`` of a run whose agent home holds 1,500 nested directories (it was an unexpected
    RecursionError, after the refs were deleted, and the run's directory stayed)."""
    from tests.conftest import sandbox_cmd
    from tests.hook_fixtures import start_run

    run = start_run(repo)
    deep = Path(run.dir) / "agent-state" / "homes" / "claude-code"
    deep.mkdir(parents=True)
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    try:
        done = sandbox_cmd("drop", run.run_id, "--force", cwd=repo)
        assert done.returncode == 0, done.stderr
        assert not os.path.lexists(run.dir)
    finally:
        remove_tree(str(deep))  # pytest's own clean-up of tmp_path recurses: never leave the chain behind
