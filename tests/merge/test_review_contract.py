"""What you review is what lands (issue 21): diff, dry run and apply read one decision, after
rollbacks, type changes and undos, in this clone and in a second one."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.merge import mergeback
from sandbox.merge.undo import undo
from tests.conftest import tree_digest, write
from tests.merge.test_apply import invoke, start


def test_apply_after_rollback_files_writes_exactly_what_diff_shows(repo: Path, runner: CliRunner) -> None:
    """Item 1: the rolled-back call is out of diff and apply alike, and log marks it."""
    write(repo, "src/NEW.txt", "new\n")
    run = start(repo)
    with run.tool_call("first") as call:
        call.write("src/first.py", "first\n")
    assert invoke(runner, repo, "checkpoint", run.run_id, "--label", "before-risky")[0] == 0
    with run.tool_call("risky") as call:
        call.write("src/app.py", "print('app')\n+risky\n")
        call.delete("src/NEW.txt")
    assert invoke(runner, repo, "rollback", run.run_id, "--files", "--to", "before-risky")[0] == 0
    code, stat, _ = invoke(runner, repo, "diff", run.run_id, "--stat")
    assert code == 0 and "first.py" in stat and "app.py" not in stat and "NEW.txt" not in stat
    code, out, err = invoke(runner, repo, "apply", run.run_id, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == ["src/first.py"] and report["skipped"] == []
    assert (repo / "src/app.py").read_text() == "print('app')\n" and (repo / "src/NEW.txt").exists()
    code, log, _ = invoke(runner, repo, "log", run.run_id)
    assert code == 0 and "[rolled back]" in log
    assert [c for c in log.splitlines() if "[rolled back]" in c][0].split()[0] == "2"
    # Naming the rolled-back call refuses, and says why.
    code, _, err = invoke(runner, repo, "apply", run.run_id, "--call", "2")
    assert code == 1 and "rolled back" in err
    # The branch of the run holds what diff showed: not the rolled-back call.
    code, out, err = invoke(runner, repo, "branch", run.run_id, "kept")
    assert code == 0, err
    from tests.conftest import git

    assert git(repo, "show", "kept:src/app.py") == "print('app')\n"
    assert git(repo, "show", "kept:src/first.py") == "first\n"


def test_rollback_to_a_later_checkpoint_brings_the_calls_back(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    assert invoke(runner, repo, "checkpoint", run.run_id, "--label", "empty")[0] == 0
    with run.tool_call("one") as call:
        call.write("one.txt", "1\n")
    assert invoke(runner, repo, "checkpoint", run.run_id, "--label", "one")[0] == 0
    assert invoke(runner, repo, "rollback", run.run_id, "--files", "--to", "empty")[0] == 0
    assert "one.txt" not in invoke(runner, repo, "diff", run.run_id, "--stat")[1]
    assert invoke(runner, repo, "rollback", run.run_id, "--files", "--to", "one")[0] == 0
    assert "one.txt" in invoke(runner, repo, "diff", run.run_id, "--stat")[1]
    assert mergeback.apply(run).applied == ["one.txt"]


def test_a_file_turned_into_a_directory_and_back_applies_and_undoes(repo: Path, runner: CliRunner) -> None:
    """Item 2: file <-> directory, file <-> symlink, one step per path, checked against the base."""
    write(repo, "tofile", "a file\n")
    write(repo, "todir/inside.txt", "inside\n")
    write(repo, "tolink", "was a file\n")
    run = start(repo)
    with run.tool_call("types") as call:
        call.delete("tofile")
        call.write("tofile/in", "in\n")
        call.delete("todir")
        call.write("todir", "now a file\n")
        call.delete("tolink")
        call.symlink("tolink", "tofile/in")
    original = tree_digest(repo)
    code, out, err = invoke(runner, repo, "apply", run.run_id, "--dry-run", "--json")
    assert code == 0, err
    planned = json.loads(out)["would_apply"]
    code, out, err = invoke(runner, repo, "apply", run.run_id, "--json")
    assert code == 0, err
    assert sorted(json.loads(out)["applied"]) == sorted(planned)
    assert (repo / "tofile/in").read_text() == "in\n"
    assert (repo / "todir").read_text() == "now a file\n"
    assert os.readlink(repo / "tolink") == "tofile/in"
    assert tree_digest(repo) != original
    undo(run)
    assert tree_digest(repo) == original


def test_dry_run_json_says_would_apply_and_text_says_deleted(repo: Path, runner: CliRunner) -> None:
    """Item 5: a dry run lists what it would write under its own key; 'applied' is only what was written."""
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("a.txt", "a\n")
        call.delete("src/util.py")
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--dry-run", "--json")
    report = json.loads(out)
    assert code == 0 and report["applied"] == [] and report["would_apply"] == ["a.txt", "src/util.py"]
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--dry-run")
    assert code == 0 and "src/util.py  (deleted)" in out and "a.txt  (" not in out
    assert (repo / "src/util.py").exists()


def test_type_changes_made_by_a_command_apply(repo: Path, runner: CliRunner) -> None:
    """Item 2 as reported: 'rm tofile; mkdir tofile; echo in > tofile/in' (and back) through exec."""
    write(repo, "tofile", "a file\n")
    write(repo, "todir/inside.txt", "inside\n")
    run = start(repo)
    script = "rm tofile && mkdir tofile && echo in > tofile/in && rm -r todir && echo f > todir"
    code, out, err = invoke(runner, repo, "exec", run.run_id, "--isolate", "off", "--", "sh", "-c", script)
    assert code == 0, err
    original = tree_digest(repo)
    code, out, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 0, err + out
    assert (repo / "tofile/in").read_text() == "in\n" and (repo / "todir").read_text() == "f\n"
    code, out, err = invoke(runner, repo, "undo", run.run_id)
    assert code == 0, err
    assert tree_digest(repo) == original


def test_a_conflict_in_a_second_clone_says_whose_change_it_is(tmp_path: Path, runner: CliRunner) -> None:
    """Item 8: the run's base carries clone A's uncommitted edit; clone B never touched the file."""
    from tests.runs.test_travel import sb, two_clones

    a, b, _bare = two_clones(tmp_path)
    write(a, "src/app.py", "print('app')\nedit in A, not committed\n")
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo agent >> src/app.py")
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    result = runner.invoke(cli, ["-C", str(b), "apply", run_id, "--json"])
    assert result.exit_code == 1
    conflict = json.loads(result.stdout)["conflicts"][0]
    assert conflict["path"] == "src/app.py"
    assert "your file is as committed" in conflict["reason"] and "clone where the run started" in conflict["reason"]
    assert (b / "src/app.py").read_text() == "print('app')\n"


def test_three_way_markers_follow_conflict_style_and_status_lists_them(repo: Path, runner: CliRunner) -> None:
    """Item 7: diff3 shows the base section; status then names the file with markers."""
    from tests.conftest import git

    git(repo, "config", "merge.conflictStyle", "diff3")
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/app.py", "print('agent')\n")
    write(repo, "src/app.py", "print('user')\n")
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--3way", "--json")
    assert code == 1 and json.loads(out)["attention"] == ["src/app.py"]
    text = (repo / "src/app.py").read_text()
    assert "<<<<<<< yours" in text and "||||||| base\nprint('app')\n" in text and ">>>>>>> agent" in text
    code, out, _ = invoke(runner, repo, "status", run.run_id, "--json")
    assert code == 0 and json.loads(out)["conflict_markers"] == ["src/app.py"]
    code, out, _ = invoke(runner, repo, "status", run.run_id)
    assert "src/app.py" in out and "conflict markers" in out
    write(repo, "src/app.py", "print('resolved')\n")
    code, out, _ = invoke(runner, repo, "status", run.run_id, "--json")
    assert json.loads(out)["conflict_markers"] == []


def test_hunks_that_leave_out_a_deletion_in_the_way_write_nothing(repo: Path, runner: CliRunner) -> None:
    """Found by the review model: 'b' became 'b/x', and only the addition of 'b/x' was chosen."""
    from sandbox.merge import hunks, preview

    write(repo, "b", "b\n")
    run = start(repo)
    with run.tool_call("retype") as call:
        call.delete("b")
        call.write("b/x", "x\n")
    files = {f["path"]: f["id"] for f in preview.diff_files(run, preview.preview_range(run))}
    digest = tree_digest(repo)
    try:
        mergeback.apply(run, choice=hunks.Choice(ids={files["b/x"]}))
    except mergeback.ApplyConflict as exc:
        assert exc.report.conflicts[0].path == "b/x" and "'b' is a file" in exc.report.conflicts[0].reason
    else:
        raise AssertionError("the apply was not refused")
    assert tree_digest(repo) == digest
    assert mergeback.apply(run, choice=hunks.Choice(ids=set(files.values()))).applied == ["b", "b/x"]
