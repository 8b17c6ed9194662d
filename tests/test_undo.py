"""sandbox undo / redo: in the user's tree after an apply, in the run otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.merge import mergeback
from sandbox.merge.undo import NothingToRedoError, NothingToUndoError, UndoConflict, redo, undo
from sandbox.run.run import Run
from sandbox.store import objects
from tests.conftest import tree_digest, user_state, write
from tests.test_apply import agent_changes, invoke, start


def test_undo_after_apply_restores_the_users_tree(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    original, state = tree_digest(repo), user_state(repo)
    mergeback.apply(run)
    code, out, _ = invoke(runner, repo, "undo", run.run_id, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["target"] == "user" and report["restored"] == ["README.md"] and report["applied"] == []
    assert (repo / "README.md").read_text() == "hello\nuser edit\nagent line\n"
    code, out, _ = invoke(runner, repo, "undo", run.run_id)
    assert code == 0 and "Undid call" in out
    assert tree_digest(repo) == original and user_state(repo) == state
    code, _, err = invoke(runner, repo, "undo", run.run_id)
    assert code == 1 and "no recorded change left" in err
    events = [e.kind.value for _oid, e in run.events()]
    assert events.count("undo") == 2 and "apply_finished" in events  # forward events, nothing erased


def test_undo_refuses_over_a_user_edit(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/app.py", "agent\n")
        call.write("src/new.py", "new\n")
    mergeback.apply(run)
    write(repo, "src/new.py", "user changed it\n")
    digest = tree_digest(repo)
    code, out, err = invoke(runner, repo, "undo", run.run_id, "--json")
    assert code == 1 and "nothing was written" in err
    assert json.loads(out)["conflicts"][0]["path"] == "src/new.py"
    assert tree_digest(repo) == digest


def test_undo_in_the_sandbox_moves_the_head_back_and_redo_returns(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("a.txt", "a\n")
    with run.tool_call("two") as call:
        call.write("a.txt", "a2\n")
        call.delete("src/util.py")
    first, second = run.entries()
    user_before = tree_digest(repo)
    report = undo(run)
    assert report.target == "sandbox" and report.head == second.parent_commit == first.commit
    assert run.head() == first.commit
    assert str(run.repo.references[f"refs/sandbox/{run.run_id}/head"].target) == first.commit
    wt = Path(run.worktree)
    assert (wt / "a.txt").read_text() == "a\n" and (wt / "src/util.py").exists()
    assert undo(run).head == run.base and not (wt / "a.txt").exists()
    with pytest.raises(NothingToUndoError):
        undo(run)
    assert redo(run).call == first.call_id and (wt / "a.txt").read_text() == "a\n"
    assert redo(run).call == second.call_id and run.head() == second.commit
    assert (wt / "a.txt").read_text() == "a2\n" and not (wt / "src/util.py").exists()
    with pytest.raises(NothingToRedoError):
        redo(run)
    assert tree_digest(repo) == user_before
    assert second.commit in run.repo  # still reachable: the undo event keeps it as a parent


def test_sandbox_undo_refuses_unrecorded_worktree_changes(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("a.txt", "a\n")
    (Path(run.worktree) / "a.txt").write_text("changed outside any call\n")
    head = run.head()
    with pytest.raises(UndoConflict) as info:
        undo(run)
    assert "no call recorded" in info.value.report.conflicts[0].reason
    assert run.head() == head


def test_undo_redo_in_the_user_tree_and_cli_redo(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("x.txt", "x\n")
        call.symlink("l", "x.txt")
    mergeback.apply(run)
    applied = tree_digest(repo)
    assert undo(run).target == "user" and not (repo / "x.txt").exists() and not (repo / "l").is_symlink()
    code, out, _ = invoke(runner, repo, "redo", run.run_id)
    assert code == 0 and "Redid call" in out
    assert tree_digest(repo) == applied
    assert run.unapplied_calls() == []


def test_undo_of_a_user_applied_call_keeps_the_sandbox_head(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("x.txt", "x\n")
    head = run.head()
    mergeback.apply(run)
    undo(run)
    assert run.head() == head and (Path(run.worktree) / "x.txt").exists()
    assert run.entries()[0].undone
    # An undone call is no longer part of "the whole run".
    with pytest.raises(mergeback.NothingToApplyError):
        mergeback.apply(run)


def test_user_index_head_and_refs_untouched_by_apply_and_undo(repo: Path, runner: CliRunner) -> None:
    from tests.conftest import git

    git(repo, "add", "README.md")  # something staged
    run = start(repo)
    agent_changes(run)
    before = user_state(repo)
    assert invoke(runner, repo, "apply", run.run_id)[0] == 0
    assert user_state(repo) == before
    assert invoke(runner, repo, "undo", run.run_id)[0] == 0
    assert invoke(runner, repo, "undo", run.run_id)[0] == 0
    assert user_state(repo) == before


def test_cli_undo_unknown_run(repo: Path, runner: CliRunner) -> None:
    start(repo)
    result = runner.invoke(cli, ["-C", str(repo), "undo", "nosuch"], catch_exceptions=False)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1


def test_head_after_sandbox_undo_survives_reopen(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("a.txt", "a\n")
    undo(run)
    again = Run.open(run.project, run.run_id)
    assert again.head() == run.base
    assert objects.lookup(run.repo, objects.commit_tree(run.repo, again.head()), "a.txt") is None
