"""Sparse checkouts: a file outside the cone is not checked out, never "deleted" (issue #10, item 7).

The user runs ``git sparse-checkout set --cone a``; the run's worktree inherits the patterns. A
file outside the cone that the agent changed must be reported as outside the sparse checkout, not
as a deletion of the user's; the agent creating a file next to excluded ones must not record the
excluded ones as deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import git, make_repo

from .helpers import ok, open_run, sb


def sparse_repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo", {"a/x.txt": "in the cone\n", "b/y.txt": "outside\n", "top.txt": "top\n"})
    git(root, "sparse-checkout", "set", "--cone", "a")
    assert not (root / "b").exists()
    assert "S b/y.txt" in git(root, "ls-files", "-t")
    return root


def test_a_file_outside_the_cone_is_not_reported_as_deleted(tmp_path: Path) -> None:
    root = sparse_repo(tmp_path)
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    base = git(root, "ls-tree", "-r", "--name-only", f"refs/sandbox/{run_id}/base").split()
    assert "b/y.txt" in base, "the snapshot keeps the excluded file as it is in the index"
    ok("write", run_id, "a/x.txt", cwd=root, input=b"changed in the cone\n")
    ok("write", run_id, "b/y.txt", cwd=root, input=b"changed outside\n")

    proc = sb("apply", run_id, "--json", cwd=root)
    assert proc.returncode == 1, proc.stdout.decode() + proc.stderr.decode()
    report = json.loads(proc.stdout)
    (conflict,) = report["conflicts"]
    assert conflict["path"] == "b/y.txt"
    assert "sparse checkout" in conflict["reason"] and "deleted" not in conflict["reason"].replace("not deleted", ""), (
        conflict
    )
    assert "sparse-checkout add" in conflict["hint"]
    assert (root / "a/x.txt").read_text() == "in the cone\n" and not (root / "b").exists()

    ok("apply", run_id, "--path", "a", cwd=root)
    assert (root / "a/x.txt").read_text() == "changed in the cone\n"
    assert not (root / "b").exists() and "S b/y.txt" in git(root, "ls-files", "-t")


def test_files_next_to_excluded_ones_do_not_record_them_as_deleted(tmp_path: Path) -> None:
    from sandbox.store.capture import capture
    from sandbox.store.objects import commit_tree

    root = sparse_repo(tmp_path)
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    run = open_run(root, run_id)
    wt = Path(run.worktree)
    if (wt / "b").exists():  # a run with its own git dir starts fully checked out; the agent narrows it
        git(wt, "sparse-checkout", "set", "--cone", "a")
    assert not (wt / "b").exists() and "S b/y.txt" in git(wt, "ls-files", "-t")
    (wt / "b").mkdir()
    (wt / "b/new.txt").write_text("new\n")
    # A watcher reports the new directory; capture expands it.
    cap = capture(run.repo, run.worktree, commit_tree(run.repo, run.head()), ["b"])
    assert sorted(cap.changes) == ["b/new.txt"], cap.changes

    ok("exec", run_id, "--", "sh", "-c", "mkdir -p b && echo more > b/more.txt", cwd=root)
    logged = {f["path"]: f for e in json.loads(ok("log", run_id, "--json", cwd=root)) for f in e["files"]}
    assert "b/y.txt" not in logged, logged
    diff = ok("diff", run_id, "--stat", cwd=root)
    assert "y.txt" not in diff, diff
