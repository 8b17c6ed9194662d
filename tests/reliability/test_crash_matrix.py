"""The crash matrix: SIGKILL the real CLI at every named fault point, recover with normal commands.

For each (fault point, operation) the operation runs as a real ``sandbox`` process armed with
``SANDBOX_FAULT`` so it kills itself there with SIGKILL. Recovery then uses only what a user would
type (status, resume, ``apply --continue``, undo, gc), and the checks are what a user would check:
their files, index and refs, every acknowledged call and event, the interrupted call's status,
``git fsck``, and that the run still works.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import git, tree_digest

from .helpers import (
    MATRIX_ROWS,
    assert_acknowledged_kept,
    assert_fsck_clean,
    assert_run_usable,
    assert_user_untouched,
    capture_before,
    cli_entries,
    entries,
    has_command,
    live_run_ids,
    load_all_modules,
    ok,
    open_run,
    sandbox_things,
    sb,
    things_of,
)

POINTS = load_all_modules()


@dataclass(frozen=True)
class Case:
    """One cell of the matrix: a fault (``point`` or ``point@N``) hit during one operation."""

    fault: str
    op: str

    @property
    def point(self) -> str:
        return self.fault.partition("@")[0]

    @property
    def id(self) -> str:
        return f"{self.fault}-{self.op}"


#: Which operations reach each core point (``@N``: the N-th time the point is reached).
CORE_PLAN: dict[str, list[str]] = {
    "start.after_lock": ["start"],
    "start.snapshot.after_add": ["start"],
    "start.snapshot.after_commit": ["start"],
    "start.after_refs": ["start"],
    "worktree.add.after": ["start"],
    "start.after_worktree": ["start"],
    "start.after_ledger": ["start"],
    "call.start.before": ["call-start", "write"],
    "call.start.after": ["call-start", "exec"],
    "call.finish.before": ["call-finish", "write"],
    "call.finish.after_capture": ["call-finish", "exec"],
    "call.finish.after_commit": ["call-finish", "write", "exec"],
    "call.finish.after_ledger": ["call-finish", "exec"],
    "call.finish.after_head_ref": ["call-finish", "write"],
    "ledger.append.before": ["start", "call-start", "call-finish", "write@2"],
    "ledger.append.after": ["start", "call-start", "call-finish", "write@1", "write@2"],
    "drop.after_ledger_ref": ["drop"],
    "drop.after_worktree": ["drop"],
    "drop.after_refs": ["drop"],
    "worktree.remove.after_files": ["drop", "gc"],
    "gc.after_refs": ["gc"],
    "gc.after_worktree": ["gc"],
}

#: Points of the other areas, by prefix, until they are listed one by one.
PREFIX_PLAN: dict[str, list[str]] = {}


def plan_for(point: str) -> list[str]:
    """The operations (``op`` or ``op@N``) that exercise ``point``."""
    if point in CORE_PLAN:
        return CORE_PLAN[point]
    for prefix, ops in PREFIX_PLAN.items():
        if point.startswith(prefix):
            return ops
    return []


def all_cases() -> list[Case]:
    cases = []
    for point in sorted(POINTS):
        for op in plan_for(point):
            name, _, nth = op.partition("@")
            cases.append(Case(f"{point}@{nth}" if nth else point, name))
    return cases


CASES = all_cases()


def test_every_fault_point_is_in_the_matrix() -> None:
    """A new fault point cannot be forgotten: each one in faults.POINTS has a crash case."""
    missing = sorted(p for p in POINTS if not plan_for(p))
    assert not missing, f"fault points with no crash case (add them to CORE_PLAN or PREFIX_PLAN): {missing}"
    assert len(POINTS) >= 22
    stale = sorted(p for p in CORE_PLAN if p not in POINTS)
    assert not stale, f"CORE_PLAN names points that no longer exist: {stale}"


# -- set-up shared by the scenarios -------------------------------------------------------------


def run_with_history(root: Path, label: str = "matrix") -> str:
    """A run with acknowledged history: two finished calls with file changes and a failed one."""
    from sandbox.project import Project
    from sandbox.run import Run

    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir, label=label)
    with run.tool_call("write_file", {"path": "src/app.py"}, idempotency="idempotent", replay="auto") as call:
        call.write("src/app.py", "print('agent')\n")
        call.write("docs/new.md", "# new\n")
    with run.tool_call("shell", {"cmd": "chmod"}) as call:
        call.chmod("bin/tool.sh", False)
        call.delete("data/blob.bin")
    try:
        with run.tool_call("lint", {"x": 1}, idempotency="non_idempotent", replay="never") as call:
            raise RuntimeError("lint failed")
    except RuntimeError:
        pass
    return run.run_id


def recover_run(root: Path, run_id: str) -> tuple[str, dict[str, Any]]:
    """The normal recovery after a crash inside a call: resume when it exists, else status."""
    if has_command("resume"):
        return "resume", json.loads(ok("resume", run_id, "--json", cwd=root))
    return "status", json.loads(ok("status", run_id, "--json", cwd=root))


def assert_head_ref_matches_ledger(root: Path, run_id: str) -> None:
    """After a status/resume the head ref equals the ledger's head (repaired if a crash left it behind)."""
    head = open_run(root, run_id).state().head
    ref = git(root, "rev-parse", f"refs/sandbox/{run_id}/head").strip()
    assert ref == head, f"refs/sandbox/{run_id}/head is {ref}, the ledger says {head}"


