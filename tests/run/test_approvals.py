"""Approvals: plan, approve, deny; denials outlive a resume and are not asked again."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import SandboxError
from sandbox.models import Approval, CallStatus, EventKind
from sandbox.recovery.resume import resume
from sandbox.run import approvals
from sandbox.run.run import Run
from sandbox.store.project import Project


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def test_approved_call_continues_with_start(repo: Path) -> None:
    run = start(repo)
    cid = run.plan_call("deploy", {"env": "staging"}, idempotency="conditional")
    assert run.entry(cid).status == CallStatus.planned
    entry = run.approve(cid)
    assert entry.status == CallStatus.approved and entry.approval == Approval.approved
    assert approvals.is_approved(run, "deploy", {"env": "staging"}) is not None
    assert run.start_call("deploy", {"env": "staging"}, call_id=cid) == cid
    done = run.finish_call(cid, "succeeded")
    assert done.status == CallStatus.succeeded and done.approval == Approval.approved
    assert approvals.is_approved(run, "deploy", {"env": "staging"}) is None  # used up


def test_denied_call_never_starts_and_is_known_by_tool_and_input(repo: Path) -> None:
    run = start(repo)
    cid = run.plan_call("delete_all", {"path": "/"})
    run.deny(cid, "never on my machine")
    with pytest.raises(SandboxError, match="denied"):
        run.start_call("delete_all", {"path": "/"}, call_id=cid)
    denial = approvals.is_denied(run, "delete_all", {"path": "/"})
    assert denial is not None and denial.call_id == cid and denial.reason == "never on my machine"
    assert approvals.is_denied(run, "delete_all", {"path": "/tmp"}) is None
    assert approvals.is_denied(run, "other_tool", {"path": "/"}) is None


def test_denial_survives_resume_and_is_listed(repo: Path) -> None:
    run = start(repo)
    cid = run.plan_call("send_money", {"amount": 100})
    run.deny(cid, "too much")
    fresh = Run.open(Project(run.project.common_dir), run.run_id)
    report = resume(fresh)
    assert [d.call_id for d in report.denied] == [cid]
    assert "send_money" in report.note and "do not ask for it again" in report.note
    assert approvals.is_denied(fresh, "send_money", {"amount": 100}) is not None


def test_transitions_are_checked_and_repeats_are_noops(repo: Path) -> None:
    run = start(repo)
    cid = run.plan_call("tool", {"a": 1})
    run.approve(cid)
    count = run.state().count
    run.approve(cid)  # again: nothing appended
    assert run.state().count == count
    run.deny(cid, "changed my mind")  # an approval can be revoked before the call starts
    run.deny(cid)
    kinds = [e.kind for _oid, e in run.events()]
    assert kinds.count(EventKind.call_denied) == 1
    lifted = run.approve(cid)  # approving a denied call lifts the denial
    assert lifted.approval == Approval.approved and lifted.status == CallStatus.approved
    assert approvals.is_denied(run, "tool", {"a": 1}) is None
    started = run.start_call("other", {"b": 2})
    with pytest.raises(SandboxError, match="no longer be denied"):
        run.deny(started)
    with pytest.raises(SandboxError, match="only planned calls"):
        run.approve(started)


def test_cli_plan_approve_start_and_deny(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    base = ["-C", str(repo)]
    result = runner.invoke(cli, [*base, "call", "plan", run.run_id, "--tool", "deploy", "--input", '{"x": 1}'])
    assert result.exit_code == 0
    cid = result.output.strip()
    result = runner.invoke(cli, [*base, "approve", run.run_id, cid], catch_exceptions=False)
    assert result.exit_code == 0 and "approved" in result.output
    result = runner.invoke(cli, [*base, "call", "start", run.run_id, "--tool", "deploy", "--call-id", cid])
    assert result.exit_code == 0 and result.output.strip() == cid
    result = runner.invoke(cli, [*base, "call", "plan", run.run_id, "--tool", "rm", "--call-id", "c2"])
    result = runner.invoke(cli, [*base, "deny", run.run_id, "c2", "--reason", "no", "--json"], catch_exceptions=False)
    assert result.exit_code == 0 and '"approval": "denied"' in result.output
    result = runner.invoke(cli, [*base, "call", "start", run.run_id, "--tool", "rm", "--call-id", "c2"])
    assert result.exit_code == 1 and "denied" in result.stderr
    result = runner.invoke(cli, [*base, "approve", run.run_id, "nope"])
    assert result.exit_code == 2 and "no call 'nope'" in result.stderr
    result = runner.invoke(cli, [*base, "approve", run.run_id, "c2"])  # lifts the denial
    assert result.exit_code == 0 and "denial is lifted" in result.output
    result = runner.invoke(cli, [*base, "approve", run.run_id, cid])  # already started: refused
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
