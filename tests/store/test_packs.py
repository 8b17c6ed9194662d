"""A call's objects as one small pack: valid for git, readable by every process, merged by level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from sandbox.run.run import Run
from sandbox.store import objects, packs
from sandbox.store.project import Project
from tests.conftest import git, make_repo


def _start(root: Path) -> Run:
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir)


def _loose_count(objdir: Path) -> int:
    return sum(len(os.listdir(objdir / d)) for d in os.listdir(objdir) if len(d) == 2)


def _store(run: Run) -> Path:
    """Where the run's objects are written: its own store (sandbox.store.runstore)."""
    return Path(run.repo.sandbox_store)


def _pack_dir(root: Path) -> Path:
    return root / ".git" / "objects" / "pack"


def test_a_written_pack_is_valid_for_git(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    objdir = str(root / ".git" / "objects")
    items = [
        (packs.object_id(3, b"hello\n"), 3, b"hello\n"),
        (packs.object_id(3, b"\0binary" * 5000), 3, b"\0binary" * 5000),
        (packs.object_id(3, b""), 3, b""),
    ]
    name = packs.write_pack(objdir, items, len(items))
    assert git(root, "verify-pack", str(_pack_dir(root) / f"{name}.idx")) == ""
    git(root, "fsck", "--strict", "--no-dangling")
    listed = set(packs.index_ids(str(_pack_dir(root) / f"{name}.idx")))
    assert listed == {oid for oid, _k, _d in items}
    for oid, _kind, data in items:
        assert git(root, "cat-file", "-p", oid).encode(errors="surrogateescape") == data
    assert not [n for n in os.listdir(_pack_dir(root)) if n.startswith(packs.TEMP_PREFIX)]


def test_a_pack_refuses_a_wrong_count_and_leaves_no_temp_file(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    objdir = str(root / ".git" / "objects")
    with pytest.raises(ValueError, match="announced"):
        packs.write_pack(objdir, [(packs.object_id(3, b"x"), 3, b"x")], 2)
    assert not [n for n in os.listdir(_pack_dir(root)) if n.startswith(packs.TEMP_PREFIX)]


def test_our_commit_bytes_are_libgit2s(tmp_path: Path) -> None:
    """The event commit is stored before libgit2 moves the ref: both must make the same object."""
    root = make_repo(tmp_path / "repo")
    repo = pygit2.Repository(str(root))
    tree = objects.write_tree(repo, {"a": objects.Entry(objects.MODE_FILE, objects.write_blob(repo, b"a"))})
    first = ""
    for message, parents in [
        ("plain\n", []),
        ("h\u00e9llo \U0001f600\n\nbody\n", []),
        ("no newline", []),
        ("two parents\n", ["P1", "P2"]),
    ]:
        if parents:
            parents = [first, str(repo.head.target)]
        when = objects.now()
        mine = objects.write_commit(repo, tree, parents, message, when)
        sig = objects.signature(when)
        assert str(repo.create_commit(None, sig, sig, message, tree, parents)) == mine
        first = first or mine


def test_a_one_file_call_writes_one_pack_and_no_loose_object(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a/b/c/d.txt": "one\n"})
    run = _start(root)
    with run.tool_call("Write", {"path": "a/b/c/d.txt"}) as call:
        call.write("a/b/c/d.txt", "two\n")
    loose = _loose_count(_store(run))
    before = set(os.listdir(_store(run) / "pack"))
    with run.tool_call("Write", {"path": "a/b/c/d.txt"}) as call:
        call.write("a/b/c/d.txt", "three\n")
    new = set(os.listdir(_store(run) / "pack")) - before
    assert len([n for n in new if n.endswith(".idx")]) == 1
    # Only the started event is loose (one object: cheaper loose than packed).
    assert _loose_count(_store(run)) == loose + 1
    assert call.entry is not None and call.entry.commit is not None
    # A fresh process (plain git) reads the call's commit, its tree and the ledger.
    assert git(root, "show", f"{call.entry.commit}:a/b/c/d.txt") == "three\n"
    git(root, "fsck", "--strict", "--no-dangling")


def test_packs_are_merged_by_level_and_every_object_stays_readable(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"f.txt": "0\n"})
    run = _start(root)
    objdir = str(_store(run))
    commits = []
    for i in range(packs.FAN_IN * 2 + 3):
        with run.tool_call("Write", {"i": i}) as call:
            call.write(f"d{i % 3}/f.txt", f"{i}\n")
        assert call.entry is not None and call.entry.commit is not None
        commits.append(call.entry.commit)
    levels = list(packs.registered(objdir).values())
    assert levels.count(0) < packs.FAN_IN
    assert levels.count(1) >= 2
    git(root, "fsck", "--strict", "--no-dangling")
    for i, commit in enumerate(commits):
        assert git(root, "show", f"{commit}:d{i % 3}/f.txt") == f"{i}\n"
    # A fresh process reading through the library agrees, and so does the user's gc.
    project, _wt, _ = Project.discover(str(root))
    assert len(Run.open(project, run.run_id).entries()) == len(commits)
    git(root, "gc", "--prune=now", "-q")
    for i, commit in enumerate(commits):
        assert git(root, "show", f"{commit}:d{i % 3}/f.txt") == f"{i}\n"


READER = r"""
import sys, pygit2
repo = pygit2.Repository(sys.argv[1])
ids = sys.argv[2:]
repo.odb.read(ids[0])  # opens the packs as they are now
print("ready", flush=True)
sys.stdin.readline()  # the packs are merged and the old ones removed meanwhile
for oid in ids:
    repo.odb.read(oid)
print("ok", flush=True)
"""


def test_a_process_that_opened_the_repository_before_a_merge_still_reads_everything(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"f.txt": "0\n"})
    run = _start(root)
    objdir = str(_store(run))
    commits = []
    while len(packs.registered(objdir)) < packs.FAN_IN - 1:
        with run.tool_call("Write", {}) as call:
            call.write("f.txt", f"{len(commits) + 1}\n")
        assert call.entry is not None and call.entry.commit is not None
        commits.append(call.entry.commit)
    assert set(packs.registered(objdir).values()) == {0}
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(root), *commits],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "ready"
    with run.tool_call("Write", {"i": "last"}) as call:
        call.write("f.txt", "last\n")
    assert list(packs.registered(objdir).values()) == [1]
    reader.stdin.write("go\n")
    reader.stdin.flush()
    assert reader.stdout.readline().strip() == "ok"
    assert reader.wait(timeout=30) == 0


