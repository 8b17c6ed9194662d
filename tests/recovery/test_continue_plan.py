"""What ``resume --continue`` decides (issue #22): the command, the session, the blocked calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.agent import sessions, transcripts
from sandbox.models import Approval, CallStatus
from sandbox.recovery import continue_
from sandbox.recovery.resume import resume
from sandbox.run import approvals
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd

SESSION = "5d1c0de0-0000-4000-8000-000000000001"


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def crashed(repo: Path) -> tuple[Run, str]:
    """A run whose agent (claude) wrote a file, then died during a command."""
    run = start(repo)
    run.note({"agent_command": ["claude", "-p", "Do it.", "--model", "m"], "subdir": ""})
    done = run.start_call("Write", {"file_path": "a.txt"}, call_id="toolu_a", agent_session=SESSION)
    run.finish_call(done, "succeeded", paths=[])
    cut = run.start_call("Bash", {"command": "make deploy"}, call_id="toolu_b", agent_session=SESSION)
    return run, cut


def test_no_transcript_anywhere_starts_a_new_session_and_says_so(repo: Path, tmp_path: Path) -> None:
    run, cut = crashed(repo)
    report = resume(run)
    homes = {"claude-code": [str(tmp_path / "nowhere" / ".claude")]}
    plan = continue_.plan(run, report, homes)
    assert plan.session is None and "--resume" not in plan.argv
    assert plan.argv[:2] == ["claude", plan.prompt] and plan.argv[2:] == ["-p", "--model", "m"]
    assert "could not be found" in plan.prompt and cut in plan.prompt
    assert plan.blocked == [cut] and run.entry(cut).approval == Approval.denied
    assert run.entry(cut).status == CallStatus.uncertain
    denial = approvals.is_denied(run, "Bash", {"command": "make deploy"})
    assert denial is not None and "outcome is unknown" in (denial.reason or "")
    again = continue_.plan(run, resume(run), homes)  # blocking twice adds nothing
    assert again.blocked == []


def test_a_stored_copy_is_written_where_the_agent_finds_it(repo: Path, tmp_path: Path) -> None:
    run, _cut = crashed(repo)
    data = b'{"type":"user","sessionId":"%s","message":{"role":"user","content":"hi"}}\n' % SESSION.encode()
    transcripts.store(run, "claude-code", SESSION, data, {}, "session end")
    home = tmp_path / "home" / ".claude"
    plan = continue_.plan(run, resume(run), {"claude-code": [str(home)]})
    assert plan.session == SESSION and plan.restored and plan.argv[-2:] == ["--resume", SESSION]
    assert plan.transcript is not None and Path(plan.transcript).read_bytes() == data
    assert sessions.ClaudeCode().find(SESSION, [str(home)]) == plan.transcript


def test_a_run_without_an_agent_command_is_refused_in_one_line(repo: Path) -> None:
    run = start(repo)
    with pytest.raises(continue_.CannotContinueError):
        continue_.plan(run, resume(run), {})
    done = sandbox_cmd("resume", run.run_id, "--continue", cwd=repo)
    assert done.returncode == 1 and b"no agent command recorded" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_relaunch_is_confined_as_the_session_ran_not_as_the_settings_say_now(repo: Path) -> None:
    assert continue_.confinement_of("bwrap, network allow (api.anthropic.com, example.org)") == ("on", "allow")
    assert continue_.confinement_of("seatbelt, network off") == ("on", "off")
    assert continue_.confinement_of("off") == ("off", None)
    assert continue_.confinement_of(None) == continue_.confinement_of("inherited (inside ...)") == (None, None)
    run, _cut = crashed(repo)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": "", "isolation": "bwrap, network off"})
    (repo / ".sandbox.toml").write_text("[isolation]\nisolate = false\n")  # changed since the session
    plan = continue_.plan(run, resume(run), {})
    assert (plan.isolate, plan.network) == ("on", "off") and "as its recorded session ran" in plan.messages[-1]
    mine = continue_.plan(run, resume(run), {}, isolate="off")  # the user's explicit choice wins
    assert mine.isolate == "off" and "as you asked" in mine.messages[-1]


def test_a_confinement_this_machine_cannot_give_is_refused_in_one_line(repo: Path, tmp_path: Path) -> None:
    run, cut = crashed(repo)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": "", "isolation": "bwrap, network allow ()"})
    tools = tmp_path / "no-bwrap"
    tools.mkdir()
    (tools / "git").symlink_to("/usr/bin/git")  # a PATH with git, without bubblewrap
    done = sandbox_cmd("resume", run.run_id, "--continue", cwd=repo, env={"PATH": str(tools)})
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert b"ran confined (bwrap, network allow ())" in done.stderr and b"--isolate off" in done.stderr
    assert run.entry(cut).approval is None  # refused before anything was blocked or started
    bad = sandbox_cmd("resume", run.run_id, "--isolate", "off", cwd=repo)
    assert bad.returncode == 2 and b"go with --continue" in bad.stderr
