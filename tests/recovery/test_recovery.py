"""The three recovery actions: rollback --files, rollback --session, compensate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import SandboxError
from sandbox.models import CallStatus
from sandbox.recovery import actions as recovery
from sandbox.recovery.actions import NoCompensationError, RecoveryAction, RollbackRefusedError
from sandbox.recovery.resume import resume
from sandbox.run.checkpoint import CheckpointNotFoundError, CheckpointStore
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd, tree_digest


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    return Run.open(Project(run.project.common_dir), run.run_id)


def test_three_distinct_actions() -> None:
    assert [a.value for a in RecoveryAction] == ["rollback_files", "rollback_session", "compensate"]


def staged_run(repo: Path) -> tuple[Run, dict[str, str]]:
    run = start(repo)
    with run.tool_call("write_file", {"p": "keep.txt"}) as c:
        c.write("keep.txt", "kept\n")
    run.checkpoint("good state", step_id="s1", messages=["m1"], run_state={"n": 1})
    wt = Path(run.worktree)
    before = tree_digest(wt)
    with run.tool_call("edit", {"n": 2}, step_id="s2") as c:
        c.write("src/app.py", "print('changed')\n")
        c.delete("src/util.py")
        c.write("new/deep/file.txt", "new\n")
        c.symlink("link", "keep.txt")
    with run.tool_call("chmod", {"n": 3}, step_id="s3") as c:
        c.chmod("keep.txt", True)
    return run, before


def test_rollback_files_restores_the_worktree_and_moves_head_forward(repo: Path) -> None:
    run, before = staged_run(repo)
    old_head = run.head()
    calls = [e.call_id for e in run.entries()]
    report = recovery.rollback_files(run, "ckpt_001")
    assert tree_digest(Path(run.worktree)) == before
    assert report.undone_calls == calls[1:] and report.applied_calls == []
    run = reopen(run)
    head = run.head()
    assert head == report.commit and head != old_head
    commit = run.repo[head]
    assert [str(p) for p in commit.parent_ids] == [old_head]  # forward, nothing rewritten
    ckpt = CheckpointStore(run).find("ckpt_001").checkpoint
    assert objects.commit_tree(run.repo, head) == objects.commit_tree(run.repo, ckpt.file_snapshot.commit)
    assert [e.call_id for e in run.entries()] == calls  # the ledger's evidence is kept
    assert {f.path for f in report.files} == {"src/app.py", "src/util.py", "new/deep/file.txt", "link", "keep.txt"}
    assert resume(run).drift == []
    note = resume(reopen(run)).note
    assert "rolled back to ckpt_001" in note
    again = recovery.rollback_files(reopen(run), "good state")
    assert again.commit is None and "already" in again.message


def test_rollback_files_to_an_automatic_checkpoint(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("w", {"i": 1}) as c:
        c.write("one.txt", "1")
    with run.tool_call("w", {"i": 2}) as c:
        c.write("two.txt", "2")
    autos = [a for a in CheckpointStore(run).auto() if (a.checkpoint.label or "").startswith("call_succeeded")]
    recovery.rollback_files(run, autos[0].name)
    assert os.path.exists(os.path.join(run.worktree, "one.txt"))
    assert not os.path.exists(os.path.join(run.worktree, "two.txt"))


def test_rollback_files_refuses_over_unrecorded_changes(repo: Path) -> None:
    run, _before = staged_run(repo)
    Path(run.worktree, "src", "app.py").write_text("someone edited this\n")
    digest = tree_digest(Path(run.worktree))
    head = run.head()
    with pytest.raises(RollbackRefusedError, match="src/app.py"):
        recovery.rollback_files(run, "ckpt_001")
    assert tree_digest(Path(run.worktree)) == digest and reopen(run).head() == head


def test_rollback_files_names_changes_already_applied(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    run.checkpoint("before")
    with run.tool_call("write_file", {"p": "feature.txt"}) as c:
        c.write("feature.txt", "feature\n")
    applied = runner.invoke(cli, ["-C", str(repo), "apply", run.run_id])
    assert applied.exit_code == 0, applied.output + applied.stderr
    assert (repo / "feature.txt").read_text() == "feature\n"
    result = runner.invoke(cli, ["-C", str(repo), "rollback", run.run_id, "--files", "--to", "before"])
    assert result.exit_code == 0, result.stderr
    assert "already been applied to your tree" in result.output and f"sandbox undo {run.run_id}" in result.output
    assert (repo / "feature.txt").read_text() == "feature\n"  # the user's tree is not touched
    assert not Path(run.worktree, "feature.txt").exists()


def test_rollback_session_keeps_evidence_and_the_note_says_so(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    run.checkpoint("plan", step_id="s1", messages=["early"], run_state={"n": 1})
    with run.tool_call("write_file", {"p": "x"}, step_id="s2") as c:
        c.write("x.txt", "x\n")
        first = c.call_id
    run.checkpoint("later", step_id="s2", messages=["early", "later"], run_state={"n": 2})
    result = runner.invoke(cli, ["-C", str(repo), "rollback", run.run_id, "--session", "--to", "plan", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.output)
    assert data["action"] == "rollback_session" and data["checkpoint"] == "ckpt_001" and data["run_state"] == {"n": 1}
    assert data["calls_after"] == [first]
    report = resume(reopen(run))
    assert report.checkpoint is not None and report.checkpoint.name == "ckpt_001"
    assert report.messages == ["early"] and report.run_state == {"n": 1}
    assert report.session_rollback is not None
    assert "The session was rolled back to ckpt_001" in report.note
    assert f"write_file ({first}) succeeded and wrote x.txt" in report.note
    assert Path(run.worktree, "x.txt").exists()  # files are not the session
    assert reopen(run).entry(first).status == CallStatus.succeeded
    # a checkpoint saved after the rollback is the session again
    reopen(run).checkpoint("fresh", messages=["early", "retry"])
    assert resume(reopen(run)).messages == ["early", "retry"]


def test_compensate_runs_the_registered_compensation_as_its_own_call(repo: Path, tmp_path: Path) -> None:
    log = tmp_path / "issues.log"
    run = start(repo)
    comp = {"argv": ["sh", "-c", f"echo closed >> {log}"], "idempotency": "non_idempotent", "replay": "never"}
    with run.tool_call("create_issue", {"title": "t"}, side_effects=["issue"], compensation=comp) as c:
        cid = c.call_id
    assert cid is not None
    report = recovery.compensate(run, cid)
    assert report.returncode == 0 and log.read_text() == "closed\n"
    entry = reopen(run).entry(report.compensation_call)
    assert entry.tool_name == "compensate_create_issue" and entry.status == CallStatus.succeeded
    assert entry.idempotency.value == "non_idempotent"
    links = reopen(run).state().data.compensation
    assert links[-1].call_id == cid and links[-1].compensation_call == report.compensation_call
    with pytest.raises(SandboxError, match="already compensated"):
        recovery.compensate(reopen(run), cid)
    assert log.read_text() == "closed\n"


def test_compensate_without_one_says_it_cannot_be_undone(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("send_email", {"to": "x"}, side_effects=["email"], idempotency="non_idempotent") as c:
        cid = c.call_id
    assert cid is not None
    with pytest.raises(NoCompensationError, match="cannot be undone"):
        recovery.compensate(run, cid)
    result = runner.invoke(cli, ["-C", str(repo), "compensate", run.run_id, cid])
    assert result.exit_code == 1 and "cannot be undone" in result.stderr and "email" in result.stderr
    planned = run.plan_call("x", {})
    result = runner.invoke(cli, ["-C", str(repo), "compensate", run.run_id, planned])
    assert result.exit_code == 1 and "never ran" in result.stderr


def test_a_compensation_can_itself_end_uncertain(repo: Path, tmp_path: Path) -> None:
    log = tmp_path / "undo.log"
    run = start(repo)
    comp = json.dumps({"argv": ["sh", "-c", f"echo undone >> {log}"]})
    cid = sandbox_cmd("call", "start", run.run_id, "--tool", "create_issue", "--compensation", comp, cwd=repo)
    assert cid.returncode == 0, cid.stderr
    call_id = cid.stdout.decode().strip()
    assert sandbox_cmd("call", "finish", run.run_id, call_id, "--status", "succeeded", cwd=repo).returncode == 0
    proc = sandbox_cmd("compensate", run.run_id, call_id, cwd=repo, env={"SANDBOX_FAULT": "call.start.after"})
    assert proc.returncode == -9
    report = resume(reopen(run))
    comp_id = f"{call_id}-compensate-1"
    assert comp_id in report.ask_first
    with pytest.raises(SandboxError, match="uncertain"):
        recovery.compensate(reopen(run), call_id)
    reopen(run).resolve_call(comp_id, "failed", "it never ran")
    again = recovery.compensate(reopen(run), call_id)
    assert again.compensation_call == f"{call_id}-compensate-2" and log.read_text() == "undone\n"


def test_cli_rollback_usage_errors(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    run.checkpoint("c")
    base = ["-C", str(repo), "rollback", run.run_id]
    result = runner.invoke(cli, [*base, "--to", "c"])
    assert result.exit_code == 2 and "--files or --session" in result.stderr
    result = runner.invoke(cli, [*base, "--files", "--session", "--to", "c"])
    assert result.exit_code == 2
    result = runner.invoke(cli, [*base, "--files", "--to", "ckpt_999"])
    assert result.exit_code == 2 and "no checkpoint" in result.stderr
    auto = CheckpointStore(run).auto()[0].name
    result = runner.invoke(cli, [*base, "--session", "--to", auto])
    assert result.exit_code == 1 and "automatic" in result.stderr
    with pytest.raises(CheckpointNotFoundError):
        CheckpointStore(run).find("auto_000000000000")
