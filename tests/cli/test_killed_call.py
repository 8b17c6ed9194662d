"""A killed call's changes (issue 34 item 5): found at resume, booked to that call, shown by status and diff,
and drop refuses to discard them as it refuses other unapplied work."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.recovery.test_resume import killed_write, reopen


def invoke(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_a_killed_calls_changes_are_booked_shown_and_kept_from_drop(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    call_id = killed_write(run)
    code, out, err = invoke(repo, "resume", run.run_id)
    assert code == 0, err
    assert "booked to it" in out and "needs nothing" not in out
    # Resumed again: the same answer (the booking is not made a second time).
    again = json.loads(invoke(repo, "resume", run.run_id, "--json")[1])
    assert [(d["path"], d["attributed_to"]) for d in again["drift"]] == [("half.txt", call_id)]
    code, out, _ = invoke(repo, "status", run.run_id, "--json")
    row = json.loads(out)
    assert row["changed_paths"] == 1 and row["unapplied_calls"] == 1
    code, out, _ = invoke(repo, "diff", run.run_id)
    assert "+half written" in out
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "A half.txt" in out
    # drop refuses, as for any unapplied work; apply takes it like any call's change.
    code, out, err = invoke(repo, "drop", run.run_id)
    assert code == 1 and "not applied to your tree" in err
    assert Path(reopen(run).worktree, "half.txt").exists()
    code, _, err = invoke(repo, "apply", run.run_id, "--call", call_id)
    assert code == 0, err
    assert (repo / "half.txt").read_text() == "half written\n"
