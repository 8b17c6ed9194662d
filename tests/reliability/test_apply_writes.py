"""Apply, undo and redo never leave the user's tree wrong (issue #10, the write side).

* a kill inside a file write leaves no stray temporary once ``apply --continue``, ``undo`` or
  ``gc`` ran (the journal names every temporary before it exists);
* planning sees every obstacle (an empty directory where a file goes, an unreadable file, a
  read-only mount, a path outside the sparse checkout) and writes nothing;
* disk full during apply or undo rolls the operation back with one line and exit 1;
* new files honour the umask;
* reports list as applied or restored only what was written.

Real processes, real mounts (tmpfs and bind mounts: the suite runs as root; each mount test
skips with the reason where mounting is not permitted), real SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, make_repo, tree_digest, user_state, write

from sandbox.store import fsutil

from .helpers import SANDBOX_EXE, TIMEOUT, assert_fsck_clean, assert_one_line_error, ok, open_run, sb, write_temporaries

BIG = 3 * (1 << 20) + 12345  # four chunks of fsutil.CHUNK: a kill after the second lands inside the write


def start_run(root: Path) -> str:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return str(Run.start(project, workdir).run_id)


def record(root: Path, run_id: str, files: dict[str, bytes | None], executable: tuple[str, ...] = ()) -> None:
    """One agent call writing (or, for None, deleting) ``files`` in the run."""
    run = open_run(root, run_id)
    with run.tool_call("edit", {}) as call:
        for rel, data in files.items():
            if data is None:
                call.delete(rel)
            else:
                call.write(rel, data, executable=rel in executable)


def strays(root: Path) -> list[str]:
    """Every temporary of the sandbox's writes: walked in the tree, in the staging area and the journal dir."""
    return write_temporaries(root)


def journals(root: Path) -> list[Path]:
    from sandbox.store.project import Project

    return list((Path(Project.discover(str(root))[0].state_dir) / "journal").glob("*.json"))


def crash(root: Path, fault: str, *args: str) -> None:
    proc = sb(*args, cwd=root, fault=fault)
    assert proc.returncode == -signal.SIGKILL, f"{fault}: exit {proc.returncode}: {proc.stderr.decode()}"


def mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"mounting is not permitted here: {proc.stderr.decode().strip()}")


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


# -- kills inside a write ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "recovery"),
    [
        ("tree.write.after_create@1", "gc"),
        ("tree.write.after_chunk@2", "continue"),
        ("tree.write.after_fsync@2", "undo"),
    ],
)
def test_kill_inside_a_write_leaves_no_stray_file(user_repo: Path, point: str, recovery: str) -> None:
    run_id = start_run(user_repo)
    big = os.urandom(BIG)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "big.bin": big, "src/app.py": b"print('agent')\n"})
    before = tree_digest(user_repo)
    crash(user_repo, point, "apply", run_id)
    assert strays(user_repo), "the kill did not land inside a write (no temporary to clean up)"
    assert not list(user_repo.rglob(f"{fsutil.TEMP_PREFIX}*")), "a temporary is visible in the user's tree"
    if recovery == "gc":
        ok("gc", cwd=user_repo)
        assert not strays(user_repo), "gc left a killed write's temporary behind"
        assert journals(user_repo), "gc removed the journal of a pending apply"
        recovery = "continue"
    if recovery == "continue":
        ok("apply", "--continue", run_id, cwd=user_repo)
        assert (user_repo / "big.bin").read_bytes() == big
    else:
        ok("undo", run_id, cwd=user_repo)
        assert tree_digest(user_repo) == before
    assert not strays(user_repo) and not journals(user_repo)
    assert_fsck_clean(user_repo, strict=True)


@pytest.fixture
def bind_mounted(user_repo: Path) -> Iterator[Path]:
    """``mnt/`` of the user's tree is a bind mount of itself: the same device, yet rename(2) into it
    from the staging area fails with EXDEV, so writes there go through a temporary next to the file."""
    target = user_repo / "mnt"
    target.mkdir()
    mount("--bind", str(target), str(target))
    try:
        yield target
    finally:
        umount(target)


def test_kill_inside_a_write_next_to_the_file(user_repo: Path, bind_mounted: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"mnt/data.bin": os.urandom(BIG)})
    # The first attempt (staging area) reaches after_chunk four times, then its rename fails with EXDEV.
    crash(user_repo, "tree.write.after_chunk@6", "apply", run_id)
    beside = list(bind_mounted.glob(f"{fsutil.TEMP_PREFIX}*"))
    assert beside, "the write did not fall back to a temporary next to the file"
    ok("apply", "--continue", run_id, cwd=user_repo)
    assert not strays(user_repo)
    assert len((bind_mounted / "data.bin").read_bytes()) == BIG


