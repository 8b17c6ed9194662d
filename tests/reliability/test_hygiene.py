"""Git hygiene after a long scripted session: the user's repository stays clean and whole.

50 calls over 3 runs, with applies and undos, then: ``git fsck --strict``, the user's own
``git gc --prune=now`` (every run object must survive it), the user's branches, tags, stash, log
and index unchanged, run worktrees locked with a reason, disk use reported, and after drop + gc
nothing of the sandbox left behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import git, user_state, write

from .helpers import (
    assert_fsck_clean,
    has_command,
    ok,
    open_run,
    sandbox_things,
)


def scripted_session(root: Path) -> list[str]:
    """3 runs, 50 calls (library and CLI), applies and undos where they exist."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    runs = []
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    calls = 0
    for r in range(3):
        run = Run.start(project, workdir, label=f"session-{r}")
        runs.append(run.run_id)
        for k in range(14):
            with run.tool_call("write_file", {"r": r, "k": k}, idempotency="idempotent", replay="auto") as call:
                call.write(f"gen/r{r}/file{k % 5}.txt", f"run {r} step {k}\n" * (k + 1))
                if k % 4 == 0:
                    call.write(f"gen/r{r}/exec{k}.sh", "#!/bin/sh\n", executable=True)
                if k % 7 == 3:
                    call.symlink(f"gen/r{r}/link{k}", f"file{k % 5}.txt")
            calls += 1
        ok("exec", run.run_id, "--", "sh", "-c", f"echo shell > gen/r{r}/shell.txt", cwd=root)
        ok("write", run.run_id, f"gen/r{r}/cli.txt", cwd=root, input=b"from the CLI\n")
        calls += 2
    last = runs[-1]
    ok("call", "start", last, "--tool", "t", "--call-id", "c_fail", cwd=root)
    ok("call", "finish", last, "c_fail", "--status", "failed", "--error", "boom", cwd=root)
    ok("call", "start", last, "--tool", "t", "--call-id", "c_ok", cwd=root)
    ok("call", "finish", last, "c_ok", "--status", "succeeded", "--result", '{"n": 1}', cwd=root)
    calls += 2
    assert calls == 50
    if has_command("apply") and has_command("undo"):
        ok("apply", runs[0], cwd=root)
        ok("undo", runs[0], cwd=root)
        ok("undo", runs[1], "--in-run", "--force", cwd=root)  # in the run only: its last call leaves its head
        ok("apply", runs[2], "--path", "gen/r2", cwd=root)
        ok("undo", runs[2], cwd=root)
        if has_command("redo"):
            ok("redo", runs[2], cwd=root)
    return runs


def referenced_objects(root: Path, run_id: str) -> set[str]:
    """Every object the run's ledger refers to: event commits, call commits, blobs, inputs, results."""
    run = open_run(root, run_id)
    out: set[str] = set()
    for oid, event in run.events():
        out.add(oid)
        for value in (event.commit, event.parent_commit, event.result_ref):
            if value:
                out.add(value)
        if event.call and event.call.input_ref:
            out.add(event.call.input_ref)
        for f in event.files:
            out.update(h for h in (f.before_hash, f.after_hash) if h)
    out.add(run.base)
    return out


def test_long_session_hygiene(user_repo: Path) -> None:
    # The user has a stash and a tag of their own; both must come through untouched.
    write(user_repo, "src/app.py", "stashed edit\n")
    git(user_repo, "stash", "push", "-q", "--", "src/app.py")
    before_user = user_state(user_repo)
    before_log = git(user_repo, "log", "--format=%H %s", "--branches", "--tags", "--remotes", "HEAD")
    before_tags = git(user_repo, "tag")
    before_all = git(user_repo, "log", "--format=%H %s", "--all")

    runs = scripted_session(user_repo)

    assert_fsck_clean(user_repo, strict=True)
    assert user_state(user_repo) == before_user
    assert git(user_repo, "log", "--format=%H %s", "--branches", "--tags", "--remotes", "HEAD") == before_log
    assert git(user_repo, "tag") == before_tags
    assert git(user_repo, "stash", "list") == before_user["stash"]
    assert "sandbox" not in git(user_repo, "branch", "-a")

    # Runs are no worktrees of the user's repository (each has its own git dir), so the user's
    # 'git worktree list' does not show them and 'git worktree prune' cannot touch them.
    assert git(user_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    git(user_repo, "worktree", "prune")
    for run_id in runs:
        run = open_run(user_repo, run_id)
        assert run.worktree_exists() and not run.place.legacy

    # The user's own gc must keep every object a run refers to.
    wanted = {r: referenced_objects(user_repo, r) for r in runs}
    git(user_repo, "gc", "-q", "--prune=now")
    for run_id, oids in wanted.items():
        repo = open_run(user_repo, run_id).repo  # the run's objects: its own store, then yours
        missing = [oid for oid in oids if not repo.odb.exists(oid)]
        assert not missing, f"run {run_id}: objects lost to git gc: {missing[:5]}"
        for oid in oids:
            repo.odb.read(oid)  # readable, not just listed
        json.loads(ok("log", run_id, "--json", cwd=user_repo))
        ok("diff", run_id, "--stat", cwd=user_repo)
    assert_fsck_clean(user_repo, strict=True)
    assert user_state(user_repo) == before_user

    # Disk use per run is reported, then reclaimed by drop + gc.
    listed = {row["run"]: row for row in json.loads(ok("list", "--json", cwd=user_repo))}
    assert set(listed) == set(runs)
    for run_id in runs:
        assert listed[run_id]["disk_bytes"] > 0, listed[run_id]
    state_dir = user_repo / ".git" / "sandbox"
    homes = [Path(str(open_run(user_repo, r).place.home)) for r in runs]
    used = _du(state_dir) + sum(_du(h) for h in homes)
    freed = 0
    for run_id in runs:
        freed += json.loads(ok("drop", run_id, "--force", "--json", cwd=user_repo))["bytes_freed"]
    ok("gc", cwd=user_repo)
    assert freed > 0 and _du(state_dir) + sum(_du(h) for h in homes) < used - freed // 2
    assert not any(h.exists() for h in homes)
    things = sandbox_things(user_repo)
    assert things == {"refs": set(), "worktrees": set(), "runs": set(), "admin": set(), "stores": set()}, things
    assert not (user_repo / ".git" / "worktrees").exists() or not os.listdir(user_repo / ".git" / "worktrees")
    assert git(user_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(user_repo, "for-each-ref", "refs/sandbox") == ""
    assert user_state(user_repo) == before_user
    # With every run dropped, even --all (which lists linked worktrees' HEADs) is back as it was.
    assert git(user_repo, "log", "--format=%H %s", "--all") == before_all
    assert_fsck_clean(user_repo, strict=True)


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total
