"""Derived state is never trusted over the ledger, and an agent cannot make a run vanish (issue #10).

Attacks as an agent with write access to the repository would make them: an edited fold cache
that still parses and names the right tip, and the run's ledger ref deleted, rewound or rewritten.
Every check goes through the installed CLI in real processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import git, make_repo, write

from .helpers import assert_one_line_error, ok, open_run, sb


def start(root: Path) -> str:
    run_id: str = json.loads(ok("start", "--json", cwd=root))["run"]
    return run_id


@pytest.fixture
def env(tmp_path: Path) -> tuple[Path, str]:
    """A repository and a run with enough calls that its fold is cached (16+ events)."""
    root = make_repo(tmp_path / "repo", {"keep.txt": "the user's file\n", "a.txt": "a\n"})
    run_id = start(root)
    for i in range(9):
        ok("write", run_id, "a.txt", cwd=root, input=f"agent {i}\n".encode())
    cache = Path(open_run(root, run_id).dir) / "ledger-cache.json"
    assert cache.exists(), "the fold is expected to be cached after 16 events"
    return root, run_id


def forge_phantom_deletion(root: Path, run_id: str, how: str) -> None:
    """Edit the cache so the last call also 'deleted' keep.txt; the tip stays right."""
    cache = Path(open_run(root, run_id).dir) / "ledger-cache.json"
    run = open_run(root, run_id)
    state = run.state().model_dump(mode="json")
    keep_blob = git(root, "rev-parse", "HEAD:keep.txt").strip()
    last = state["calls"][state["order"][-1]]
    phantom = dict(last["files"][0], path="keep.txt", before_hash=keep_blob, after_hash=None)
    phantom["before_mode"], phantom["after_mode"] = 0o100644, None
    last["files"].append(phantom)
    stored = json.loads(cache.read_text())
    if how == "edited":  # the cache's own format, its MAC left as it was
        assert "state" in stored, stored.keys()
        stored["state"] = json.dumps(state, separators=(",", ":"))
        cache.write_text(json.dumps(stored))
    else:  # a bare fold, as the cache was stored before it was sealed
        cache.write_text(json.dumps(state, separators=(",", ":")))


@pytest.mark.parametrize("how", ["edited", "bare"])
def test_forged_cache_with_the_right_tip_is_not_trusted(env: tuple[Path, str], how: str) -> None:
    root, run_id = env
    forge_phantom_deletion(root, run_id, how)
    proc = sb("log", run_id, "--json", cwd=root)
    assert proc.returncode == 0, proc.stderr
    logged = [f["path"] for e in json.loads(proc.stdout) for f in e["files"]]
    assert "keep.txt" not in logged, "log showed a deletion that never happened"
    assert "did not match the ledger" in proc.stderr.decode(), proc.stderr

    forge_phantom_deletion(root, run_id, how)
    proc = sb("apply", run_id, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert (root / "keep.txt").read_text() == "the user's file\n", "apply deleted the user's file"
    assert (root / "a.txt").read_text() == "agent 8\n"
    assert "did not match the ledger" in proc.stderr.decode()

    forge_phantom_deletion(root, run_id, how)
    proc = sb("resume", run_id, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "did not match the ledger" in proc.stderr.decode(), "resume did not report the forged cache"
    proc = sb("log", run_id, "--json", cwd=root)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr  # rebuilt: nothing left to report


def test_a_cache_edit_that_keeps_the_mac_field_cannot_pass_with_any_mac(env: tuple[Path, str]) -> None:
    """Swapping in the MAC of another valid cache does not help: it covers the fold's exact bytes."""
    root, run_id = env
    cache = Path(open_run(root, run_id).dir) / "ledger-cache.json"
    good = json.loads(cache.read_text())
    forge_phantom_deletion(root, run_id, "edited")
    forged = json.loads(cache.read_text())
    assert forged["mac"] == good["mac"] and forged["state"] != good["state"]
    proc = sb("log", run_id, "--json", cwd=root)
    assert "keep.txt" not in proc.stdout.decode()


# -- the run cannot vanish -------------------------------------------------------------------------