def assert_interrupted_call(
    call_id: str | None, now: dict[str, dict[str, Any]], recovery: str, report: dict[str, Any]
) -> str:
    """The interrupted call is absent (never started), finished (finish was durable) or uncertain."""
    if call_id is None or call_id not in now:
        return "absent"
    status = str(now[call_id]["status"])
    if status in ("succeeded", "failed"):
        return status
    if recovery == "resume":
        assert status == "uncertain", f"{call_id} is {status} after resume, not uncertain"
        assert call_id in json.dumps(report.get("uncertain")), "resume does not list the uncertain call"
    else:
        assert status == "started", f"{call_id} is {status}"
        assert call_id in report["in_flight"], "an unfinished call must be findable in 'sandbox status'"
    return status


# -- scenarios: each sets up, crashes the operation, recovers and checks; returns the recovery ---


def scenario_start(root: Path, fault: str) -> str:
    live = run_with_history(root)
    before = capture_before(root, [live])
    proc = sb("start", "--json", cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    mid = sandbox_things(root)
    new_ids = (mid["runs"] | mid["worktrees"] | {r.split("/")[2] for r in mid["refs"]}) - {live}
    ok("gc", cwd=root)
    after = sandbox_things(root)
    for new_id in new_ids:
        if new_id in live_run_ids(root):
            # The crash came after the run became visible: it must be complete and usable.
            assert open_run(root, new_id).worktree_exists()
            assert_run_usable(root, new_id)
        else:
            assert not things_of(after, new_id), f"gc left pieces of the crashed start: {things_of(after, new_id)}"
    assert after["admin"] <= {a for a in after["admin"] if a in live_run_ids(root)}, "stale worktree admin dirs"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, live)
    run_with_history(root, "after-crash")  # the repository still takes new runs
    assert_user_untouched(root, before)
    assert_fsck_clean(root)
    return "gc"


def scenario_call(root: Path, fault: str, op: str) -> str:
    run_id = run_with_history(root)
    run = open_run(root, run_id)
    worktree = Path(run.worktree)
    call_id: str | None = "call_crash"
    if op == "call-finish":
        # An acknowledged start, then the tool changed files; the crash hits its finish.
        call_id = run.start_call("edit", {"file": "src/util.py"}, idempotency="conditional")
        (worktree / "src/util.py").write_text("X = 3  # agent\n")
        (worktree / "made-by-tool.txt").write_text("tool output\n")
    before = capture_before(root, [run_id])
    if op == "write":
        call_id = None
        proc = sb("write", run_id, "written/by/crash.txt", cwd=root, fault=fault, input=b"payload\n")
    elif op == "call-start":
        proc = sb(
            "call", "start", run_id, "--tool", "send_email", "--call-id", "call_crash",
            "--input", '{"to": "a@b.c"}', "--idempotency", "non_idempotent", "--replay", "never",
            cwd=root, fault=fault,
        )  # fmt: skip
    elif op == "call-finish":
        assert call_id is not None
        proc = sb(
            "call", "finish", run_id, call_id, "--status", "succeeded",
            "--path", "src/util.py", "--path", "made-by-tool.txt",
            cwd=root, fault=fault,
        )  # fmt: skip
    elif op == "exec":
        proc = sb(
            "exec", run_id, "--call-id", "call_crash", "--", "sh", "-c", "echo made > exec-made.txt",
            cwd=root, fault=fault,
        )  # fmt: skip
    else:
        raise AssertionError(op)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    recovery, report = recover_run(root, run_id)
    now = cli_entries(root, run_id)
    if call_id is None:
        new = set(now) - set(before.entries[run_id])
        assert len(new) <= 1
        call_id = next(iter(new), None)
    outcome = assert_interrupted_call(call_id, now, recovery, report)
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id, now)
    assert_head_ref_matches_ledger(root, run_id)
    if call_id is not None and outcome == "succeeded":
        # A durable finish carries its commit, and the commit holds the files the tool wrote.
        entry = entries(root, run_id)[call_id]
        files = {f["path"] for f in entry["files"]}
        expected = {"call-finish": {"src/util.py", "made-by-tool.txt"}, "exec": {"exec-made.txt"}}
        assert files == expected.get(op, {"written/by/crash.txt"}), files
        assert entry["commit"] == open_run(root, run_id).state().head
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return recovery


