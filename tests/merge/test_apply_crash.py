"""Crash tests: SIGKILL at every step of apply and undo, then --continue or undo gives a consistent tree."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sandbox import faults
from sandbox.merge import mergeback, writing
from sandbox.run.run import Run
from sandbox.store import fsutil
from tests.conftest import sandbox_cmd, user_state
from tests.merge.test_apply import start

pytestmark = pytest.mark.slow

STEPS = ["after_lock", "after_journal", "after_file", "after_file@3", "before_ledger", "after_ledger",
         "after_journal_remove"]  # fmt: skip

PATHS = ["README.md", "src/new.sh", "src/util.py", "lnk", "deep/dir/f.txt"]
ORIGINAL = {
    "README.md": "file:hello\nuser edit\n",
    "src/new.sh": None,
    "src/util.py": "file:X = 1\n",
    "lnk": None,
    "deep/dir/f.txt": None,
}
APPLIED = {
    "README.md": "file:agent\n",
    "src/new.sh": "exec:#!/bin/sh\n",
    "src/util.py": None,
    "lnk": "link:README.md",
    "deep/dir/f.txt": "file:deep\n",
}


def snapshot(root: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel in PATHS:
        full = root / rel
        if full.is_symlink():
            out[rel] = "link:" + os.readlink(full)
        elif full.is_file():
            kind = "exec" if os.stat(full).st_mode & 0o100 else "file"
            out[rel] = f"{kind}:{full.read_text()}"
        else:
            out[rel] = None
    return out


def consistent(root: Path) -> bool:
    """Every path at its before or its after state."""
    now = snapshot(root)
    return all(now[p] in (ORIGINAL[p], APPLIED[p]) for p in PATHS)


def make_run(repo: Path) -> Run:
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("README.md", "agent\n")
        call.write("src/new.sh", "#!/bin/sh\n", executable=True)
        call.delete("src/util.py")
        call.symlink("lnk", "README.md")
        call.write("deep/dir/f.txt", "deep\n")
    return run


def crash(repo: Path, point: str, *args: str) -> None:
    proc = sandbox_cmd("-C", str(repo), *args, cwd=repo, env={"SANDBOX_FAULT": point})
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr)


def test_fault_points_are_registered() -> None:
    for op in ("apply", "undo", "redo"):
        for step in writing.STEPS:
            assert f"{op}.{step}" in faults.POINTS


@pytest.mark.parametrize("resolve", ["continue", "undo"])
@pytest.mark.parametrize("step", STEPS)
def test_crash_during_apply(repo: Path, step: str, resolve: str) -> None:
    run = make_run(repo)
    before = user_state(repo)
    crash(repo, f"apply.{step}", "apply", run.run_id)
    assert consistent(repo)
    if step != "after_journal_remove" and step != "after_lock":
        other = sandbox_cmd("-C", str(repo), "apply", run.run_id, cwd=repo)
        assert other.returncode == 1 and "--continue" in other.stderr.decode()
    if resolve == "continue":
        proc = sandbox_cmd("-C", str(repo), "apply", "--continue", cwd=repo)
        assert proc.returncode == 0, proc.stderr
        assert snapshot(repo) == (ORIGINAL if step == "after_lock" else APPLIED)
    else:
        proc = sandbox_cmd("-C", str(repo), "undo", run.run_id, cwd=repo)
        # Killed before its journal: nothing of the run is in the tree, and undo says so.
        assert proc.returncode == (1 if step == "after_lock" else 0), proc.stderr
        assert snapshot(repo) == ORIGINAL
    assert (repo / "notes.txt").read_text() == "untracked notes\n"
    assert (repo / "debug.log").read_text() == "ignored\n"
    assert user_state(repo) == before
    # Afterwards the tree is usable again: a plain apply works and leaves the agent's version.
    proc = sandbox_cmd("-C", str(repo), "apply", run.run_id, cwd=repo)
    assert proc.returncode in (0, 1), proc.stderr
    if proc.returncode == 0:
        assert snapshot(repo) == APPLIED


@pytest.mark.parametrize("resolve", ["continue", "undo"])
@pytest.mark.parametrize("step", STEPS)
def test_crash_during_undo_in_the_user_tree(repo: Path, step: str, resolve: str) -> None:
    run = make_run(repo)
    mergeback.apply(run)
    before = user_state(repo)
    crash(repo, f"undo.{step}", "undo", run.run_id)
    assert consistent(repo)
    if resolve == "continue":
        proc = sandbox_cmd("-C", str(repo), "apply", "--continue", run.run_id, cwd=repo)
        assert proc.returncode == 0, proc.stderr
        assert snapshot(repo) == (APPLIED if step == "after_lock" else ORIGINAL)
    else:
        proc = sandbox_cmd("-C", str(repo), "undo", run.run_id, cwd=repo)
        if step == "after_journal_remove":
            assert proc.returncode == 1 and snapshot(repo) == ORIGINAL  # the undo had completed
        else:
            assert proc.returncode == 0, proc.stderr
            assert snapshot(repo) == (ORIGINAL if step == "after_lock" else APPLIED)
    assert user_state(repo) == before
    assert (repo / "notes.txt").read_text() == "untracked notes\n"


@pytest.mark.parametrize("resolve", ["continue", "undo"])
@pytest.mark.parametrize("step", STEPS)
def test_crash_during_undo_in_the_sandbox(repo: Path, step: str, resolve: str) -> None:
    run = make_run(repo)
    wt = Path(run.worktree)
    call_commit = run.head()
    user_before = snapshot(repo)
    crash(repo, f"undo.{step}", "undo", run.run_id, "--in-run", "--force")
    assert consistent(wt)
    cmd = ["apply", "--continue", run.run_id] if resolve == "continue" else ["undo", run.run_id, "--in-run", "--force"]
    proc = sandbox_cmd("-C", str(repo), *cmd, cwd=repo)
    undone = (step != "after_lock") if resolve == "continue" else step in ("after_lock", "after_journal_remove")
    if resolve == "undo" and step == "after_journal_remove":
        assert proc.returncode == 1  # nothing left to undo
    else:
        assert proc.returncode == 0, proc.stderr
    fresh = Run.open(run.project, run.run_id)
    if undone:
        assert snapshot(wt)["src/util.py"] == "file:X = 1\n" and snapshot(wt)["lnk"] is None
        assert fresh.head() == run.base
    else:
        assert snapshot(wt) == {**APPLIED, "README.md": "file:agent\n"}
        assert fresh.head() == call_commit
    assert snapshot(repo) == user_before  # the user's tree never moved


def strays(repo: Path) -> list[Path]:
    """Temporaries of killed writes: in the user's tree, or in the staging area under .git."""
    staging = repo / ".git" / "sandbox" / "staging"
    found = list(repo.rglob(".sandbox-tmp-*"))
    return found + ([p for p in staging.rglob("*") if not p.is_dir()] if staging.exists() else [])


@pytest.mark.parametrize("resolve", ["continue", "undo"])
@pytest.mark.parametrize("point", sorted(fsutil.WRITE_POINTS))
def test_crash_inside_a_file_write(repo: Path, point: str, resolve: str) -> None:
    """Killed inside the atomic write of the second file: every path before or after, then no stray file."""
    run = make_run(repo)
    crash(repo, f"{point}@2", "apply", run.run_id)
    assert consistent(repo)
    assert not list(repo.rglob(".sandbox-tmp-*")), "a temporary is visible in the user's tree"
    cmd = ["apply", "--continue"] if resolve == "continue" else ["undo", run.run_id]
    proc = sandbox_cmd("-C", str(repo), *cmd, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(repo) == (APPLIED if resolve == "continue" else ORIGINAL)
    assert not strays(repo)
