"""Random kill -9 during apply, undo and redo of large files: the tree is always before or after.

Unlike the crash matrix (a named point per case), this loop kills a real ``sandbox`` process at a
random instant of its writing phase: after the journal appears, within the time an uninterrupted
run of the same operation takes to finish, so most kills land inside a file write of several MB.
After each kill the user does what the journal says (``apply --continue`` or ``undo``, chosen at
random), and the checks are what a user would check: every path is at its before or after state
(right after the kill and after recovery), the whole tree is exactly one of the two once
recovered, no stray file anywhere (the tree is walked; the staging area is empty), no journal is
left, the index/HEAD/refs are untouched, and ``git fsck --strict`` is clean.

40 kills in ``make test``; 300 in ``make soak``; in two lanes (two repositories, one thread each)
so one lane's process start-up overlaps the other's checks. The library calls of the lanes (a new
run, a recovery through the library) take one lock: only the CLI processes run side by side. The
outcome counts are written to ``last_kill_loop.txt`` next to this file.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import make_repo, tree_digest, user_state

from tests import cliserver

from .helpers import TIMEOUT, assert_fsck_clean, ok, open_run, write_temporaries

pytestmark = pytest.mark.slow

RESULTS = Path(__file__).with_name("last_kill_loop.txt")
MB = 1 << 20
LANES = 2
#: Serialises the lanes' in-process library calls (CLI processes and file checks run side by side).
LIBRARY = threading.Lock()
#: A ``sandbox`` process of the loop: forked by the tests' command server (:func:`tests.cliserver.popen`;
#: its pid is the command's own, so the SIGKILL lands in the command), or exec'd.
Process = cliserver.Forked | subprocess.Popen[bytes]


def build(root: Path, seed: int) -> None:
    """A repository with files of several MB (the agent's change is made by :func:`make_run`)."""
    rng = random.Random(seed)
    make_repo(
        root,
        {
            "big/one.bin": rng.randbytes(3 * MB),
            "big/two.bin": rng.randbytes(2 * MB + 777),
            "src/app.py": "print('app')\n",
            "src/util.py": "X = 1\n",
            "README.md": "hello\n",
        },
    )


@functools.cache
def state_dir(root: Path) -> Path:
    """The sandbox's state directory of the repository at ``root`` (journal, staging area)."""
    from sandbox.store.project import Project

    return Path(Project.discover(str(root))[0].state_dir)


def journal_dir(root: Path) -> Path:
    return state_dir(root) / "journal"


def pending(root: Path) -> bool:
    return any(journal_dir(root).glob("*.json")) if journal_dir(root).exists() else False


def strays(root: Path) -> list[str]:
    """Every temporary of the sandbox's writes: walked in the tree, in the staging area and the journal dir."""
    return write_temporaries(root)


def make_run(root: Path, seed: int) -> tuple[str, str]:
    """A run started from the tree as it is, whose one call makes the agent's change (same bytes every time)."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    rng = random.Random(seed)
    rng.randbytes(3 * MB)  # the bytes of the committed files come first from this seed
    rng.randbytes(2 * MB + 777)
    with run.tool_call("edit", {}) as call:
        call.write("big/one.bin", rng.randbytes(3 * MB + 5))
        call.write("big/three.bin", rng.randbytes(4 * MB))
        call.delete("big/two.bin")
        call.write("src/app.py", "print('agent')\n")
        call.delete("src/util.py")
        call.write("deep/a/b/c.txt", "deep\n")
        call.write("bin/run.sh", "#!/bin/sh\n", executable=True)
        call.symlink("link", "README.md")
    assert call.entry is not None
    return run.run_id, call.entry.call_id


def timed(root: Path, *args: str) -> float:
    """Run an operation to its end; the seconds its journal existed (its writing phase)."""
    proc = cliserver.popen(*args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = wait_for_journal(root, proc)
    assert seen is not None, "the operation wrote no journal"
    while pending(root) and proc.poll() is None:
        time.sleep(0.0005)
    gone = time.monotonic()
    assert proc.wait(timeout=TIMEOUT) == 0, proc.stderr.read().decode() if proc.stderr else ""
    return gone - seen


def recover(root: Path, run_id: str, how: str, via_cli: bool) -> None:
    """What the journal says to do: finish the operation or roll it back (the CLI, or the same library call)."""
    if via_cli:
        ok(*(["apply", "--continue", run_id] if how == "continue" else ["undo", run_id]), cwd=root)
        return
    from sandbox.merge import undo, writing

    run = open_run(root, run_id)
    if how == "continue":
        assert writing.continue_pending(run.project, str(root)) is not None
    else:
        undo.undo(run)


def wait_for_journal(root: Path, proc: Process) -> float | None:
    """Poll (bounded) until the operation's journal exists; the time it was seen, or None if it exited first."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if pending(root):
            return time.monotonic()
        if proc.poll() is not None:
            return None
        time.sleep(0.0005)
    raise AssertionError("the operation neither wrote its journal nor exited")


def wait_for_staged(root: Path, proc: Process) -> bool:
    """Poll (bounded) until a temporary of a file write exists in the staging area; False if the process ended."""
    staging = state_dir(root) / "staging"
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(os.listdir(staging / key) for key in os.listdir(staging)):
                return True
        except OSError:
            pass
        time.sleep(0.0002)
    return False


def check_per_path(now: dict[str, str], before: dict[str, str], after: dict[str, str]) -> None:
    for path in set(now) | set(before) | set(after):
        assert now.get(path) in (before.get(path), after.get(path)), f"{path} is at neither its before nor after"


def kill_loop(tmp_path: Path, kills: int, seed: int) -> Counter[str]:
    rng = random.Random(seed)
    root = tmp_path / "repo"
    build(root, seed)
    with LIBRARY:
        run_id, _call_id = make_run(root, seed)
    before, user = tree_digest(root), user_state(root)
    window = timed(root, "apply", run_id)
    after = tree_digest(root)
    window = max(window, timed(root, "undo", run_id), 0.01)
    assert tree_digest(root) == before
    stats: Counter[str] = Counter()
    attempts = 0
    while stats["kills"] < kills:
        attempts += 1
        assert attempts <= kills * 4, f"too few kills landed: {dict(stats)}"
        now = tree_digest(root)
        if now == after:
            op = "undo"
        else:
            with LIBRARY:
                from sandbox.merge import treeops

                run = open_run(root, run_id)
                # An undone apply can be redone, or applied afresh (the run keeps the agent's change).
                undone = bool(treeops.stack(run, run.state()).undone)
                op = "apply" if not undone or rng.random() < 0.3 else "redo"
        proc = cliserver.popen(op, run_id, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        aim = rng.choice(["anywhere", "inside a write"])
        if wait_for_journal(root, proc) is not None:
            # Half the kills at a random instant of the writing phase, half a few ms after a file
            # write began (the writes are a fraction of the phase: reading, hashing, the ledger).
            if aim == "inside a write" and wait_for_staged(root, proc):
                time.sleep(rng.uniform(0, 0.004))
            else:
                time.sleep(rng.uniform(0, window))
            proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=TIMEOUT)
        if code != -signal.SIGKILL:
            assert code == 0, f"{op} exited {code}"
            stats["finished before the kill"] += 1
            continue
        stats["kills"] += 1
        stats[f"killed during {op}"] += 1
        left = strays(root)
        visible = [p for p in left if not Path(p).is_relative_to(state_dir(root))]
        assert not visible, f"a temporary is visible in the user's tree: {visible}"
        if left:
            stats["killed inside a file write"] += 1
        check_per_path(tree_digest(root), before, after)
        if pending(root):
            how, via_cli = rng.choice(["continue", "undo"]), rng.random() < 0.25
            if via_cli:
                recover(root, run_id, how, via_cli)
            else:
                with LIBRARY:
                    recover(root, run_id, how, via_cli)
            stats[f"recovered with {'apply --continue' if how == 'continue' else 'undo'}"] += 1
            stats["recovered through the CLI"] += via_cli
        else:
            stats["no journal pending (killed before its write or after its removal)"] += 1
        now = tree_digest(root)
        assert now in (before, after), "after recovery the tree is a mix of before and after"
        assert not strays(root), f"stray files after recovery: {strays(root)}"
        assert not pending(root), "a journal is left after recovery"
        assert user_state(root) == user, "the user's index, HEAD or refs changed"
        assert_fsck_clean(root, strict=True)
    return stats


def report(name: str, stats: Counter[str], seconds: float) -> None:
    line = json.dumps({"test": name, "seconds": round(seconds, 1), **dict(stats)}, sort_keys=True)
    try:
        with open(RESULTS, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def lanes(tmp_path: Path, kills: int, seed: int) -> Counter[str]:
    """:func:`kill_loop` in :data:`LANES` repositories at once; the summed counts."""
    per_lane = -(-kills // LANES)
    with ThreadPoolExecutor(LANES) as pool:
        futures = [pool.submit(kill_loop, tmp_path / f"lane{i}", per_lane, seed + i) for i in range(LANES)]
        results = [f.result() for f in futures]
    return sum(results, Counter())


def test_random_kills_during_apply_undo_redo(tmp_path: Path) -> None:
    started = time.monotonic()
    stats = lanes(tmp_path, kills=40, seed=20261130)
    report("make test", stats, time.monotonic() - started)
    assert stats["kills"] >= 40


@pytest.mark.soak
def test_random_kills_soak(tmp_path: Path) -> None:
    started = time.monotonic()
    stats = lanes(tmp_path, kills=300, seed=int(time.time()))
    report("soak", stats, time.monotonic() - started)
    assert stats["kills"] >= 300
