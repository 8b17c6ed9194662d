"""A killed call's changes (issue 34 item 5): found at resume, booked to that call, shown by status and diff,
and drop refuses to discard them as it refuses other unapplied work."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import Project
from sandbox.ui.pages import run_page
from tests.conftest import git
from tests.recovery.test_resume import killed_in_flight, killed_write, reopen


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


def test_each_killed_call_books_its_own_files_and_the_rest_stays_drift(repo: Path) -> None:
    """Two calls in flight together (as an agent runs tools in parallel), both killed with SIGKILL: what each
    wrote through its call is booked to it, one head move each in ledger order; what one of them wrote
    straight into the worktree (a shell command's file: nobody can tell whose) is kept as drift."""
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("edit") as call:
        call.write("first.txt", "first\n")
    edit = call.call_id or ""
    first, second = killed_in_flight(
        run,
        {"tool": "write_file", "through_call": {"a.txt": "from the first\n"}},
        {"tool": "shell", "through_call": {"src/b.txt": "from the second\n"}, "straight": {"c.txt": "whose?\n"}},
    )
    code, out, err = invoke(repo, "resume", run.run_id)
    assert code == 0, err
    # Each killed call named as 'log' numbers it; the file nobody can attribute, apart.
    assert "It had changed a.txt; those changes are booked to it in the run, as call #2 in 'sandbox log'." in out
    assert "It had changed src/b.txt; those changes are booked to it in the run, as call #3 in 'sandbox log'." in out
    assert "Files changed outside any recorded call: c.txt; they were kept" in out
    again = json.loads(invoke(repo, "resume", run.run_id, "--json")[1])
    assert [(d["path"], d["attributed_to"]) for d in again["drift"]] == [
        ("a.txt", first),
        ("c.txt", None),
        ("src/b.txt", second),
    ]
    state = reopen(run).state()
    assert [f.path for f in state.calls[first].files] == ["a.txt"]
    assert [f.path for f in state.calls[second].files] == ["src/b.txt"]
    assert state.calls[second].parent_commit == state.calls[first].commit  # chained, in ledger order
    assert state.head == state.calls[second].commit
    # The rest is saved on a commit on top of the head (kept, not booked): the head holds no c.txt.
    assert git(repo, "show", f"{again['drift_commit']}:c.txt") == "whose?\n"
    assert "c.txt" not in git(repo, "ls-tree", "-r", "--name-only", str(state.head)).split()
    drift = [e for _oid, e in reopen(run).events() if e.kind.value == "drift"]
    assert [(e.call_id, [f.path for f in e.files]) for e in drift] == [
        (first, ["a.txt"]),
        (second, ["src/b.txt"]),
        (None, []),
    ]  # resumed twice, booked once
    row = json.loads(invoke(repo, "status", run.run_id, "--json")[1])
    assert row["changed_paths"] == 3 and row["unapplied_calls"] == 3
    code, out, _ = invoke(repo, "diff", run.run_id)
    assert "+from the first" in out and "+from the second" in out and "whose?" not in out
    for path, call_id in (("a.txt", first), ("src/b.txt", second)):
        code, out, _ = invoke(repo, "log", run.run_id, "--", path)
        assert call_id in out and f"A {path}" in out
        assert (first if call_id == second else second) not in out
    # The page: each killed call's row lists its file and opens its diff.
    html = run_page(reopen(run))
    for call_id, path in ((first, "a.txt"), (second, "src/b.txt")):
        row = re.search(rf"<tr class='(\w+) uncertain' id='call-{call_id}'[^>]*data-diff='([^']*)'.*?</tr>", html, re.S)
        assert row is not None and row.group(1) == "call" and row.group(2), call_id
        assert f"<td class='files'><code>{path}</code></td>" in row.group(0)
    # Only the booked work is left unapplied: drop refuses for it alone, and apply takes each as its call's change.
    code, _, err = invoke(repo, "apply", run.run_id, "--call", edit)
    assert code == 0, err
    code, out, err = invoke(repo, "drop", run.run_id)
    assert code == 1 and "has 2 recorded change(s) not applied to your tree" in err
    assert Path(reopen(run).worktree, "a.txt").exists() and Path(reopen(run).worktree, "c.txt").exists()
    code, _, err = invoke(repo, "apply", run.run_id, "--call", second)
    assert code == 0, err
    assert (repo / "src/b.txt").read_text() == "from the second\n" and not (repo / "a.txt").exists()