def test_write_across_a_bind_mount_completes(user_repo: Path, bind_mounted: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"mnt/a.txt": b"a\n", "mnt/sub/b.txt": b"b\n", "top.txt": b"t\n"})
    ok("apply", run_id, cwd=user_repo)
    assert (bind_mounted / "sub/b.txt").read_bytes() == b"b\n" and (user_repo / "top.txt").exists()
    assert not strays(user_repo)


# -- obstacles found by planning --------------------------------------------------------------------


def refused_apply(root: Path, run_id: str) -> tuple[str, dict[str, object]]:
    """An apply that must be refused with nothing written; returns its error line and JSON report."""
    before = (tree_digest(root), user_state(root))
    proc = sb("apply", run_id, "--json", cwd=root)
    line = assert_one_line_error(proc, what="apply over an obstacle")
    assert (tree_digest(root), user_state(root)) == before, "a refused apply wrote something"
    assert not strays(root) and not journals(root)
    report = json.loads(proc.stdout)
    assert report["applied"] == [] and report["refused"] is True
    assert "nothing was written" in line.lower()
    return line, report


@pytest.mark.parametrize("layout", ["nested-empty", "empty", "non-empty"])
def test_directory_where_the_agent_writes_a_file(user_repo: Path, layout: str) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "build": b"a file now\n", "zzz.txt": b"last\n"})
    if layout == "nested-empty":
        (user_repo / "build/sub/deeper").mkdir(parents=True)
    elif layout == "empty":
        (user_repo / "build").mkdir()
    else:
        write(user_repo, "build/out.o", "object\n")
    _line, report = refused_apply(user_repo, run_id)
    conflicts = report["conflicts"]
    assert isinstance(conflicts, list)
    assert [c["path"] for c in conflicts] == ["build"] and "directory" in conflicts[0]["reason"]


def test_file_where_the_agent_writes_a_directory(user_repo: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "out/log.txt": b"log\n"})
    write(user_repo, "out", "the user's file\n")
    _line, report = refused_apply(user_repo, run_id)
    assert [c["path"] for c in report["conflicts"]] == ["out/log.txt"]  # type: ignore[index, union-attr]


def test_unreadable_file_is_a_conflict(user_repo: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "src/app.py": b"print('agent')\n"})
    (user_repo / "src/app.py").chmod(0o200)  # write-only: nobody but root could read it
    try:
        line, report = refused_apply(user_repo, run_id)
    finally:
        (user_repo / "src/app.py").chmod(0o644)
    assert "cannot be read" in report["conflicts"][0]["reason"]  # type: ignore[index]


def test_read_only_mount_is_a_conflict(user_repo: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "ro/new.txt": b"new\n"})
    target = user_repo / "ro"
    target.mkdir()
    mount("--bind", str(target), str(target))
    try:
        mount("-o", "remount,bind,ro", str(target))
        line, report = refused_apply(user_repo, run_id)
    finally:
        umount(target)
    assert "read-only" in line.lower()


def test_path_outside_the_sparse_checkout_is_a_conflict(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"src/a.py": "a\n", "docs/guide.md": "guide\n", "top.txt": "top\n"})
    git(root, "sparse-checkout", "set", "--cone", "src")
    assert not (root / "docs/guide.md").exists()
    run_id = start_run(root)
    record(root, run_id, {"src/a.py": b"agent a\n", "docs/guide.md": b"agent guide\n", "other/new.txt": b"new\n"})
    _line, report = refused_apply(root, run_id)
    reasons = {c["path"]: c["reason"] for c in report["conflicts"]}  # type: ignore[union-attr]
    assert set(reasons) == {"docs/guide.md", "other/new.txt"}, reasons
    assert all("sparse checkout" in r for r in reasons.values())
    assert not (root / "docs").exists() and not (root / "other").exists()
    ok("apply", run_id, "--path", "src", cwd=root)
    assert (root / "src/a.py").read_text() == "agent a\n"


