"""sandbox undo / redo: the user's last apply in their tree, one call with --call, the run with --in-run."""

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
from tests.merge.test_apply import agent_changes, invoke, start


def test_undo_after_apply_restores_the_users_tree(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    original, state = tree_digest(repo), user_state(repo)
    mergeback.apply(run)
    code, out, _ = invoke(runner, repo, "undo", run.run_id, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["target"] == "user" and report["applied"] == []
    assert sorted(report["restored"]) == ["README.md", "data.bin", "link", "src/app.py", "src/new.py", "src/util.py"]
    assert tree_digest(repo) == original and user_state(repo) == state
    code, _, err = invoke(runner, repo, "undo", run.run_id)
    assert code == 1 and "Nothing of run" in err and "--in-run" in err
    assert tree_digest(repo) == original
    events = [e.kind.value for _oid, e in run.events()]
    assert events.count("undo") == 1 and "apply_finished" in events  # forward events, nothing erased
    # The run kept every call: applying again brings them all back.
    assert run.unapplied_calls() and len(mergeback.apply(run).applied) == 6


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
    report = undo(run, in_run=True, force=True)
    assert report.target == "sandbox" and report.head == second.parent_commit == first.commit
    assert run.head() == first.commit
    assert str(run.repo.references[f"refs/sandbox/{run.run_id}/head"].target) == first.commit
    wt = Path(run.worktree)
    assert (wt / "a.txt").read_text() == "a\n" and (wt / "src/util.py").exists()
    assert undo(run, in_run=True, force=True).head == run.base and not (wt / "a.txt").exists()
    with pytest.raises(NothingToUndoError):
        undo(run, in_run=True, force=True)
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
        undo(run, in_run=True, force=True)
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
    assert code == 0 and "Redid the apply of call #1 in your tree" in out
    assert tree_digest(repo) == applied
    assert run.unapplied_calls() == []
    # The redo is an operation in the tree too: the next undo takes it back.
    assert undo(run).target == "user" and not (repo / "x.txt").exists()


def test_undo_of_an_apply_keeps_the_run_and_undo_call_takes_one(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("x.txt", "x\n")
    with run.tool_call("two") as call:
        call.write("y.txt", "y\n")
    head = run.head()
    mergeback.apply(run)
    report = undo(run, call="2")
    assert report.call == run.entries()[1].call_id and report.restored == ["y.txt"]
    assert (repo / "x.txt").exists() and not (repo / "y.txt").exists()
    assert run.head() == head and (Path(run.worktree) / "y.txt").exists()
    with pytest.raises(NothingToUndoError, match="not in your tree"):
        undo(run, call="2")
    # Applying the run again brings the call back: the run still holds it.
    assert mergeback.apply(run).applied == ["y.txt"]


def test_user_index_head_and_refs_untouched_by_apply_and_undo(repo: Path, runner: CliRunner) -> None:
    from tests.conftest import git

    git(repo, "add", "README.md")  # something staged
    run = start(repo)
    agent_changes(run)
    before = user_state(repo)
    assert invoke(runner, repo, "apply", run.run_id)[0] == 0
    assert user_state(repo) == before
    assert invoke(runner, repo, "undo", run.run_id)[0] == 0
    assert invoke(runner, repo, "redo", run.run_id)[0] == 0
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
    undo(run, in_run=True, force=True)
    again = Run.open(run.project, run.run_id)
    assert again.head() == run.base
    assert objects.lookup(run.repo, objects.commit_tree(run.repo, again.head()), "a.txt") is None


def test_undo_after_a_partial_apply_keeps_the_unapplied_calls(repo: Path, runner: CliRunner) -> None:
    """Issue 21 item 3: after 'apply --call 1', undo takes back that apply, never call 3 from the run."""
    run = start(repo)
    for name in ("a", "b", "c"):
        with run.tool_call(name) as call:
            call.write(f"{name}.txt", f"{name}\n")
    head, original = run.head(), tree_digest(repo)
    assert invoke(runner, repo, "apply", run.run_id, "--call", "1")[0] == 0
    code, out, _ = invoke(runner, repo, "undo", run.run_id)
    assert code == 0 and "in your tree" in out
    assert tree_digest(repo) == original and run.head() == head
    # Nothing else is in the tree: a plain undo refuses and names what would unblock it.
    code, _, err = invoke(runner, repo, "undo", run.run_id)
    assert code == 1 and "--in-run" in err and run.head() == head
    # Taking the agent's unapplied call out of the run needs --force, and says so.
    code, _, err = invoke(runner, repo, "undo", run.run_id, "--in-run")
    assert code == 1 and "--force" in err and run.head() == head
    code, out, _ = invoke(runner, repo, "undo", run.run_id, "--in-run", "--force")
    assert code == 0 and "in the run" in out and run.head() != head
    assert invoke(runner, repo, "redo", run.run_id)[0] == 0 and run.head() == head


def test_three_undos_after_an_apply_with_pathspec_stay_in_the_tree(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("a.txt", "a\n")
        call.write("tests/t.txt", "t\n")
    head, original = run.head(), tree_digest(repo)
    assert invoke(runner, repo, "apply", run.run_id, ":!tests")[0] == 0
    assert invoke(runner, repo, "apply", run.run_id, "tests")[0] == 0
    assert invoke(runner, repo, "undo", run.run_id)[0] == 0
    assert (repo / "a.txt").exists() and not (repo / "tests/t.txt").exists()
    assert invoke(runner, repo, "undo", run.run_id)[0] == 0
    assert tree_digest(repo) == original
    assert invoke(runner, repo, "undo", run.run_id)[0] == 1
    assert run.head() == head and tree_digest(repo) == original


def test_undo_of_a_three_way_apply_puts_the_users_own_edit_back(repo: Path) -> None:
    write(repo, "src/app.py", "".join(f"line {i}\n" for i in range(10)))
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/app.py", "line 0 agent\n" + "".join(f"line {i}\n" for i in range(1, 10)))
    mine = "".join(f"line {i}\n" for i in range(9)) + "line 9 mine\n"
    write(repo, "src/app.py", mine)
    report = mergeback.apply(run, three_way=True)
    assert report.merged == ["src/app.py"]
    assert undo(run).restored == ["src/app.py"]
    assert (repo / "src/app.py").read_text() == mine


def test_a_call_undone_in_your_tree_is_unapplied_work_again(repo: Path, runner: CliRunner) -> None:
    """drop refuses it without --force, status counts it: the run still holds the change."""
    run = start(repo)
    with run.tool_call("one") as call:
        call.write("x.txt", "x\n")
    mergeback.apply(run)
    assert run.unapplied_calls() == []
    undo(run, call="1")
    assert [e.call_id for e in run.unapplied_calls()] == [run.entries()[0].call_id]
    code, out, _ = invoke(runner, repo, "status", run.run_id, "--json")
    assert json.loads(out)["unapplied_calls"] == 1
    code, _, err = invoke(runner, repo, "drop", run.run_id)
    assert code == 1 and "--force" in err
