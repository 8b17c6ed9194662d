"""The ledger's durable write (sandbox.store.durable): three phases of fsyncs, in order, crash-safe between them."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from sandbox.run.run import Run
from sandbox.store import durable
from sandbox.store.fsutil import sync_together
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd


def start_run(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True, text=True).stdout


def ledger_tip(repo: Path, run_id: str) -> str:
    return git(repo, "rev-parse", f"refs/sandbox/{run_id}/ledger").strip()


_LINE = re.compile(r"^(?:\[pid\s+(\d+)\] |(\d+) +)?(.*)$")
_CALL = re.compile(r"^(fsync|rename|link)\((?:\d+<([^>]*)>|\"([^\"]*)\")")


def completions(trace: str) -> list[tuple[str, str]]:
    """(syscall, path) in the order the calls *returned* (``strace -f -y -o FILE``; a call split by
    another thread's is complete at its ``resumed`` line). fsync names its descriptor's path; rename
    and link their first path."""
    pending: dict[str, tuple[str, str]] = {}
    out: list[tuple[str, str]] = []
    for raw in trace.splitlines():
        m = _LINE.match(raw)
        assert m is not None
        pid, rest = m.group(1) or m.group(2) or "main", m.group(3)
        if rest.startswith("<... "):
            if pid in pending:
                out.append(pending.pop(pid))
            continue
        call = _CALL.match(rest)
        if call is None:
            continue
        item = (call.group(1), call.group(2) or call.group(3))
        if re.search(r"\) += 0$", rest.rstrip()):
            out.append(item)
        elif not re.search(r"\) += -?\d+", rest):  # unfinished: another thread's call came between
            pending[pid] = item
    return out


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see the fsyncs")
def test_each_ledger_move_waits_for_its_objects_and_is_synced_before_the_command_returns(repo: Path) -> None:
    """The chain a power cut cannot break: an object's content synced before it has its name, its name
    synced before the ref moves, the ref's new content synced before it is renamed into place, and
    the ref's directory synced before the command goes on; the fsyncs of one phase run in threads."""
    run = start_run(repo)
    exe = Path(sys.executable).parent / "sandbox"
    trace = repo.parent / "strace.txt"
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-o", str(trace), "-e", "trace=fsync,rename,link"]
        + [str(exe), "write", run.run_id, "traced.txt"],
        input=b"traced\n",
        capture_output=True,
        cwd=repo,
        env={**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    done = completions(trace.read_text(errors="replace"))
    ref_dir = str(repo / ".git" / "refs" / "sandbox" / run.run_id)
    lock = ref_dir + "/ledger.lock"
    moves = [i for i, (call, path) in enumerate(done) if call == "rename" and path == lock]
    assert len(moves) == 2, "one ledger move for the started event, one for the finish"
    objects = os.path.realpath(run.repo.sandbox_store)  # the run's own store (sandbox.store.runstore)
    start = 0
    for move in moves:
        before = done[start:move]
        synced = [path for call, path in before if call == "fsync"]
        assert lock in synced, "the ref's new content is synced before it is renamed into place"
        named = [i for i, (call, path) in enumerate(before) if call in ("link", "rename") and "/tmp_sandbox_" in path]
        assert named, before
        for i in named:  # each object file is synced before it gets its final name
            assert ("fsync", before[i][1]) in before[:i], (before[i], before[:i])
        last_named = max(named)
        directories = [path for call, path in before[last_named:] if call == "fsync"]
        assert any(re.fullmatch(re.escape(objects) + r"/([0-9a-f]{2}|pack)", p) for p in directories), (
            "the objects' directory is synced after they are named, before the ref moves"
        )
        assert done[move + 1] == ("fsync", ref_dir), "the ref's directory is synced right after it moves"
        start = move + 1


def test_a_kill_between_the_objects_and_the_ref_leaves_the_ledger_whole(repo: Path) -> None:
    """kill -9 once the event's objects are durable and before the ref moves: the ledger keeps its tip,
    the new event's commit is stored whole (dangling, its parent the tip), and the next call records."""
    run = start_run(repo)
    tip = ledger_tip(repo, run.run_id)
    killed = sandbox_cmd(
        "call", "start", run.run_id, "--tool", "deploy", cwd=repo, env={"SANDBOX_FAULT": "ledger.append.after_objects"}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ledger_tip(repo, run.run_id) == tip
    assert (repo / ".git" / "refs" / "sandbox" / run.run_id / "ledger.lock").exists()  # left by the killed writer
    dangling = [
        line.split()[2] for line in git(repo, "fsck", "--no-reflogs", "--dangling").splitlines() if "commit" in line
    ]
    events = [oid for oid in dangling if git(repo, "cat-file", "-p", oid).count(f"parent {tip}") == 1]
    assert len(events) == 1, dangling
    assert "sandbox-event call_started" in git(repo, "cat-file", "-p", events[0])
    again = sandbox_cmd("call", "start", run.run_id, "--tool", "deploy", cwd=repo)
    assert again.returncode == 0, again.stderr
    call_id = again.stdout.decode().strip()
    status = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo).stdout)
    assert status["in_flight"] == [call_id]
    git(repo, "fsck", "--strict")


def test_a_kill_after_the_ref_moved_keeps_the_event(repo: Path) -> None:
    """kill -9 after the rename, before the ref's directory is synced: the event is the ledger's tip."""
    run = start_run(repo)
    tip = ledger_tip(repo, run.run_id)
    killed = sandbox_cmd(
        "call",
        "start",
        run.run_id,
        "--tool",
        "deploy",
        cwd=repo,
        env={"SANDBOX_FAULT": "ledger.append.after_ref_rename"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    new_tip = ledger_tip(repo, run.run_id)
    assert new_tip != tip and f"parent {tip}" in git(repo, "cat-file", "-p", new_tip)
    assert not (repo / ".git" / "refs" / "sandbox" / run.run_id / "ledger.lock").exists()
    status = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo).stdout)
    assert len(status["in_flight"]) == 1
    git(repo, "fsck", "--strict")


def test_the_ref_moves_only_from_the_expected_tip_and_leaves_no_lock(repo: Path) -> None:
    run = start_run(repo)
    pygit_repo = pygit2.Repository(str(repo))
    tip = ledger_tip(repo, run.run_id)
    ref = f"refs/sandbox/{run.run_id}/ledger"
    lock = repo / ".git" / ref.replace("/", os.sep)
    with pytest.raises(durable.RefMovedError):
        durable.lock_ref(pygit_repo, str(repo / ".git"), ref, "0" * 40, tip)
    assert not Path(str(lock) + ".lock").exists()
    # A lock git holds (or a writer left) is never taken over here: the ledger clears a stale one itself.
    Path(str(lock) + ".lock").write_text("held\n")
    with pytest.raises(FileExistsError):
        durable.lock_ref(pygit_repo, str(repo / ".git"), ref, tip, tip)
    assert Path(str(lock) + ".lock").read_text() == "held\n"
    os.unlink(str(lock) + ".lock")
    # Made only where there is none; a new ref's new directories have their entries synced with its lock.
    with pytest.raises(durable.RefMovedError):
        durable.lock_ref(pygit_repo, str(repo / ".git"), ref, None, tip)
    made = durable.lock_ref(pygit_repo, str(repo / ".git"), "refs/sandbox/new/dir/ledger", None, tip)
    assert len(made.made) == 2 and len(made.fds) == 3  # refs/sandbox and refs/sandbox/new got entries; the lock
    made.commit()
    assert git(repo, "rev-parse", "refs/sandbox/new/dir/ledger").strip() == tip
    # After a `git pack-refs`, the tip is read from packed-refs, and the move is a loose ref again.
    git(repo, "pack-refs", "--all")
    update = durable.lock_ref(pygit_repo, str(repo / ".git"), ref, tip, git(repo, "rev-parse", "HEAD").strip())
    update.commit()
    assert ledger_tip(repo, run.run_id) == git(repo, "rev-parse", "HEAD").strip()


def test_sync_together_waits_for_every_fsync_and_raises_the_first_error(tmp_path: Path) -> None:
    good = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    bad = os.open(os.devnull, os.O_WRONLY)  # fsync of a character device fails with EINVAL
    try:
        sync_together([good, good])
        with pytest.raises(OSError) as raised:
            sync_together([good, bad, good])
        assert raised.value.errno == errno.EINVAL
    finally:
        os.close(good)
        os.close(bad)


def test_an_object_already_stored_is_kept_and_synced_not_rewritten(repo: Path) -> None:
    objects = repo / ".git" / "objects"
    oid = durable.write_loose(str(objects), 3, b"hello\n")
    hashed = subprocess.run(
        ["git", "hash-object", "--stdin"], cwd=repo, input=b"hello\n", capture_output=True, check=True
    )
    assert oid == hashed.stdout.decode().strip()
    path = objects / oid[:2] / oid[2:]
    before = path.stat()
    assert durable.write_loose(str(objects), 3, b"hello\n") == oid
    assert path.stat().st_ino == before.st_ino
    assert git(repo, "cat-file", "blob", oid) == "hello\n"
    assert not [p for p in objects.iterdir() if p.name.startswith("tmp_sandbox_")]
