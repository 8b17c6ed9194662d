"""Words for a person (issue 34 item 8): calls named as 'log' numbers them, a resume that needs nothing in one
line, 'status' without RUN over every run."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.merge import mergeback
from sandbox.run.run import Run
from sandbox.store.project import Project


def invoke(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def start(root: Path, label: str | None = None) -> Run:
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir, label=label) if label else Run.start(project, workdir)


def test_undo_and_redo_name_calls_by_number(repo: Path) -> None:
    run = start(repo)
    for i in range(3):
        with run.tool_call("edit") as call:
            call.write(f"f{i}.txt", f"{i}\n")
    with run.tool_call("look"):
        pass  # changed nothing
    mergeback.apply(run)
    code, out, err = invoke(repo, "undo", run.run_id)
    assert code == 0, err
    assert "Undid the apply of calls #1-#3 in your tree." in out
    assert run.entries()[0].call_id not in out  # ids only in --json
    code, out, err = invoke(repo, "redo", run.run_id, "--json")
    assert code == 0, err
    assert json.loads(out)["calls"][0] == run.entries()[0].call_id
    code, out, err = invoke(repo, "undo", run.run_id, "--call", "2")
    assert code == 0, err
    assert "Undid call #2 (edit) in your tree." in out


def test_resume_of_a_run_that_needs_nothing_says_so_in_one_line(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("a.txt", "a\n")
    code, out, err = invoke(repo, "resume", run.run_id)
    assert code == 0, err
    assert out.count("\n") == 1 and "needs nothing to resume" in out


def test_status_without_run_summarizes_every_run(repo: Path) -> None:
    one = start(repo, "first")
    with one.tool_call("edit") as call:
        call.write("a.txt", "a\n")
    two = start(repo, "second")
    with two.tool_call("edit") as call:
        call.write("b.txt", "b\n")
        call.write("c.txt", "c\n")
    mergeback.apply(two)
    code, out, err = invoke(repo, "status")
    assert code == 0, err
    assert out.startswith("2 runs in this repository")
    line_one = next(line for line in out.splitlines() if one.run_id in line)
    line_two = next(line for line in out.splitlines() if two.run_id in line)
    assert "(first)" in line_one and "1 path(s) changed" in line_one and "1 not applied" in line_one
    assert "(second)" in line_two and "2 path(s) changed" in line_two and "0 not applied" in line_two
    # Naming a run still shows that one in detail.
    code, out, _ = invoke(repo, "status", one.run_id)
    assert out.startswith(f"Run {one.run_id}")


def test_status_tells_a_call_still_running_from_one_resume_left_uncertain(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("a.txt", "a\n")
    run.start_call("bash", {"command": "make"})  # a crash left it started
    code, out, _ = invoke(repo, "status", run.run_id)
    assert "in flight: #2 (run 'sandbox resume' after a crash)" in out and "uncertain:" not in out
    assert invoke(repo, "resume", run.run_id)[0] == 0
    code, out, _ = invoke(repo, "status", run.run_id)
    assert "in flight:" not in out  # resume settled what it could: the call is no longer said to run
    assert f"uncertain: #2 (started, end never recorded: check, then 'sandbox call resolve {run.run_id} ID" in out
    code, out, _ = invoke(repo, "status", run.run_id, "--json")
    row = json.loads(out)
    assert row["uncertain_calls"] == row["in_flight"] == [run.entries()[1].call_id]
