"""Resume: fencing, uncertain calls, verification, drift, the note, and stability."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import CorruptionError, StaleWriterError
from sandbox.models import CallStatus, EventKind
from sandbox.recovery.resume import resume
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import git, loose_path, replace_stored_object, sandbox_cmd

KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from sandbox.store.project import Project
    from sandbox.run.run import Run
    project = Project(sys.argv[1])
    run = Run.open(project, sys.argv[2])
    call = run.tool_call("write_file", {"path": "half.txt"}, step_id="s9", idempotency="idempotent", replay="auto")
    call.__enter__()
    call.write("half.txt", "half written\\n")
    print(call.call_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


#: A process that starts a call, writes (through the call: hinted; or straight into the worktree, as a
#: shell command would: nobody can tell whose), says its call id, then waits to be killed.
WRITER_IN_FLIGHT = textwrap.dedent(
    """
    import json, os, sys
    from sandbox.store.project import Project
    from sandbox.run.run import Run
    spec = json.loads(sys.argv[3])
    run = Run.open(Project(sys.argv[1]), sys.argv[2])
    call = run.tool_call(spec["tool"], {"paths": sorted(spec["through_call"])}, idempotency="idempotent")
    call.__enter__()
    print(call.call_id, flush=True)
    if spec.get("later"):
        sys.stdin.readline()  # writes once the calls started after it wrote
    for path in spec.get("delete", []):
        call.delete(path)
    for path, text in spec["through_call"].items():
        call.write(path, text)
    for path, text in spec.get("straight", {}).items():
        full = os.path.join(run.worktree, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as fh:
            fh.write(text)
    print("written", flush=True)
    sys.stdin.read()
    """
)


def _said(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    assert line, proc.stderr.read().decode() if proc.stderr else ""
    return line


def killed_in_flight(run: Run, *specs: dict[str, object]) -> list[str]:
    """Calls in flight together, one real process each (started one after the other, so the ledger's order
    is the specs' order; a spec with ``later`` writes after the others did), then all killed with SIGKILL;
    their call ids."""
    procs: list[subprocess.Popen[bytes]] = []
    ids: list[str] = []
    try:
        for spec in specs:
            proc = subprocess.Popen(
                [sys.executable, "-c", WRITER_IN_FLIGHT, run.project.common_dir, run.run_id, json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            procs.append(proc)
            ids.append(_said(proc))
            if not spec.get("later"):
                assert _said(proc) == "written"
        for proc, spec in zip(procs, specs, strict=True):
            if spec.get("later"):
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
                assert _said(proc) == "written"
    finally:
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.communicate()
    assert [p.returncode for p in procs] == [-9] * len(procs)
    return ids


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    return Run.open(Project(run.project.common_dir), run.run_id)


def killed_write(run: Run) -> str:
    """A real process that starts a write_file call, writes, and dies before finishing it."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, run.project.common_dir, run.run_id], capture_output=True, check=False
    )
    assert proc.returncode == -9, proc.stderr
    return proc.stdout.decode().strip()


def busy_run(repo: Path) -> tuple[Run, dict[str, str]]:
    """A run with a checkpoint, calls that succeeded, failed, were denied, and three unfinished."""
    run = start(repo)
    ids: dict[str, str] = {}
    with run.tool_call("write_file", {"path": "src/a.txt"}, step_id="step_1", idempotency="idempotent") as c:
        c.write("src/a.txt", "a\n")
    run.checkpoint("after step_1", step_id="step_1", messages=[{"role": "user", "content": "go"}], run_state={"n": 1})
    with run.tool_call("write_file", {"path": "src/runtime.ts"}, step_id="step_2", idempotency="idempotent") as c:
        c.write("src/runtime.ts", "export {}\n")
        ids["write"] = c.call_id or ""
    with run.tool_call("run_command", {"argv": ["npm", "test"]}, step_id="step_2") as c:
        c.failed_with = "3 tests failed\nstack..."
        ids["test"] = c.call_id or ""
    ids["denied"] = run.plan_call("delete_branch", {"name": "main"}, step_id="step_2")
    run.deny(ids["denied"], "keep main")
    ids["email"] = run.start_call(
        "send_email", {"to": "x"}, step_id="step_3", idempotency="non_idempotent", replay="never"
    )
    ids["fetch"] = run.start_call("fetch_url", {"u": 1}, step_id="step_3", idempotency="idempotent", replay="auto")
    ids["edit"] = run.start_call("edit_issue", {"n": 2}, step_id="step_3", idempotency="conditional", replay="ask")
    return run, ids


def test_resume_marks_unfinished_calls_uncertain_and_classifies_them(repo: Path) -> None:
    run, ids = busy_run(repo)
    epoch = run.state().epoch
    report = resume(reopen(run))
    state = reopen(run).state()
    assert report.epoch == state.epoch == epoch + 1
    for key in ("email", "fetch", "edit"):
        assert state.calls[ids[key]].status == CallStatus.uncertain
    kinds = [e.kind for _oid, e in run.events()]
    assert kinds.index(EventKind.resumed) < kinds.index(EventKind.call_uncertain)  # fenced first
    assert report.do_not_replay == [ids["email"]]
    assert report.may_replay == [ids["fetch"]]
    assert report.ask_first == [ids["edit"]]
    assert [d.call_id for d in report.denied] == [ids["denied"]]
    assert report.checkpoint is not None and report.checkpoint.name == "ckpt_001"
    assert report.messages == [{"role": "user", "content": "go"}] and report.run_state == {"n": 1}
    assert report.last_completed_step == "step_2"
    assert ids["email"] in report.next_step and "without running it again" in report.next_step


def test_note_is_concrete(repo: Path) -> None:
    run, ids = busy_run(repo)
    note = resume(reopen(run)).note
    assert note.startswith("Resumed from checkpoint ckpt_001 (after step_1).")
    assert "Step step_2 completed." in note
    assert f"write_file ({ids['write']}) succeeded and wrote src/runtime.ts." in note
    assert f"run_command ({ids['test']}) ran `npm test` and failed: 3 tests failed." in note
    assert f"send_email ({ids['email']}) is uncertain" in note and "do not repeat it without checking" in note
    assert f"fetch_url ({ids['fetch']}) is uncertain" in note and "may be replayed" in note
    assert f"edit_issue ({ids['edit']}) is uncertain" in note and "ask the user" in note
    assert f"The user denied delete_branch ({ids['denied']}) (keep main)" in note
    assert f"Do not repeat write_file ({ids['write']})." in note
    assert note.endswith("Plan the next step from these observations.")
    assert "src/a.txt" not in note  # before the checkpoint: the model already knows


def test_resuming_twice_gives_the_same_answer(repo: Path, runner: CliRunner) -> None:
    run, _ids = busy_run(repo)
    killed_write(run)
    first = runner.invoke(cli, ["-C", str(repo), "resume", run.run_id, "--json"], catch_exceptions=False)
    second = runner.invoke(cli, ["-C", str(repo), "resume", run.run_id, "--json"], catch_exceptions=False)
    assert first.exit_code == second.exit_code == 0
    a, b = json.loads(first.output), json.loads(second.output)
    assert b.pop("epoch") == a.pop("epoch") + 1
    assert a == b
    for field in (
        "checkpoint",
        "last_completed_step",
        "uncertain",
        "do_not_replay",
        "may_replay",
        "ask_first",
        "denied",
        "drift",
        "note",
        "next_step",
        "messages_ref",
        "run_state",
    ):
        assert field in a
    assert "messages" not in a
    drift_events = [e for _oid, e in reopen(run).events() if e.kind == EventKind.drift]
    assert len(drift_events) == 1  # the same drift is recorded once


def test_drift_is_reported_attributed_and_kept(repo: Path) -> None:
    run = start(repo)
    call_id = killed_write(run)
    report = resume(reopen(run))
    assert [(d.path, d.attributed_to) for d in report.drift] == [("half.txt", call_id)]
    assert Path(run.worktree, "half.txt").read_text() == "half written\n"  # never discarded
    assert report.drift_commit is not None
    assert git(repo, "show", f"{report.drift_commit}:half.txt") == "half written\n"
    # Issue 34: what the killed call wrote is booked to it (its change, the run's head), never dropped unseen.
    assert reopen(run).head() == report.drift_commit
    entry = reopen(run).state().calls[call_id]
    assert entry.commit == report.drift_commit and [f.path for f in entry.files] == ["half.txt"]
    assert f"write_file ({call_id}) is uncertain" in report.note and "It had changed half.txt" in report.note
    assert report.may_replay == [call_id]
    # a replay records the file, and the drift is gone
    run = reopen(run)
    with run.tool_call("write_file", {"path": "half.txt"}, idempotency="idempotent", replay="auto") as c:
        c.write("half.txt", "half written\n")
    assert resume(reopen(run)).drift == []


def test_drift_without_a_call_in_flight(repo: Path) -> None:
    run = start(repo)
    Path(run.worktree, "src", "app.py").write_text("edited behind our back\n")
    report = resume(run)
    assert [(d.path, d.attributed_to) for d in report.drift] == [("src/app.py", None)]
    assert "Files changed outside any recorded call: src/app.py" in report.note
    assert "Review the files changed outside any recorded call" in report.next_step


def test_missing_worktree_is_recreated_at_the_head(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"p": "new.txt"}) as c:
        c.write("new.txt", "kept\n")
    git(Path(run.worktree), "branch", "agent-branch")  # the agent's own git history, in the run's git dir
    shutil.rmtree(run.worktree)  # the run's git dir stays behind
    report = resume(reopen(run))
    assert report.worktree_recreated and any("recreated" in p for p in report.problems)
    assert Path(run.worktree, "new.txt").read_text() == "kept\n"
    assert Path(run.worktree, "src", "app.py").exists()
    assert reopen(run).worktree_exists()
    assert run.worktree not in git(repo, "worktree", "list", "--porcelain")
    assert git(Path(run.worktree), "symbolic-ref", "HEAD").strip() == f"refs/heads/sandbox/{run.run_id}"
    # The old git dir (the agent's branch) was moved aside in the run's home, not deleted.
    home = Path(str(run.place.home))
    (aside,) = [p for p in home.iterdir() if p.name.startswith("orphaned-git-")]
    assert "agent-branch" in git(home, "--git-dir", str(aside), "branch")
    with reopen(run).tool_call("write_file", {"p": 2}) as c:
        c.write("more.txt", "more\n")
    assert resume(reopen(run)).drift == []