def scenario_drop(root: Path, fault: str) -> str:
    keep = run_with_history(root, "keep")
    victim = run_with_history(root, "victim")
    victim_wt = open_run(root, victim).worktree
    before = capture_before(root, [keep])
    proc = sb("drop", victim, "--force", cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    recovery = "gc"
    if victim in live_run_ids(root):
        ok("drop", victim, "--force", cwd=root)
        recovery = "drop --force, gc"
    ok("gc", cwd=root)
    after = sandbox_things(root)
    assert not things_of(after, victim), f"left behind after drop+gc: {things_of(after, victim)}"
    assert not os.path.lexists(victim_wt)
    assert victim_wt not in git(root, "worktree", "list", "--porcelain")
    assert not after["admin"] - {keep}, f"stale admin dirs: {after['admin']}"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, keep)
    assert_run_usable(root, keep)
    assert_fsck_clean(root)
    return recovery


def scenario_gc(root: Path, fault: str) -> str:
    keep = run_with_history(root, "keep")
    # Real leftovers: a drop killed after its ledger ref went, and a start killed after its worktree.
    victim = run_with_history(root, "victim")
    assert sb("drop", victim, "--force", cwd=root, fault="drop.after_ledger_ref").returncode == -9
    assert sb("start", cwd=root, fault="start.after_worktree").returncode == -9
    before = capture_before(root, [keep])
    garbage = (before.things["runs"] | before.things["worktrees"]) - {keep}
    assert garbage, "the set-up left no garbage to collect"
    proc = sb("gc", cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    assert keep in live_run_ids(root)
    ok("gc", cwd=root)
    after = sandbox_things(root)
    for run_id in garbage:
        assert not things_of(after, run_id), f"gc left {things_of(after, run_id)}"
    assert not after["admin"] - {keep}, f"stale admin dirs: {after['admin']}"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, keep)
    assert_run_usable(root, keep)
    assert_fsck_clean(root)
    return "gc"


SCENARIOS: dict[str, Callable[[Path, str], str]] = {
    "start": scenario_start,
    "write": lambda root, fault: scenario_call(root, fault, "write"),
    "call-start": lambda root, fault: scenario_call(root, fault, "call-start"),
    "call-finish": lambda root, fault: scenario_call(root, fault, "call-finish"),
    "exec": lambda root, fault: scenario_call(root, fault, "exec"),
    "drop": scenario_drop,
    "gc": scenario_gc,
}

#: Operations that need a command another area is still writing.
REQUIRES: dict[str, str] = {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_crash(case: Case, user_repo: Path) -> None:
    """Kill the operation at the fault point, recover with normal commands, check nothing was lost."""
    needed = REQUIRES.get(case.op)
    if needed and not has_command(needed):
        MATRIX_ROWS.append({"point": case.fault, "operation": case.op, "recovery": "-", "result": "skipped"})
        pytest.skip(f"'sandbox {needed}' does not exist yet")
    row = {"point": case.fault, "operation": case.op, "recovery": "?", "result": "FAIL"}
    MATRIX_ROWS.append(row)
    digest_before = tree_digest(user_repo)
    try:
        row["recovery"] = SCENARIOS[case.op](user_repo, case.fault)
    except BaseException as exc:
        row["result"] = "FAIL: " + (str(exc).splitlines() or [type(exc).__name__])[0][:70]
        raise
    assert tree_digest(user_repo) == digest_before or case.op in ("apply", "undo", "redo")
    row["result"] = "ok"