# -- modes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o077, 0o022])
def test_new_files_honour_the_umask(user_repo: Path, umask: int) -> None:
    run_id = start_run(user_repo)
    record(
        user_repo,
        run_id,
        {".env.local": b"SECRET=1\n", "tools/run.sh": b"#!/bin/sh\n", "README.md": b"agent\n"},
        executable=("tools/run.sh",),
    )
    (user_repo / "README.md").chmod(0o640)  # the same content the agent started from: the apply writes it
    proc = subprocess.run(
        [SANDBOX_EXE, "apply", run_id],
        cwd=user_repo,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
        preexec_fn=lambda: os.umask(umask),
    )
    assert proc.returncode == 0, proc.stderr.decode()

    def perm(rel: str) -> int:
        return stat.S_IMODE(os.lstat(user_repo / rel).st_mode)

    assert perm(".env.local") == 0o666 & ~umask
    assert perm("tools/run.sh") == 0o777 & ~umask
    assert perm("tools") == 0o777 & ~umask
    assert perm("README.md") == 0o640, "an existing file keeps the user's permissions"


# -- reports ----------------------------------------------------------------------------------------


def test_a_refused_apply_reports_nothing_as_applied(user_repo: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"aaa.txt": b"first\n", "README.md": b"agent\n", "zzz.txt": b"last\n"})
    write(user_repo, "README.md", "the user's edit after the run started\n")
    proc = sb("apply", run_id, cwd=user_repo)
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert "Applied" not in out and "aaa.txt" not in out, out
    assert "nothing was written" in out + proc.stderr.decode()
    assert not (user_repo / "aaa.txt").exists()


def test_undo_and_redo_reports_name_what_they_wrote(user_repo: Path) -> None:
    run_id = start_run(user_repo)
    record(user_repo, run_id, {"new.txt": b"new\n"})
    applied = json.loads(ok("apply", run_id, "--json", cwd=user_repo))
    assert applied["applied"] == ["new.txt"] and applied["restored"] == []
    undone = json.loads(ok("undo", run_id, "--json", cwd=user_repo))
    assert undone["restored"] == ["new.txt"] and undone["applied"] == [], "undo called restored paths 'applied'"
    text = ok("redo", run_id, cwd=user_repo)
    assert "new.txt" in text and (user_repo / "new.txt").exists()
    text = ok("undo", run_id, cwd=user_repo)
    assert "Restored 1 path(s)" in text and "Applied" not in text


# -- disk full ----------------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs to fill up on purpose (skipped where mounting is not permitted)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mount("-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt))
    try:
        yield mnt
    finally:
        umount(mnt)


def fill_leaving(fs: Path, free: int) -> Path:
    """Fill ``fs`` up but for about ``free`` bytes; returns the filler to remove afterwards."""
    reserve = fs / "reserve"
    reserve.write_bytes(b"\0" * free)
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    with open(filler, "ab", buffering=0) as fh:  # the last partial block
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    reserve.unlink()
    return filler


def store_in_yours(root: Path, run_id: str, contents: list[bytes]) -> None:
    """Copy these blobs of the run into your own store beforehand, as an earlier apply would have: an apply
    copies what it writes there first (a full disk then refuses it before anything is written:
    test_disk_full_before_the_journal), and these tests fill the disk in the middle of the files. (Not with
    `git hash-object -w`: git finds the blob in the run's store and writes nothing.)"""
    import pygit2

    from sandbox.store import repository

    repository.give_to_user(open_run(root, run_id).repo, [str(pygit2.hash(data)) for data in contents])


@pytest.mark.parametrize("op", ["apply", "redo"])
def test_disk_full_during_apply_or_redo_rolls_back(small_fs: Path, op: str) -> None:
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = start_run(root)
    files = {f"f{i}.bin": os.urandom(400_000) for i in range(8)}
    record(root, run_id, dict(files))
    if op == "redo":
        ok("apply", run_id, cwd=root)  # which copied the blobs into your store
        ok("undo", run_id, cwd=root)
    else:
        store_in_yours(root, run_id, list(files.values()))
    before = (tree_digest(root), user_state(root))
    filler = fill_leaving(small_fs, 1_300_000)  # three files fit, the fourth does not
    proc = sb(op, run_id, cwd=root)
    line = assert_one_line_error(proc, what=f"{op} on a full disk")
    assert "ENOSPC" in line and "put back" in line and f"sandbox {op} {run_id}" in line, line
    assert re.search(r"writing 'f\d\.bin'", line), "the line does not name the path that failed"
    assert (tree_digest(root), user_state(root)) == before, f"a failed {op} left part of its writes"
    assert not strays(root) and not journals(root)
    filler.unlink()
    ok(op, run_id, cwd=root)
    assert all((root / rel).read_bytes() == data for rel, data in files.items())
    assert_fsck_clean(root, strict=True)


