"""``sandbox rewind``: the files back to just before a call as a forward event that can be taken back (issue #22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.agent.transcripts import current_session
from sandbox.models import EventKind
from sandbox.recovery import actions, rewind_undo
from sandbox.recovery.rewind import RewindError, call_after_checkpoint, rewind
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.agent.test_transcripts import SESSION, claude_lines
from tests.conftest import sandbox_cmd, tree_digest


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def three_calls(run: Run) -> list[str]:
    with run.tool_call("write_file", {"p": "a.txt"}) as c:
        c.write("a.txt", "one\n")
    with run.tool_call("Bash", {"command": "curl -X POST example.invalid"}) as c:
        c.write("b.txt", "two\n")
    with run.tool_call("edit", {"p": "a.txt"}) as c:
        c.write("a.txt", "three\n")
    return [e.call_id for e in run.entries()]


def test_rewind_puts_the_files_back_before_the_call_as_a_forward_event(repo: Path) -> None:
    run = start(repo)
    wt = Path(run.worktree)
    ids = three_calls(run)
    after_all = tree_digest(wt)
    events_before = len(run.events())
    report = rewind(run, ids[1], {})
    assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists()
    assert sorted(f.path for f in report.files.files) == ["a.txt", "b.txt"] if report.files else False
    kinds = [e.kind for _oid, e in run.events()[events_before:]]
    assert EventKind.rollback_files in kinds and kinds[-1] == EventKind.note  # forward: nothing erased
    assert [s.call_id for s in report.side_effects] == [ids[1]]  # the command may have acted outside
    assert report.session is None and any("no conversation" in m for m in report.messages)
    # Taken back: the checkpoint the report names brings every file back.
    assert report.undo_to is not None
    actions.rollback_files(run, report.undo_to)
    assert tree_digest(wt) == after_all


def test_rewind_to_a_checkpoint_is_before_the_first_call_after_it(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"p": "a.txt"}) as c:
        c.write("a.txt", "one\n")
    run.checkpoint("mid")
    with run.tool_call("write_file", {"p": "b.txt"}) as c:
        c.write("b.txt", "two\n")
    second = run.entries()[1].call_id
    assert call_after_checkpoint(run, "mid") == second
    rewind(run, second, {})
    assert not (Path(run.worktree) / "b.txt").exists() and (Path(run.worktree) / "a.txt").exists()


def test_rewind_refuses_an_unknown_call(repo: Path) -> None:
    run = start(repo)
    three_calls(run)
    with pytest.raises(RewindError):
        rewind(run, "call_nope", {})


def test_rewind_cli(repo: Path) -> None:
    run = start(repo)
    ids = three_calls(run)
    shown = sandbox_cmd("rewind", run.run_id, "--to", ids[2], cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert b"To take the rewind back: sandbox undo" in shown.stdout
    assert (Path(run.worktree) / "a.txt").read_text() == "one\n"
    as_json = sandbox_cmd("--json", "rewind", run.run_id, "--to", ids[0], cwd=repo)
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["call_id"] == ids[0]
    bad = sandbox_cmd("rewind", run.run_id, "--to", "nothing-like-it", cwd=repo)
    assert bad.returncode != 0 and b"Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    extra = sandbox_cmd("rewind", run.run_id, "--to", ids[0], "--", "--model", "x", cwd=repo)
    assert extra.returncode == 2 and b"need --continue" in extra.stderr


def test_undo_right_after_a_rewind_takes_it_back_and_redo_rewinds_again(repo: Path) -> None:
    run = start(repo)
    wt = Path(run.worktree)
    ids = three_calls(run)
    after_all = tree_digest(wt)
    (repo / "mine.txt").write_text("the user's own edit\n")  # the user's repository: never touched
    user_before = tree_digest(repo)
    rewind(run, ids[1], {})
    rewound = tree_digest(wt)
    assert rewound != after_all
    undone = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert undone.returncode == 0, undone.stderr
    assert b"Took back the rewind to before call" in undone.stdout
    assert tree_digest(wt) == after_all and (wt / "a.txt").read_text() == "three\n"
    assert [e.call_id for e in run.state().live_calls()] == ids  # the calls are the run's again
    redone = sandbox_cmd("--json", "redo", run.run_id, cwd=repo)
    assert redone.returncode == 0, redone.stderr
    data = json.loads(redone.stdout)
    assert data["op"] == "redo" and data["target"] == "sandbox" and sorted(data["applied"]) == ["a.txt", "b.txt"]
    assert tree_digest(wt) == rewound
    assert [e.call_id for e in run.state().live_calls()] == ids[:1]  # 'log' marks the others rolled back
    again = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert again.returncode == 0 and tree_digest(wt) == after_all
    assert tree_digest(repo) == user_before
    notes = [e.data for _oid, e in run.events() if e.kind == EventKind.note]
    keys = ("rewind", "rewind_undo", "rewind_redo")
    assert [k for d in notes for k in keys if k in d] == ["rewind", "rewind_undo", "rewind_redo", "rewind_undo"]


def test_once_the_run_moved_on_undo_is_no_longer_the_rewinds(repo: Path) -> None:
    run = start(repo)
    ids = three_calls(run)
    rewind(run, ids[2], {})
    assert rewind_undo.last_step(run) is not None
    with run.tool_call("write_file", {"p": "c.txt"}) as c:
        c.write("c.txt", "later\n")
    assert rewind_undo.last_step(run) is None and rewind_undo.undo_rewind(run) is None
    plain = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert plain.returncode != 0 and b"Took back the rewind" not in plain.stdout
    assert (Path(run.worktree) / "c.txt").read_text() == "later\n"


def test_undo_of_a_rewind_refuses_over_unrecorded_worktree_changes(repo: Path) -> None:
    run = start(repo)
    ids = three_calls(run)
    rewind(run, ids[2], {})
    (Path(run.worktree) / "a.txt").write_text("typed by hand\n")
    refused = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert refused.returncode == 1 and b"Traceback" not in refused.stderr
    assert b"Cannot undo the rewind" in refused.stderr
    assert (Path(run.worktree) / "a.txt").read_text() == "typed by hand\n"


def test_undo_of_a_rewind_puts_the_conversation_back_and_redo_the_fork(repo: Path, tmp_path: Path) -> None:
    """docs/recovery.md: undo right after a rewind gives back the run's files *and its conversation*."""
    run = start(repo)
    ids = []
    for n in range(3):
        tool = f"toolu_{n:06d}"
        with run.tool_call("Bash", {"command": "x"}, call_id=tool, agent_session=SESSION) as c:
            c.write("a.txt", f"{n}\n")
        ids.append(tool)
    home = tmp_path / "claude-home"
    own = home / "projects" / "anywhere" / f"{SESSION}.jsonl"
    own.parent.mkdir(parents=True)
    own.write_bytes(claude_lines(3))
    homes = {"claude-code": [str(home)]}
    report = rewind(run, ids[1], homes)
    fork = report.session
    assert fork is not None and fork != SESSION and report.from_session == SESSION
    assert current_session(run) == fork and own.read_bytes() == claude_lines(3)  # the agent's own file untouched
    assert report.transcript is not None and Path(report.transcript).is_file()
    undone = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert undone.returncode == 0, undone.stderr
    assert current_session(run) == SESSION and (Path(run.worktree) / "a.txt").read_text() == "2\n"
    redone = sandbox_cmd("redo", run.run_id, cwd=repo)
    assert redone.returncode == 0, redone.stderr
    assert current_session(run) == fork and (Path(run.worktree) / "a.txt").read_text() == "0\n"


def test_a_later_call_with_a_compensation_is_listed_with_it(repo: Path) -> None:
    run = start(repo)
    ids = three_calls(run)
    comp = {"argv": ["true"], "idempotency": "non_idempotent", "replay": "never"}
    with run.tool_call("create_issue", {"title": "t"}, side_effects=["issue"], compensation=comp) as c:
        issue = c.call_id
    report = rewind(run, ids[1], {})
    hints = {s.call_id: s.hint for s in report.side_effects}
    assert list(hints) == [ids[1], issue]  # the write_file/edit calls acted only on the files
    assert f"sandbox compensate {run.run_id} {issue}" in hints[issue]


def test_after_an_apply_undo_takes_the_apply_back_not_the_rewind(repo: Path) -> None:
    run = start(repo)
    wt = Path(run.worktree)
    ids = three_calls(run)
    rewind(run, ids[1], {})
    applied = sandbox_cmd("apply", run.run_id, cwd=repo)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "a.txt").read_text() == "one\n"
    undone = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert undone.returncode == 0, undone.stderr
    assert b"Took back the rewind" not in undone.stdout and not (repo / "a.txt").exists()
    assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists()  # the rewind stands
