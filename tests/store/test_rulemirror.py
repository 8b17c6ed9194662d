"""The host's mirror of a run's ignore rules (sandbox.store.rulemirror), in a real run's worktree: what it
answers follows the rule files as they are now, one that is not a plain file counts as absent, and the
mirrors of processes that are gone are removed by the next one made (docs/design.md promises both)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import sandbox_cmd

from sandbox.run.run import Run
from sandbox.store.project import Project


def test_the_mirror_follows_the_rules_and_sweeps_what_dead_processes_left(repo: Path) -> None:
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    project, _, _ = Project.discover(str(repo))
    rules = Path(project.common_dir) / "sandbox" / "runs" / run_id / "rules"
    left = rules / "99999999.abc"  # above any pid_max: a process that is gone
    (left / ".git").mkdir(parents=True)
    run = Run.open(project, run_id)
    worktree = Path(run.worktree)
    (worktree / "sub").mkdir()
    (worktree / "sub" / ".gitignore").write_text("*.tmp\n")  # the repository's own ignores *.log

    assert run.is_ignored("sub/a.tmp") and not run.is_ignored("sub/a.txt") and not run.is_ignored("a.tmp")
    assert run.is_ignored("a.log")
    assert not left.exists()
    assert [p.name.split(".")[0] for p in rules.iterdir()] == [str(os.getpid())]
    (worktree / "sub" / ".gitignore").write_text("*.txt\n")  # same size: read again, not kept
    assert run.is_ignored("sub/a.txt") and not run.is_ignored("sub/a.tmp")
    (worktree / "sub" / ".gitignore").unlink()
    os.mkfifo(worktree / "sub" / ".gitignore")  # not a plain file: absent, and never waited on
    assert not run.is_ignored("sub/a.txt")

    mirror = run._rules
    assert mirror is not None
    mirror.close()
    assert list(rules.iterdir()) == []
