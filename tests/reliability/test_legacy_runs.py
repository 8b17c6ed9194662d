"""Runs made before runs had homes keep working where they are, and ``sandbox gc`` moves them.

The old layout is built by hand (:func:`helpers.make_legacy`): a locked, detached linked worktree
of the user's repository under ``.git/sandbox/worktrees/<run>``, with git's admin dir in
``.git/worktrees/<run>`` and no ``place`` in the run's directory, exactly what ``start`` made before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .helpers import (
    cli_entries,
    git,
    make_legacy,
    ok,
    open_run,
    sandbox_things,
    sb,
    things_of,
    user_state,
    write,
)


def _hook(cwd: Path, event: dict[str, object]) -> None:
    payload = {"cwd": str(cwd), "tool": "save", "call_id": "c-hook", "kind": "write", **event}
    proc = sb("hook", "generic", cwd=cwd, input=json.dumps(payload).encode())
    assert proc.returncode == 0, proc.stderr.decode()


def test_legacy_run_works_where_it_is_then_gc_moves_it_and_drop_gc_leave_nothing(user_repo: Path) -> None:
    run_id = json.loads(ok("start", "--json", cwd=user_repo))["run"]
    legacy = make_legacy(user_repo, run_id)
    before = user_state(user_repo)
    # Found where it is: by id, from inside its worktree, by hooks and by exec.
    assert ok("path", run_id, cwd=user_repo).strip() == str(legacy)
    assert ok("path", cwd=legacy / "src").strip() == str(legacy)
    assert "warning" not in ok("status", run_id, cwd=user_repo)  # its git is your repository's: nothing planted
    ok("exec", run_id, "--", "sh", "-c", "echo one > made-by-exec.txt", cwd=user_repo)
    _hook(legacy / "src", {"event": "start", "paths": ["hooked.py"]})
    write(legacy, "src/hooked.py", "x = 1\n")
    _hook(legacy / "src", {"event": "finish"})
    write(legacy, "wip.txt", "unrecorded agent work\n")
    calls = cli_entries(user_repo, run_id)
    assert sorted(f["path"] for e in calls.values() for f in e["files"]) == ["made-by-exec.txt", "src/hooked.py"]
    status = json.loads(ok("status", run_id, "--json", cwd=user_repo))
    assert status["worktree"] == str(legacy) and status["worktree_exists"]
    # gc moves it into a home: files, index and HEAD come along; git's admin dir leaves the repository.
    out = ok("gc", cwd=user_repo)
    assert f"Moved run {run_id}" in out, out
    run = open_run(user_repo, run_id)
    wt = Path(run.worktree)
    assert not run.place.legacy and not legacy.exists()
    assert not wt.is_relative_to(user_repo)
    assert (wt / "wip.txt").read_text() == "unrecorded agent work\n"
    assert (wt / "src/hooked.py").read_text() == "x = 1\n"
    # The old index came along: the files the sandbox recorded (never staged) and wip.txt are untracked.
    assert git(wt, "status", "--porcelain") == "?? made-by-exec.txt\n?? src/hooked.py\n?? wip.txt\n"
    assert git(user_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not os.path.exists(user_repo / ".git" / "worktrees" / run_id)
    assert user_state(user_repo) == before
    assert "Moved" not in ok("gc", cwd=user_repo)  # once
    # It keeps working in its new place: exec (whose scan also takes the unrecorded wip.txt), hooks,
    # and its own git.
    ok("exec", run_id, "--", "sh", "-c", "echo two > after-move.txt", cwd=user_repo)
    _hook(wt, {"event": "start", "call_id": "c-hook2", "paths": ["hooked2.py"]})
    write(wt, "hooked2.py", "y = 2\n")
    _hook(wt, {"event": "finish", "call_id": "c-hook2"})
    files = sorted(f["path"] for e in cli_entries(user_repo, run_id).values() for f in e["files"])
    assert files == ["after-move.txt", "hooked2.py", "made-by-exec.txt", "src/hooked.py", "wip.txt"]
    git(wt, "checkout", "-q", "-b", "agent-branch")
    assert "agent-branch" not in git(user_repo, "branch", "-a")
    # drop + gc leave nothing, in the new place or the old.
    home = run.place.home
    ok("drop", run_id, "--force", cwd=user_repo)
    ok("gc", cwd=user_repo)
    assert not things_of(sandbox_things(user_repo), run_id)
    assert home is not None and not os.path.lexists(home) and not legacy.exists()
    assert user_state(user_repo) == before
