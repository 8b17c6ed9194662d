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
from conftest import git, tree_digest, user_state, write

from .helpers import (
    Before,
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
    make_legacy,
    ok,
    open_run,
    sandbox_things,
    sb,
    things_of,
)
from .matrix import MATRIX_ROWS

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
    "worktree.create.after_init": ["start"],
    # The checkout of the user's HEAD and the snapshot's add both running, before click, pygit2 and
    # pydantic are imported (sandbox.run.prestart, begun by sandbox.cli.earlystart).
    "start.after_spawn": ["start"],
    "worktree.add.after": ["start"],
    # The snapshot's changed paths written over the checkout of HEAD, the run's branch not yet moved.
    "worktree.advance.after_files": ["start", "start-count@2"],
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
    # Inside an append (sandbox.store.durable): the objects and the ref's lock synced, the ref not moved;
    # the ref renamed into place, its directory not synced yet.
    "ledger.append.after_objects": ["call-start", "call-finish", "write@1", "write@2"],
    "ledger.append.after_ref_rename": ["call-finish", "call-start", "write@1", "write@2"],
    "drop.after_ledger_ref": ["drop"],
    "drop.after_worktree": ["drop"],
    "drop.after_refs": ["drop"],
    # A dropped run's objects moved into your store, then its store unlisted (sandbox.store.runstore).
    "runstore.retire.after_move": ["drop", "gc"],
    "runstore.retire.after_remove": ["drop", "gc"],
    "worktree.remove.after_files": ["drop", "gc"],
    "gc.after_refs": ["gc"],
    "gc.after_worktree": ["gc"],
    # Moving a run made before homes existed into a home (sandbox.runs.relocate, run by gc).
    "relocate.after_git_dir": ["gc-relocate"],
    "relocate.after_place": ["gc-relocate"],
    "relocate.after_move": ["gc-relocate"],
    # A call's objects are written as one pack (sandbox.store.packs): the pack written, then its index,
    # then both renamed into place; and the merge of FAN_IN packs, at its write and its removals.
    "pack.after_pack": ["call-finish", "write"],
    "pack.after_index": ["call-finish", "write"],
    "pack.after_rename": ["call-finish", "write"],
    "pack.merge.after_write": ["write-merge"],
    "pack.merge.after_remove": ["write-merge@1", "write-merge@8"],
}

#: Points of the other areas: apply/undo/redo (merge-back), checkpoints, resume and recovery.
#: ``apply`` recovers with ``apply --continue``, ``apply-undo`` with ``undo`` (rolls it back).
PREFIX_PLAN: dict[str, list[str]] = {
    "apply.after_lock": ["apply"],
    "apply.after_journal": ["apply", "apply-undo"],
    "apply.after_file": ["apply@1", "apply-undo@2", "apply@4"],
    "apply.before_ledger": ["apply", "apply-undo"],
    "apply.after_ledger": ["apply"],
    "apply.after_journal_remove": ["apply"],
    "undo.after_lock": ["undo-user", "undo-sandbox"],
    "undo.after_journal": ["undo-user", "undo-user-undo", "undo-sandbox"],
    "undo.after_file": ["undo-user@1", "undo-user-undo@2", "undo-sandbox@1"],
    "undo.before_ledger": ["undo-user", "undo-sandbox"],
    "undo.after_ledger": ["undo-user", "undo-sandbox"],
    "undo.after_journal_remove": ["undo-user", "undo-sandbox"],
    "redo.": ["redo"],
    "continue.after_file": ["continue@1"],
    "rollback.after_file": ["rollback@1"],
    # Inside one file write (sandbox.store.fsutil.replace_file): created, each chunk, fsync, rename, dir fsync.
    "tree.write.": ["apply@2", "apply-undo@1", "undo-user@1", "undo-sandbox@1", "redo@1", "continue@1", "rollback@1"],
    "checkpoint.save.": ["checkpoint"],
    "resume.": ["resume"],
    # Making the worktree of a run fetched from another clone (sandbox.runs.materialize).
    "materialize.": ["materialize"],
    # start --count N (sandbox.runs.many): one snapshot, N homes, N ledgers.
    "many.after_checkouts": ["start-count"],
    "many.after_ledger": ["start-count@2"],
    "recovery.rollback_files.": ["rollback-files"],
    "recovery.rollback_session.": ["rollback-session"],
    "recovery.compensate.": ["compensate"],
}