def ledger_tip(root: Path, run_id: str) -> str:
    return git(root, "rev-parse", f"refs/sandbox/{run_id}/ledger").strip()


def rewrite_ref(root: Path, run_id: str, how: str) -> None:
    ref = f"refs/sandbox/{run_id}/ledger"
    if how == "delete":
        git(root, "update-ref", "-d", ref)
    elif how == "rewind":
        git(root, "update-ref", ref, f"{ref}~2")
    else:  # another history: a forged event on top of an older one
        empty = git(root, "hash-object", "-t", "tree", "-w", "--stdin").strip()
        parent = git(root, "rev-parse", f"{ref}~3").strip()
        forged = git(root, "commit-tree", empty, "-p", parent, "-m", "sandbox-event note\n\n{}").strip()
        git(root, "update-ref", ref, forged)


@pytest.mark.parametrize("how", ["delete", "rewind", "rewrite"])
def test_a_damaged_ledger_ref_is_reported_kept_by_gc_and_repaired(tmp_path: Path, how: str) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    run_id = start(root)
    for i in range(3):
        ok("write", run_id, f"f{i}.txt", cwd=root, input=b"work\n")
    ok("checkpoint", run_id, "--label", "cp", cwd=root)
    good = ledger_tip(root, run_id)
    worktree = Path(open_run(root, run_id).worktree)
    head = git(root, "rev-parse", f"refs/sandbox/{run_id}/head").strip()

    rewrite_ref(root, run_id, how)

    listing = ok("list", cwd=root)
    assert run_id in listing and "DAMAGED" in listing and f"sandbox repair {run_id}" in listing, listing
    for cmd in (["log", run_id], ["apply", run_id], ["resume", run_id], ["drop", run_id, "--force"]):
        line = assert_one_line_error(sb(*cmd, cwd=root), what=f"{how}: {cmd[0]}")
        assert f"sandbox repair {run_id}" in line, line
    proc = sb("write", run_id, "late.txt", cwd=root, input=b"x")
    assert_one_line_error(proc, what=f"{how}: write")

    gc = ok("gc", cwd=root)
    if how == "delete":
        assert f"sandbox repair {run_id}" in gc, gc
    assert worktree.is_dir() and (worktree / "f2.txt").read_text() == "work\n"
    assert git(root, "rev-parse", f"refs/sandbox/{run_id}/head").strip() == head
    assert git(root, "rev-parse", "--verify", "-q", f"refs/sandbox/{run_id}/checkpoints", check=False).strip()

    out = ok("repair", run_id, cwd=root)
    assert "restored" in out, out
    assert ledger_tip(root, run_id) == good
    logged = ok("log", run_id, "--json", cwd=root)
    assert [f["path"] for e in json.loads(logged) for f in e["files"]] == ["f0.txt", "f1.txt", "f2.txt"]
    ok("write", run_id, "after-repair.txt", cwd=root, input=b"ok\n")
    assert "intact" in ok("repair", run_id, cwd=root)


def test_gc_force_reclaims_a_vanished_run_and_drop_leaves_no_damage(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    vanished, dropped = start(root), start(root)
    for run_id in (vanished, dropped):
        ok("write", run_id, "x.txt", cwd=root, input=b"x\n")
    worktree = Path(open_run(root, vanished).worktree)
    git(root, "update-ref", "-d", f"refs/sandbox/{vanished}/ledger")
    ok("drop", dropped, "--force", cwd=root)
    listing = ok("list", cwd=root)
    assert vanished in listing and dropped not in listing
    ok("gc", cwd=root)
    assert worktree.is_dir()
    ok("gc", "--force", cwd=root)
    assert not worktree.exists()
    assert git(root, "for-each-ref", "refs/sandbox/").strip() == ""
    assert "No runs" in ok("list", cwd=root)


def test_a_start_interrupted_before_its_ledger_is_still_collected(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    proc = sb("start", cwd=root, fault="start.after_worktree")
    assert proc.returncode != 0
    gc = ok("gc", "--json", cwd=root)
    report = json.loads(gc)
    assert len(report["runs"]) == 1 and not report["damaged"], report
    write(root, "b.txt", "b\n")