def test_a_killed_pack_write_leaves_only_temp_files_that_gc_removes(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"f.txt": "0\n"})
    run = _start(root)
    code = (
        "import os, signal\n"
        "from sandbox.store import objects, packs\n"
        "real = os.fsync\n"
        "def die(fd):\n"
        "    real(fd)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.fsync = die\n"
        f"items = [(packs.object_id(3, b'x'), 3, b'x'), (packs.object_id(3, b'y'), 3, b'y')]\n"
        f"packs.write_pack({str(root / '.git' / 'objects')!r}, items, 2)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -signal.SIGKILL
    temps = [n for n in os.listdir(_pack_dir(root)) if n.startswith(packs.TEMP_PREFIX)]
    assert temps  # the pack was written and synced, then the process died before its index
    git(root, "fsck", "--strict", "--no-dangling")  # git ignores them
    assert packs.remove_leftovers(str(root / ".git" / "objects"), older_than=time.time() + 1) == len(temps)
    assert not [n for n in os.listdir(_pack_dir(root)) if n.startswith(packs.TEMP_PREFIX)]
    with run.tool_call("Write", {}) as call:
        call.write("f.txt", "1\n")
    assert call.entry is not None and call.entry.commit is not None


def test_objects_written_in_a_failed_batch_are_never_stored(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo")
    repo = pygit2.Repository(str(root))
    with pytest.raises(RuntimeError), objects.batch(repo):
        oid = objects.write_blob(repo, b"never stored\n")
        assert objects.read_blob(repo, oid) == b"never stored\n"  # the batch serves its own writes
        raise RuntimeError("boom")
    assert oid not in repo.odb


def test_sandbox_gc_removes_old_pack_temp_files_only(tmp_path: Path) -> None:
    """What a killed pack write leaves: removed by `sandbox gc` after an hour, never a fresh one."""
    from tests.conftest import sandbox_cmd

    root = make_repo(tmp_path / "repo")
    pack_dir = _pack_dir(root)
    pack_dir.mkdir(parents=True, exist_ok=True)
    old = pack_dir / f"{packs.TEMP_PREFIX}dead.pack"
    fresh = pack_dir / f"{packs.TEMP_PREFIX}writing.pack"
    old.write_bytes(b"PACK")
    fresh.write_bytes(b"PACK")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    proc = sandbox_cmd("gc", "--json", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["temp_files"] == 1
    assert not old.exists() and fresh.exists()