def plan_for(point: str) -> list[str]:
    """The operations (``op`` or ``op@N``) that exercise ``point``."""
    if point in CORE_PLAN:
        return CORE_PLAN[point]
    for prefix, ops in PREFIX_PLAN.items():
        if point == prefix or (prefix.endswith(".") and point.startswith(prefix)):
            return ops
    return []


def all_cases() -> list[Any]:
    """Every (fault, operation) cell. The first operation of each point runs in CI; the other
    operations of the same point run in the soak mode (``--soak``), to keep CI fast."""
    cases = []
    for point in sorted(POINTS):
        for i, op in enumerate(plan_for(point)):
            name, _, nth = op.partition("@")
            case = Case(f"{point}@{nth}" if nth else point, name)
            marks = [pytest.mark.soak] if i > 0 else []
            cases.append(pytest.param(case, id=case.id, marks=marks))
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
    from sandbox.run.run import Run
    from sandbox.store.project import Project

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


def scenario_start_count(root: Path, fault: str) -> str:
    """``start --count 3`` killed: gc leaves only whole runs (usable), nothing of the others."""
    live = run_with_history(root)
    before = capture_before(root, [live])
    proc = sb("start", "--count", "3", "--json", cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    mid = sandbox_things(root)
    new_ids = (mid["runs"] | mid["worktrees"] | {r.split("/")[2] for r in mid["refs"]}) - {live}
    assert len(new_ids) == 3, new_ids
    ok("gc", cwd=root)
    after = sandbox_things(root)
    whole = [i for i in new_ids if i in live_run_ids(root)]
    # Killed after the N-th ledger: exactly the first N runs exist; before any ledger: none.
    expected = int(fault.partition("@")[2] or 1) if fault.startswith("many.after_ledger") else 0
    assert len(whole) == expected, whole
    for new_id in new_ids:
        if new_id in whole:
            assert open_run(root, new_id).worktree_exists()
            assert_run_usable(root, new_id)
        else:
            assert not things_of(after, new_id), f"gc left pieces of the crashed start: {things_of(after, new_id)}"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, live)
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
    if op == "write-merge":
        # One pack short of a merge: the crashing write's pack starts it.
        from sandbox.store import packs

        objects_dir = str(root / ".git" / "sandbox" / "runs" / run_id / "objects")  # the run's own store
        while list(packs.registered(objects_dir).values()).count(0) < packs.FAN_IN - 1:
            with run.tool_call("write_file", {}) as call:
                call.write("filler.txt", f"{len(packs.registered(objects_dir))}\n")
    before = capture_before(root, [run_id])
    if op in ("write", "write-merge"):
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