def test_disk_full_before_the_journal(small_fs: Path) -> None:
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = start_run(root)
    record(root, run_id, {"new.txt": os.urandom(100_000)})
    before = tree_digest(root)
    filler = fill_leaving(small_fs, 0)
    proc = sb("apply", run_id, cwd=root)
    filler.unlink()
    line = assert_one_line_error(proc, what="apply on a full disk")
    assert "nothing was written" in line.lower() or "nothing of your tree changed" in line, line
    assert tree_digest(root) == before and not strays(root) and not journals(root)
    ok("apply", run_id, cwd=root)


def test_disk_full_during_undo_rolls_back(small_fs: Path) -> None:
    originals = {f"f{i}.bin": os.urandom(400_000) for i in range(6)}
    root = make_repo(small_fs / "repo", dict(originals))
    run_id = start_run(root)
    record(root, run_id, {rel: b"shrunk by the agent\n" for rel in originals})
    ok("apply", run_id, cwd=root)
    applied = tree_digest(root)
    filler = fill_leaving(small_fs, 1_000_000)  # two originals fit back, the third does not
    proc = sb("undo", run_id, cwd=root)
    line = assert_one_line_error(proc, what="undo on a full disk")
    assert "ENOSPC" in line and f"sandbox undo {run_id}" in line, line
    assert tree_digest(root) == applied, "a failed undo left part of its writes"
    assert not strays(root) and not journals(root)
    filler.unlink()
    ok("undo", run_id, cwd=root)
    assert all((root / rel).read_bytes() == data for rel, data in originals.items())
    assert_fsck_clean(root, strict=True)


@pytest.mark.parametrize("way_out", ["continue", "undo"])
def test_disk_full_where_putting_back_fails_too_keeps_the_journal(small_fs: Path, way_out: str) -> None:
    """The agent grows files: the disk fills mid-apply, and the first original no longer fits back.

    Free 1.2 MB: f0 (1 MB -> 1.05 MB) fits, f1 and f2 (10 kB -> 500 kB) eat the rest, f3 (2 MB)
    fails; putting f0 back then needs 1 MB for its temporary, with about 0.2 MB free.
    """
    sizes = {"f0.bin": (1_000_000, 1_050_000), "f1.bin": (10_000, 500_000), "f2.bin": (10_000, 500_000)}
    sizes["f3.bin"] = (10_000, 2_000_000)
    originals = {rel: os.urandom(old) for rel, (old, _new) in sizes.items()}
    root = make_repo(small_fs / "repo", dict(originals))
    run_id = start_run(root)
    grown = {rel: os.urandom(new) for rel, (_old, new) in sizes.items()}
    record(root, run_id, dict(grown))
    store_in_yours(root, run_id, list(grown.values()))
    before = tree_digest(root)
    filler = fill_leaving(small_fs, 1_200_000)
    proc = sb("apply", run_id, cwd=root)
    line = assert_one_line_error(proc, what="apply on a full disk")
    assert "journal is kept" in line, line
    assert f"sandbox apply --continue {run_id}" in line and f"sandbox undo {run_id}" in line, line
    assert journals(root)
    now = tree_digest(root)
    for rel in originals:
        assert (root / rel).read_bytes() in (originals[rel], grown[rel]), f"{rel} is neither before nor after"
    assert now != before, "the test did not make the roll-back fail"
    filler.unlink()
    if way_out == "continue":
        ok("apply", "--continue", run_id, cwd=root)
        assert all((root / rel).read_bytes() == data for rel, data in grown.items())
    else:
        ok("undo", run_id, cwd=root)
        assert tree_digest(root) == before
    assert not strays(root) and not journals(root)
    assert_fsck_clean(root, strict=True)


@pytest.mark.parametrize("cleaner", ["gc", "apply"])
def test_a_killed_journal_write_leaves_nothing(user_repo: Path, cleaner: str) -> None:
    """A kill inside the journal's own atomic write leaves its temporary: the next apply or gc removes it."""
    from sandbox.store import journal

    run_id = start_run(user_repo)
    record(user_repo, run_id, {"new.txt": b"new\n"})
    key = journal.tree_key(str(user_repo))
    leftover = Path(journal.journal_path(open_run(user_repo, run_id).project, str(user_repo))).parent
    leftover = leftover / f"{fsutil.TEMP_PREFIX}{key}.json-dead"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_text("{half a journal")
    ok(cleaner, *([run_id] if cleaner == "apply" else []), cwd=user_repo)
    assert not leftover.exists() and not strays(user_repo)
