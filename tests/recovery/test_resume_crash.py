"""A scripted runtime killed at every checkpoint boundary and inside tool calls, then resumed.

Real processes, real SIGKILL (armed fault points), real repositories. After the run finishes:
no non-idempotent call ran twice (an external counter proves it), the denied call was not asked
again, every file the agent wrote exists once with the right content, and each resume note names
the last completed step and every uncertain call. Resuming twice in a row (CLI) gives the same
answer. A writer paused with SIGSTOP while the run is resumed elsewhere is refused at its finish.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.models import CallStatus
from sandbox.recovery.resume import resume
from sandbox.run.checkpoint import CheckpointStore
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.project import Project
from tests import cliserver
from tests.conftest import loose_path, make_repo, sandbox_cmd

RUNTIME = str(Path(__file__).parents[1] / "scripted_runtime.py")
ROOT = str(Path(__file__).parents[2])
CHECKPOINTS = 13  # start, then before and after each of the six steps
EXPECTED = {"src/a.txt": "alpha\n", "src/b.txt": "beta\n", "build.out": "built", "src/c.txt": "gamma\n"}
# The email call is the 4th call started; a kill right after its start never sends it.
EMAIL_NOT_SENT = {"call.start.after@4"}


def run_runtime(repo: Path, state: Path, fault: str | None = None) -> int:
    env = dict(os.environ)
    env.pop("SANDBOX_FAULT", None)
    if fault:
        env["SANDBOX_FAULT"] = fault
    # Forked by the tests' command server, which imported the library once (a real process all the same:
    # the armed point SIGKILLs it); the editable install makes ``sandbox`` importable.
    proc = cliserver.script(RUNTIME, str(repo), str(state), str(state / "counter"), cwd=ROOT, env=env, timeout=180)
    if proc.returncode not in (0, -9):
        raise AssertionError(proc.stderr.decode())
    return proc.returncode


def open_run(repo: Path, state: Path) -> Run:
    project, _wd, _ = Project.discover(str(repo))
    return Run.open(project, (state / "run_id").read_text().strip())


def check_finished(repo: Path, state: Path, email_sent: bool) -> None:
    assert (state / "done").exists()
    run = open_run(repo, state)
    counter = state / "counter"
    sent = int(counter.read_text()) if counter.exists() else 0
    assert sent == (1 if email_sent else 0), "the non-idempotent email ran twice (or never ran when it should)"
    asks = (state / "asks.log").read_text().splitlines()
    assert len(asks) == 1, "the denied call was asked again"
    for rel, text in EXPECTED.items():
        assert Path(run.worktree, rel).read_text() == text
    head_tree = objects.commit_tree(run.repo, run.head())
    entries = run.entries()
    for rel, text in EXPECTED.items():
        entry = objects.lookup(run.repo, head_tree, rel)
        assert entry is not None and objects.read_blob(run.repo, entry.oid) == text.encode()
        # A call killed while it wrote holds what it wrote (booked to it at resume, issue 34): a replay adds nothing.
        done = (CallStatus.succeeded, CallStatus.uncertain)
        writers = [e for e in entries if e.status in done and any(f.path == rel for f in e.files)]
        assert len(writers) == 1, f"{rel} was written by {len(writers)} calls"
    assert not [e for e in entries if e.status == CallStatus.started]
    assert [e.tool_name for e in entries if e.status == CallStatus.succeeded].count("send_email") <= 1
    for report_file in sorted(state.glob("resume-*.json")):
        report = json.loads(report_file.read_text())
        if report["last_completed_step"]:
            assert f"Step {report['last_completed_step']} completed." in report["note"]
        for u in report["uncertain"]:
            assert u["call_id"] in report["note"]
        for call_id in report["do_not_replay"]:
            assert run.entry(call_id).tool_name == "send_email"


def scenario(tmp_path: Path, faults: list[str]) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", {"README.md": "task\n", "src/keep.txt": "keep\n"})
    state = tmp_path / "state"
    state.mkdir()
    for fault in faults:
        assert run_runtime(repo, state, fault) == -9, f"fault {fault} did not fire"
    return repo, state


def resume_twice_same(repo: Path, run_id: str) -> None:
    first = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    second = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert b.pop("epoch") == a.pop("epoch") + 1
    assert a == b


def test_uninterrupted_run(tmp_path: Path) -> None:
    repo, state = scenario(tmp_path, [])
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(1, CHECKPOINTS + 1))
def test_killed_at_each_checkpoint_boundary(tmp_path: Path, n: int) -> None:
    repo, state = scenario(tmp_path, [f"checkpoint.save.after_ref@{n}"])
    run_id = (state / "run_id").read_text().strip()
    resume_twice_same(repo, run_id)
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        "checkpoint.save.before@5",
        "checkpoint.save.after_blobs@5",
        "checkpoint.save.after_commit@8",
        "checkpoint.save.after_ledger@8",
        *[f"call.start.after@{k}" for k in range(1, 6)],
        *[f"call.finish.before@{k}" for k in range(1, 6)],
        "call.finish.after_commit@1",
        "call.finish.after_ledger@3",
    ],
)
def test_killed_inside_a_step(tmp_path: Path, fault: str) -> None:
    repo, state = scenario(tmp_path, [fault])
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=fault not in EMAIL_NOT_SENT)


def test_killed_after_the_email_was_sent_before_its_result(tmp_path: Path) -> None:
    repo, state = scenario(tmp_path, ["runtime.email_sent"])
    run_id = (state / "run_id").read_text().strip()
    resume_twice_same(repo, run_id)
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)
    report = json.loads((state / "resume-1.json").read_text())
    email = [u for u in report["uncertain"] if u["tool_name"] == "send_email"]
    assert len(email) == 1 and email[0]["decision"] == "do_not_replay"
    assert report["do_not_replay"] == [email[0]["call_id"]]
    assert f"send_email ({email[0]['call_id']}) is uncertain" in report["note"]
    assert "do not repeat it without checking" in report["note"]
    assert report["last_completed_step"] == "step_3" and "Step step_3 completed." in report["note"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "resume_fault",
    [
        "resume.after_fence",
        "resume.after_uncertain",
        "resume.after_verify",
        "resume.after_worktree",
        "resume.after_drift",
    ],
)
def test_killed_again_while_resuming(tmp_path: Path, resume_fault: str) -> None:
    repo, state = scenario(tmp_path, ["runtime.email_sent", resume_fault])
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)


def test_killed_twice_in_different_steps(tmp_path: Path) -> None:
    repo, state = scenario(tmp_path, ["call.finish.before@2", "runtime.email_sent"])
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)


def test_missing_worktree_and_garbled_checkpoint_after_a_crash(tmp_path: Path) -> None:
    repo, state = scenario(tmp_path, ["checkpoint.save.after_ref@9"])
    run = open_run(repo, state)
    newest = CheckpointStore(run).list().checkpoints[-1]
    assert newest.blob is not None
    path = loose_path(repo, newest.blob)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:7])
    shutil.rmtree(run.worktree)
    assert run_runtime(repo, state) == 0
    check_finished(repo, state, email_sent=True)
    report = json.loads((state / "resume-1.json").read_text())
    assert report["worktree_recreated"]
    assert report["checkpoint"]["name"] == "ckpt_008"
    assert any("ckpt_009" in p for p in report["problems"])


PAUSED_WRITER = textwrap.dedent(
    """
    import sys
    from sandbox.errors import StaleWriterError
    from sandbox.store.project import Project
    from sandbox.run.run import Run
    run = Run.open(Project(sys.argv[1]), sys.argv[2])
    call = run.tool_call("write_file", {"path": "stale.txt"})
    call.__enter__()
    call.write("stale.txt", "from the old writer\\n")
    print(call.call_id, flush=True)
    sys.stdin.readline()  # the test stops us here, resumes the run elsewhere, then continues us
    try:
        call.__exit__(None, None, None)
    except StaleWriterError as exc:
        print("refused:", exc, flush=True)
        sys.exit(3)
    """
)


def test_paused_writer_cannot_commit_after_a_resume(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_WRITER, run.project.common_dir, run.run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    call_id = proc.stdout.readline().decode().strip()
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        report = resume(Run.open(Project(run.project.common_dir), run.run_id))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err.decode()
    assert b"refused:" in out
    fresh = Run.open(Project(run.project.common_dir), run.run_id)
    assert fresh.entry(call_id).status == CallStatus.uncertain
    assert fresh.head() == report.drift_commit  # nothing stale committed: only what resume booked to the call
    assert [d.path for d in report.drift] == ["stale.txt"] and report.drift[0].attributed_to == call_id
    assert Path(run.worktree, "stale.txt").read_text() == "from the old writer\n"
