"""A repository the agent makes inside its worktree and stages (issue 32, item 3).

Inside the sandbox the agent runs ``git init sub`` and ``git add sub``: the worktree's index then
names ``sub`` as a gitlink. libgit2's status (the scan that records a call without a watcher) opened
every repository the index names and read its config, following ``include.path``: a FIFO there
blocked recording for ever, in the unconfined process. Now the scan treats submodules as
unmodified and never opens them; capture records nothing of a nested repository (whichever of its
paths a watcher names), the rest of the call is recorded, and later calls work. Its own config's
``core.fsmonitor`` is never run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_repo, sandbox_cmd, scaled

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}
IDENT = "-c user.name=agent -c user.email=agent@example.com"

MAKE = f"git init -q sub && echo x > sub/x && git -C sub add x && git {IDENT} -C sub commit -qm x && git add sub"
#: Then: its config names a FIFO to include and a program to run; a change inside it and one outside.
PLANT = (
    "mkfifo sub/.git/fifo && printf '[include]\\n\\tpath = fifo\\n[core]\\n\\tfsmonitor = \"touch {marker}\"\\n'"
    " >> sub/.git/config && echo y > sub/y && echo z > top.txt"
)


def exec_(repo: Path, run_id: str, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = sandbox_cmd("exec", run_id, "--json", "--", "sh", "-c", script, cwd=repo, env=env, timeout=scaled(60))
    except subprocess.TimeoutExpired:
        pytest.fail("recording hung on the nested repository's config")
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


@pytest.mark.parametrize("how", ["scan", "host"])
def test_a_staged_nested_repository_is_recorded_as_nothing_and_its_config_never_read(
    repo: Path, tmp_path: Path, how: str
) -> None:
    env = AUTOSTART if how == "host" else {}
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    marker = tmp_path / "fsmonitor-ran"
    try:
        made = json.loads(exec_(repo, run_id, MAKE, env).stdout)
        assert made["status"] == "succeeded", made
        planted = json.loads(exec_(repo, run_id, PLANT.format(marker=marker), env).stdout)
        assert planted["status"] == "succeeded" and planted["files"] == 1, planted  # top.txt only
        after = json.loads(exec_(repo, run_id, "echo w >> top.txt", env).stdout)
        assert after["status"] == "succeeded" and after["files"] == 1, after
        diff = sandbox_cmd("diff", run_id, "--stat", cwd=repo).stdout.decode()
        assert "top.txt" in diff and "sub" not in diff, diff
        assert not marker.exists(), "the nested repository's core.fsmonitor ran"
    finally:
        if how == "host":
            sandbox_cmd("serve", "--stop", cwd=repo)


def test_the_scan_never_opens_a_staged_nested_repository_whatever_the_config_says(tmp_path: Path) -> None:
    """Without the run's ``diff.ignoreSubmodules = all`` (a run made before it was set, a config
    that says otherwise), libgit2's status read ``sub/.git/config`` and hung on its FIFO include."""
    worktree = make_repo(tmp_path / "wt", {"a.txt": "a\n"})
    sub = worktree / "sub"
    make_repo(sub, {"x": "x\n"})
    git(worktree, "add", "sub")
    os.mkfifo(sub / ".git" / "fifo")
    with open(sub / ".git" / "config", "a") as fh:
        fh.write("[include]\n\tpath = fifo\n")
    (worktree / "a.txt").write_text("changed\n")
    (sub / "y").write_text("y\n")
    probe = "import sys; from sandbox.store import scan; print(sorted(scan.status_paths(sys.argv[1])))"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", probe, str(worktree)], capture_output=True, timeout=scaled(30), check=True
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the scan hung on the nested repository's config")
    # The nested repository is named as a directory (capture records nothing of it and says so in the
    # call), never opened.
    assert proc.stdout.decode().strip() == "['a.txt', 'sub']", proc.stdout
