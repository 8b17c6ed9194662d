"""Recording on a full disk tells the truth (issue #10, item 3, the recording half).

The repository lives on a small tmpfs that the test mounts, fills on purpose and unmounts. A
call's ``started`` event is durable; when its changes then cannot be stored, the sandbox must
never say "nothing was recorded": the call ends ``failed`` with the reason when that small event
still fits, or stays ``started`` with the exact command that finishes it once space is freed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_repo

from .helpers import assert_one_line_error, ok, open_run, sb

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(mnt: Path, leave: int) -> Path:
    """Fill the file system until only ``leave`` bytes are free (0: until a write fails)."""
    filler = mnt / "filler"
    with open(filler, "ab") as fh:
        chunk = b"\0" * 65536
        while True:
            room = free_bytes(mnt) - leave
            if room <= 0:
                break
            try:
                fh.write(chunk[: min(room, len(chunk))])
                fh.flush()
            except OSError:
                break
    return filler


def started_call(mnt: Path) -> tuple[Path, str, str]:
    root = make_repo(mnt / "repo", {"a.txt": "a\n"})
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    call_id = json.loads(ok("call", "start", run_id, "--tool", "generate", "--json", cwd=root))["call_id"]
    # The agent's work: a file that does not compress, so storing it needs as much space again.
    (Path(open_run(root, run_id).worktree) / "big.bin").write_bytes(os.urandom(256 * 1024))
    return root, run_id, call_id


def call_of(root: Path, run_id: str, call_id: str) -> dict[str, object]:
    entries = {e["call_id"]: e for e in json.loads(ok("log", run_id, "--json", cwd=root))}
    return entries[call_id]


def test_a_call_whose_changes_do_not_fit_ends_failed_with_the_reason(small_fs: Path) -> None:
    root, run_id, call_id = started_call(small_fs)
    filler = fill(small_fs, leave=96 * 1024)
    proc = sb("call", "finish", run_id, call_id, "--status", "succeeded", "--path", "big.bin", cwd=root)
    line = assert_one_line_error(proc, what="finish on a full disk")
    assert "nothing was recorded" not in line, line
    assert "recorded as failed" in line and "No space left" in line, line
    filler.unlink()
    entry = call_of(root, run_id, call_id)
    assert entry["status"] == "failed", entry
    assert "No space left" in str(entry["error"]), entry
    assert not entry["files"]


def test_a_call_that_cannot_even_end_stays_started_and_says_how_to_finish(small_fs: Path) -> None:
    root, run_id, call_id = started_call(small_fs)
    filler = fill(small_fs, leave=0)
    proc = sb("call", "finish", run_id, call_id, "--status", "succeeded", "--path", "big.bin", cwd=root)
    line = assert_one_line_error(proc, what="finish on a completely full disk")
    assert "nothing was recorded" not in line, line
    command = f"sandbox call finish {run_id} {call_id} --status succeeded"
    assert "stays started" in line and command in line, line
    filler.unlink()
    assert call_of(root, run_id, call_id)["status"] == "started"
    ok(*command.split()[1:], "--path", "big.bin", cwd=root)
    entry = call_of(root, run_id, call_id)
    assert entry["status"] == "succeeded" and [f["path"] for f in entry["files"]] == ["big.bin"], entry  # type: ignore[union-attr]


def test_a_write_that_hits_the_full_disk_is_reported_truthfully(small_fs: Path) -> None:
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    filler = fill(small_fs, leave=64 * 1024)
    proc = sb("write", run_id, "big.bin", cwd=root, input=os.urandom(512 * 1024))
    line = assert_one_line_error(proc, what="write on a full disk")
    assert "nothing was recorded" not in line, line
    filler.unlink()
    assert "No space left" in line, line
    if "Cannot write" in line:  # the worktree shares the full disk: the write itself failed
        assert "'big.bin'" in line, line
    (call,) = json.loads(ok("log", run_id, "--json", cwd=root))
    if call["status"] == "started":  # even the failed event did not fit: the line says how to finish
        assert "stays started" in line, line
    else:
        assert call["status"] == "failed" and "No space left" in call["error"], call