def test_garbled_checkpoint_falls_back_and_is_reported(repo: Path) -> None:
    run = start(repo)
    run.checkpoint("one", messages=["first history"], run_state={"n": 1})
    two = run.checkpoint("two", messages=["second history"], run_state={"n": 2})
    assert two.messages_ref is not None
    path = loose_path(repo, two.messages_ref)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    path.write_bytes(path.read_bytes()[:5])
    report = resume(reopen(run))
    assert report.checkpoint is not None and report.checkpoint.name == "ckpt_001"
    assert report.messages == ["first history"] and report.run_state == {"n": 1}
    assert any("ckpt_002" in p and "damaged" in p for p in report.problems)


def test_missing_checkpoint_ref_is_rebuilt(repo: Path) -> None:
    run = start(repo)
    run.checkpoint("one", messages=["m"])
    git(repo, "update-ref", "-d", f"refs/sandbox/{run.run_id}/checkpoints")
    report = resume(reopen(run))
    assert report.checkpoint is not None and report.checkpoint.name == "ckpt_001"
    assert any("rebuilt" in p for p in report.problems)
    assert git(repo, "rev-parse", "--verify", "-q", f"refs/sandbox/{run.run_id}/checkpoints").strip()


def test_stale_writer_is_fenced(repo: Path) -> None:
    run = start(repo)
    cid = run.start_call("write_file", {"p": 1})
    Path(run.worktree, "late.txt").write_text("late\n")
    report = resume(reopen(run))
    with pytest.raises(StaleWriterError):
        run.finish_call(cid, "succeeded", paths=["late.txt"])
    # The head is where resume left it (what the call wrote, booked to it), not the stale writer's commit.
    assert report.drift_commit is not None and reopen(run).head() == report.drift_commit