def scenario_relocate(root: Path, fault: str) -> str:
    """gc moving a legacy run (linked worktree) into a home is killed; the next gc finishes the move."""
    run_id = run_with_history(root, "legacy")
    legacy = make_legacy(root, run_id)
    write(legacy, "agent-wip.txt", "the agent's unrecorded work\n")
    git(legacy, "commit", "-q", "--allow-empty", "-m", "agent commit on the old detached HEAD")
    agent_head = git(legacy, "rev-parse", "HEAD").strip()
    before = capture_before(root, [run_id])
    proc = sb("gc", cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    ok("gc", cwd=root)
    run = open_run(root, run_id)
    assert not run.place.legacy and run.worktree_exists(), run.place
    wt = Path(run.worktree)
    assert (wt / "agent-wip.txt").read_text() == "the agent's unrecorded work\n"
    assert git(wt, "rev-parse", "HEAD").strip() == agent_head
    assert not legacy.exists() and not (root / ".git" / "worktrees" / run_id).exists()
    assert git(root, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    # The agent's commit now lives in the run's own store: the user's gc cannot take it away.
    git(root, "gc", "-q", "--prune=now")
    assert git(wt, "cat-file", "-t", agent_head).strip() == "commit"
    return "gc"


def scenario_materialize(root: Path, fault: str) -> str:
    """A command making a fetched run's worktree is killed; the next command makes it, gc reclaims."""
    run_id = run_with_history(root, "travelled")
    before = capture_before(root, [run_id])
    clone = root.parent / f"{root.name}-clone"
    git(root.parent, "clone", "-q", str(root), str(clone))
    git(clone, "fetch", "-q", str(root), "refs/sandbox/*:refs/sandbox/*")
    proc = sb("path", run_id, cwd=clone, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"
    ok("gc", cwd=clone)
    wt = Path(ok("path", run_id, cwd=clone).strip())
    assert (wt / "src/app.py").read_text() == "print('agent')\n" and not (wt / "data/blob.bin").exists()
    assert not wt.is_relative_to(root)
    homes = {p.name for p in wt.parent.parent.iterdir()}
    assert homes == {run_id}, homes
    assert_run_usable(clone, run_id)
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    return "gc, path"


# -- merge-back: apply, undo, redo, and their recovery ------------------------------------------


def expected_after_apply(root: Path, run_id: str, before: dict[str, str]) -> dict[str, str]:
    """The user's tree digest once the run's whole patch (base..head) is applied onto ``before``."""
    import hashlib

    from sandbox.store import objects

    run = open_run(root, run_id)
    repo = run.repo
    old = objects.commit_tree(repo, run.base)
    new = objects.commit_tree(repo, run.state().head)
    out = dict(before)
    for change in objects.diff_trees(repo, old, new):
        out.pop(change.path, None)
        if change.new is None:
            continue
        data = objects.read_blob(repo, change.new.oid)
        if change.new.mode == objects.MODE_LINK:
            out[change.path] = "link:" + os.fsdecode(data)
        else:
            bits = "0o111" if change.new.mode == objects.MODE_EXEC else "0o0"
            out[change.path] = f"{bits}:" + hashlib.sha256(data).hexdigest()
    return out


def crash(root: Path, fault: str, *args: str) -> None:
    proc = sb(*args, cwd=root, fault=fault)
    assert proc.returncode == -9, f"not killed at {fault}: exit {proc.returncode} {proc.stderr.decode()}"


def assert_no_pending(root: Path) -> None:
    """No journal is left behind once recovery is done, and no temp file in the user's tree."""
    journals = list((root / ".git" / "sandbox").rglob("*journal*"))
    assert not [j for j in journals if j.is_file()], f"journal left behind: {journals}"
    assert not list(root.rglob(".sandbox-tmp-*")), "temp files left in the user's tree"
    staging = root / ".git" / "sandbox" / "staging"
    left = [p for p in staging.rglob("*") if not p.is_dir()] if staging.exists() else []
    assert not left, f"temporaries of a killed write left in the staging area: {left}"
    left = list((root / ".git" / "sandbox" / "journal").glob(".sandbox-tmp-*"))
    assert not left, f"temporaries of a killed journal write left: {left}"


def check_merge_recovery(
    root: Path, run_id: str, before: Before, states: dict[str, dict[str, str]], recovery: str
) -> None:
    """After recovery the user's tree is at one of the allowed whole states, never a mix."""
    now = tree_digest(root)
    names = [name for name, digest in states.items() if digest == now]
    assert names, "the user's tree is a mix of before and after: " + ", ".join(
        sorted(p for p in set(now) | set(before.digest) if now.get(p) != before.digest.get(p))
    )
    assert user_state(root) == before.user, "the user's index, HEAD or refs changed"
    assert_acknowledged_kept(root, before, run_id)
    assert_no_pending(root)
    assert_fsck_clean(root)


def scenario_apply(root: Path, fault: str, recover_with: str) -> str:
    run_id = run_with_history(root)
    before = capture_before(root, [run_id])
    after = expected_after_apply(root, run_id, before.digest)
    crash(root, fault, "apply", run_id, "--json")
    if recover_with == "undo":
        ok("undo", run_id, cwd=root)
        recovery = "undo"
        allowed = {"before": before.digest}
    else:
        ok("apply", run_id, "--continue", cwd=root)
        recovery = "apply --continue"
        allowed = {"before": before.digest, "after": after}
    check_merge_recovery(root, run_id, before, allowed, recovery)
    if tree_digest(root) == before.digest:
        ok("apply", run_id, cwd=root)  # the way out is open: the apply can be done again
        recovery += ", apply"
    assert tree_digest(root) == after, "the apply did not complete after recovery"
    assert not open_run(root, run_id).unapplied_calls()
    return recovery


def applied_run(root: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    """A run whose changes were applied to the user's tree (in-process, acknowledged).

    Returns the run, the user's digest once applied, and the digest expected once the apply is
    undone again (``sandbox undo`` takes back the user's last apply: the tree as it was).
    """
    from sandbox.merge import mergeback

    run_id = run_with_history(root)
    pristine = tree_digest(root)
    mergeback.apply(open_run(root, run_id))
    applied = tree_digest(root)
    return run_id, applied, pristine


def scenario_undo_user(root: Path, fault: str, recover_with: str) -> str:
    run_id, applied, undone = applied_run(root)
    before = capture_before(root, [run_id])
    crash(root, fault, "undo", run_id, "--json")
    if recover_with == "undo":
        ok("undo", run_id, cwd=root)  # rolls the interrupted undo back
        recovery = "undo"
    else:
        ok("apply", run_id, "--continue", cwd=root)
        recovery = "apply --continue"
    check_merge_recovery(root, run_id, before, {"applied": applied, "undone": undone}, recovery)
    if tree_digest(root) == applied:
        ok("undo", run_id, cwd=root)
        recovery += ", undo"
    assert tree_digest(root) == undone
    return recovery


def assert_worktree_matches_head(root: Path, run_id: str) -> None:
    """The run's worktree holds exactly the files of the run's head: no half-done operation."""
    from sandbox.store import objects

    run = open_run(root, run_id)
    head_tree = objects.commit_tree(run.repo, run.state().head)
    expected = {path: entry for path, entry in objects.walk_tree(run.repo, head_tree)}
    wt = Path(run.worktree)
    found = set(tree_digest(wt)) - {".git"}
    assert found == set(expected), f"worktree and head differ: {sorted(found ^ set(expected))}"
    root = os.open(wt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for path, entry in expected.items():
            actual = objects.hash_path(run.repo, root, path, os.lstat(wt / path), write=False)
            assert actual == entry, f"{path}: worktree {actual} != head {entry}"
    finally:
        os.close(root)


def scenario_undo_sandbox(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    head_before = open_run(root, run_id).state().head
    before = capture_before(root, [run_id])
    crash(root, fault, "undo", run_id, "--in-run", "--force", "--json")
    ok("apply", run_id, "--continue", cwd=root)
    recovery = "apply --continue"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_worktree_matches_head(root, run_id)
    assert_no_pending(root)
    if open_run(root, run_id).state().head == head_before:
        ok("undo", run_id, "--in-run", "--force", cwd=root)
        recovery += ", undo"
    run = open_run(root, run_id)
    assert run.state().head != head_before
    assert_worktree_matches_head(root, run_id)
    assert (Path(run.worktree) / "data/blob.bin").exists() and os.access(Path(run.worktree) / "bin/tool.sh", os.X_OK)
    assert_head_ref_matches_ledger(root, run_id)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return recovery


def scenario_redo(root: Path, fault: str) -> str:
    from sandbox.merge.undo import undo

    run_id, applied, _undone = applied_run(root)
    undo(open_run(root, run_id))
    before = capture_before(root, [run_id])
    crash(root, fault, "redo", run_id, "--json")
    ok("apply", run_id, "--continue", cwd=root)
    check_merge_recovery(root, run_id, before, {"undone": before.digest, "redone": applied}, "apply --continue")
    if tree_digest(root) == before.digest:
        ok("redo", run_id, cwd=root)
    assert tree_digest(root) == applied
    return "apply --continue"


def scenario_continue(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    before = capture_before(root, [run_id])
    after = expected_after_apply(root, run_id, before.digest)
    crash(root, "apply.after_file@1", "apply", run_id)
    crash(root, fault, "apply", run_id, "--continue")
    ok("apply", run_id, "--continue", cwd=root)
    check_merge_recovery(root, run_id, before, {"after": after}, "apply --continue")
    return "apply --continue (twice)"


def scenario_rollback(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    before = capture_before(root, [run_id])
    after = expected_after_apply(root, run_id, before.digest)
    crash(root, "apply.after_file@2", "apply", run_id)
    crash(root, fault, "undo", run_id)
    ok("undo", run_id, cwd=root)
    check_merge_recovery(root, run_id, before, {"before": before.digest}, "undo")
    ok("apply", run_id, cwd=root)
    assert tree_digest(root) == after
    return "undo (twice), apply"


# -- checkpoints, resume, rollback, compensation ------------------------------------------------


def checkpoint_names(root: Path, run_id: str) -> list[str]:
    from sandbox.run.checkpoint import CheckpointStore

    return [c.checkpoint.name for c in CheckpointStore(open_run(root, run_id)).list().checkpoints]


def scenario_checkpoint(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    open_run(root, run_id).checkpoint("first", step_id="step_1", run_state={"step": 1})
    before = capture_before(root, [run_id])
    crash(root, fault, "checkpoint", run_id, "--label", "second", "--step", "step_2")
    report = json.loads(ok("resume", run_id, "--json", cwd=root))
    names = checkpoint_names(root, run_id)
    assert "ckpt_001" in names, f"an acknowledged checkpoint was lost: {names}"
    assert set(names) <= {"ckpt_001", "ckpt_002"}
    assert report["checkpoint"]["name"] in names
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    ok("checkpoint", run_id, "--label", "third", cwd=root)
    assert checkpoint_names(root, run_id)[-1] not in ("ckpt_001",)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return "resume"


def scenario_resume(root: Path, fault: str) -> str:
    """Three calls in flight when the run died: two killed while they wrote (each booked its own file by the
    resume, one head move each: the ``resume.booking.*`` points fall between them) and one whose file nobody
    can attribute (kept as drift)."""
    from tests.recovery.test_resume import killed_in_flight

    run_id = run_with_history(root)
    open_run(root, run_id).checkpoint("first")
    killed = killed_in_flight(
        open_run(root, run_id),
        {"tool": "write_file", "through_call": {"a.txt": "first killed\n"}},
        {"tool": "write_file", "through_call": {"src/b.txt": "second killed\n"}},
    )
    run = open_run(root, run_id)
    call_id = run.start_call("send_email", {"to": "x"}, idempotency="non_idempotent", replay="never")
    (Path(run.worktree) / "half-written.txt").write_text("drift\n")
    before = capture_before(root, [run_id])
    crash(root, fault, "resume", run_id, "--json")
    report = json.loads(ok("resume", run_id, "--json", cwd=root))
    assert entries(root, run_id)[call_id]["status"] == "uncertain"
    assert call_id in json.dumps(report["uncertain"]) and call_id in json.dumps(report["do_not_replay"])
    found = [(d["path"], d["attributed_to"]) for d in report["drift"]]
    assert found == [("a.txt", killed[0]), ("half-written.txt", None), ("src/b.txt", killed[1])], found
    now = entries(root, run_id)
    for killed_id, path in zip(killed, ("a.txt", "src/b.txt"), strict=True):
        assert [f["path"] for f in now[killed_id]["files"]] == [path], f"{path} is not booked to {killed_id}"
    assert now[killed[1]]["commit"] == open_run(root, run_id).state().head
    again = json.loads(ok("resume", run_id, "--json", cwd=root))
    assert again["uncertain"] == report["uncertain"], "resuming twice gave different answers"
    assert again["drift"] == report["drift"] and again["drift_commit"] == report["drift_commit"]
    drift = [e for _oid, e in open_run(root, run_id).events() if e.kind.value == "drift"]
    # Nothing booked twice: one booking per killed call, and the rest once.
    assert [(e.call_id, len(e.files)) for e in drift] == [(killed[0], 1), (killed[1], 1), (None, 0)]
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_head_ref_matches_ledger(root, run_id)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return "resume (twice)"


def scenario_rollback_files(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    run = open_run(root, run_id)
    run.checkpoint("c1")
    at_c1 = tree_digest(Path(run.worktree))
    with run.tool_call("write_file", {}) as call:
        call.write("later.txt", "after the checkpoint\n")
    before = capture_before(root, [run_id])
    crash(root, fault, "rollback", run_id, "--files", "--to", "c1")
    ok("resume", run_id, "--json", cwd=root)
    ok("rollback", run_id, "--files", "--to", "c1", cwd=root)
    assert tree_digest(Path(open_run(root, run_id).worktree)) == at_c1
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_head_ref_matches_ledger(root, run_id)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return "resume, rollback --files"


def scenario_rollback_session(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    run = open_run(root, run_id)
    run.checkpoint("c1", run_state={"step": 1})
    with run.tool_call("write_file", {}) as call:
        call.write("later.txt", "after the checkpoint\n")
    before = capture_before(root, [run_id])
    crash(root, fault, "rollback", run_id, "--session", "--to", "c1")
    ok("resume", run_id, "--json", cwd=root)
    ok("rollback", run_id, "--session", "--to", "c1", cwd=root)
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_run_usable(root, run_id)
    assert_fsck_clean(root)
    return "resume, rollback --session"


def scenario_compensate(root: Path, fault: str) -> str:
    run_id = run_with_history(root)
    run = open_run(root, run_id)
    comp = {"argv": ["sh", "-c", "echo undone >> compensations.log"], "idempotency": "non_idempotent"}
    with run.tool_call("create_issue", {"title": "x"}, compensation=comp, side_effects=["issue"]) as call:
        pass
    before = capture_before(root, [run_id])
    crash(root, fault, "compensate", run_id, str(call.call_id))
    ok("compensate", run_id, str(call.call_id), cwd=root)
    log = Path(open_run(root, run_id).worktree) / "compensations.log"
    assert log.read_text() == "undone\n", "the compensation ran more or less than once"
    assert_user_untouched(root, before)
    assert_acknowledged_kept(root, before, run_id)
    assert_fsck_clean(root)
    return "compensate"


SCENARIOS: dict[str, Callable[[Path, str], str]] = {
    "start": scenario_start,
    "start-count": scenario_start_count,
    "write": lambda root, fault: scenario_call(root, fault, "write"),
    "write-merge": lambda root, fault: scenario_call(root, fault, "write-merge"),
    "call-start": lambda root, fault: scenario_call(root, fault, "call-start"),
    "call-finish": lambda root, fault: scenario_call(root, fault, "call-finish"),
    "exec": lambda root, fault: scenario_call(root, fault, "exec"),
    "drop": scenario_drop,
    "gc": scenario_gc,
    "gc-relocate": scenario_relocate,
    "apply": lambda root, fault: scenario_apply(root, fault, "continue"),
    "apply-undo": lambda root, fault: scenario_apply(root, fault, "undo"),
    "undo-user": lambda root, fault: scenario_undo_user(root, fault, "continue"),
    "undo-user-undo": lambda root, fault: scenario_undo_user(root, fault, "undo"),
    "undo-sandbox": scenario_undo_sandbox,
    "redo": scenario_redo,
    "continue": scenario_continue,
    "rollback": scenario_rollback,
    "checkpoint": scenario_checkpoint,
    "resume": scenario_resume,
    "materialize": scenario_materialize,
    "rollback-files": scenario_rollback_files,
    "rollback-session": scenario_rollback_session,
    "compensate": scenario_compensate,
}

#: Operations whose purpose is to change the user's files (the others must never touch them).
WRITES_USER_TREE = {"apply", "apply-undo", "undo-user", "undo-user-undo", "redo", "continue", "rollback"}

#: Operations that need a command another area is still writing.
REQUIRES: dict[str, str] = {
    "apply": "apply",
    "apply-undo": "undo",
    "undo-user": "undo",
    "undo-user-undo": "undo",
    "undo-sandbox": "undo",
    "redo": "redo",
    "continue": "apply",
    "rollback": "undo",
    "checkpoint": "checkpoint",
    "resume": "resume",
    "rollback-files": "rollback",
    "rollback-session": "rollback",
    "compensate": "compensate",
}


@pytest.mark.parametrize("case", CASES)
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
    if case.op not in WRITES_USER_TREE:
        assert tree_digest(user_repo) == digest_before, "an operation on the run changed the user's files"
    row["result"] = "ok"


@pytest.mark.soak
def test_crash_soak(tmp_path: Path) -> None:
    """Soak (--soak): every cell of the matrix, three rounds in a shuffled (seeded) order."""
    import random

    from .helpers import make_user_repo

    cells = [p.values[0] for p in CASES]
    rng = random.Random(20260101)
    for round_no in range(3):
        rng.shuffle(cells)
        for i, case in enumerate(cells):
            needed = REQUIRES.get(case.op)
            if needed and not has_command(needed):
                continue
            root = make_user_repo(tmp_path / f"r{round_no}-{i}")
            try:
                SCENARIOS[case.op](root, case.fault)
            except BaseException as exc:
                raise AssertionError(f"round {round_no}, {case.id}: {exc}") from exc