def test_cli_resume_and_resolve(repo: Path, runner: CliRunner) -> None:
    run, ids = busy_run(repo)
    result = runner.invoke(cli, ["-C", str(repo), "resume", run.run_id], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output.startswith("Resumed from checkpoint ckpt_001") and "Next step: Check whether" in result.output
    base = ["-C", str(repo), "call", "resolve", run.run_id]
    result = runner.invoke(cli, [*base, ids["email"], "--status", "succeeded", "--reason", "found it in the outbox"])
    assert result.exit_code == 0 and "resolved as succeeded" in result.output
    result = runner.invoke(cli, [*base, ids["write"], "--status", "failed"])
    assert result.exit_code == 1 and "not uncertain" in result.stderr
    result = runner.invoke(cli, [*base, ids["fetch"], "--status", "bogus"])
    assert result.exit_code == 2
    report = resume(reopen(run))
    assert ids["email"] not in report.do_not_replay and report.do_not_replay == []
    assert reopen(run).entry(ids["email"]).status == CallStatus.succeeded


def test_resume_refuses_on_a_damaged_ledger_event(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"p": 1}) as c:
        c.write("x.txt", "x")
    tip = run.ledger_tip()
    assert tip is not None
    replace_stored_object(repo, tip, b"garbage that is not a commit")
    with pytest.raises(CorruptionError):
        resume(reopen(run))
    result = CliRunner().invoke(cli, ["-C", str(repo), "resume", run.run_id])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1


def test_a_resume_killed_after_marking_books_as_one_that_was_not(repo: Path) -> None:
    """A call left uncertain by an older resume does not hide which call the last crash left in flight: a
    resume killed (SIGKILL) after it marked the calls uncertain is resumed again, and what the one call in
    flight wrote is still booked to it."""
    run = start(repo)
    old = run.start_call("fetch_url", {"u": 1})
    resume(reopen(run))  # old stays uncertain: nobody resolved it
    run = reopen(run)
    # Its file written straight into the worktree, as a shell command would: no hint names the writer.
    (killed,) = killed_in_flight(run, {"tool": "shell", "through_call": {}, "straight": {"made.txt": "x\n"}})
    proc = sandbox_cmd("resume", run.run_id, cwd=repo, env={"SANDBOX_FAULT": "resume.after_uncertain"})
    assert proc.returncode == -9, proc.stderr
    report = resume(reopen(run))
    assert [(d.path, d.attributed_to) for d in report.drift] == [("made.txt", killed)]
    state = reopen(run).state()
    assert [f.path for f in state.calls[killed].files] == ["made.txt"] and state.head == state.calls[killed].commit
    assert not state.calls[old].files


def test_killed_calls_whose_paths_nest_are_not_booked_apart(repo: Path) -> None:
    """The call started first writes f/g after the second deleted the file f: booked on its own, the first
    call's change would delete f unlisted (and the second's take f/g away). Neither is booked; both kept."""
    run = start(repo)
    with run.tool_call("edit") as c:
        c.write("f", "a file\n")
    first, second = killed_in_flight(
        run,
        {"tool": "write_file", "through_call": {"f/g": "below\n"}, "later": True},
        {"tool": "delete_file", "through_call": {}, "delete": ["f"]},
    )
    report = resume(reopen(run))
    assert [(d.path, d.attributed_to) for d in report.drift] == [("f", second), ("f/g", first)]
    state = reopen(run).state()
    assert not state.calls[first].files and not state.calls[second].files
    assert "Files changed outside any recorded call: f, f/g" in report.note
    assert Path(run.worktree, "f", "g").read_text() == "below\n"
    assert report.drift_commit is not None and git(repo, "show", f"{report.drift_commit}:f/g") == "below\n"
    applied = sandbox_cmd("apply", run.run_id, cwd=repo)  # the run's record agrees with its commits
    assert applied.returncode == 0, applied.stderr
    assert (repo / "f").read_text() == "a file\n"


TWO_CALLS_ONE_PROCESS = textwrap.dedent(
    """
    import os, signal, sys
    from sandbox.store.project import Project
    from sandbox.run.run import Run
    run = Run.open(Project(sys.argv[1]), sys.argv[2])
    first = run.tool_call("write_file", {"path": "a.txt"})
    first.__enter__()
    second = run.tool_call("write_file", {"path": "b.txt"})
    second.__enter__()
    first.write("a.txt", "first\\n")
    second.write("b.txt", "second\\n")
    print(first.call_id, second.call_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_one_process_with_two_calls_in_flight_names_neither(repo: Path) -> None:
    """Both calls were started by one process (as a host serving two tools at once): its write hints cannot
    tell which call wrote what, so nothing is booked to either (never both files to the last one)."""
    run = start(repo)
    proc = subprocess.run(
        [sys.executable, "-c", TWO_CALLS_ONE_PROCESS, run.project.common_dir, run.run_id],
        capture_output=True,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    first, second = proc.stdout.decode().split()
    report = resume(reopen(run))
    assert [(d.path, d.attributed_to) for d in report.drift] == [("a.txt", None), ("b.txt", None)]
    state = reopen(run).state()
    assert not state.calls[first].files and not state.calls[second].files
    assert Path(run.worktree, "a.txt").read_text() == "first\n"
