"""Codex's sessions (issue #22): the relaunch line, the rollout's calls, the MCP server's ids and refusals.

The real binary is driven in ``tests/agents/test_continue_codex.py``; these pin the pieces.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.agent import sessions, transcripts
from sandbox.errors import SandboxError
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.models import CallStatus, EventKind
from sandbox.recovery import continue_
from sandbox.recovery.resume import resume
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import make_repo

SESSION = "01a231c6-aaf5-77c0-8dff-589b7b91c781"
CODEX = sessions.agents()["codex"]


def rollout(*call_ids: str) -> bytes:
    """A small Codex rollout: the session's meta, the user's prompt, one function call per id."""
    lines = [
        {"ordinal": 0, "type": "session_meta", "payload": {"id": SESSION, "session_id": SESSION}},
        {"ordinal": 1, "type": "response_item", "payload": {"type": "message", "role": "user", "content": []}},
    ]
    for n, cid in enumerate(call_ids):
        item = {"type": "function_call", "name": "run_command", "namespace": "mcp__sandbox", "call_id": cid}
        lines.append({"ordinal": 2 + 2 * n, "type": "response_item", "payload": item})
        out = {"type": "function_call_output", "call_id": cid, "output": "ok"}
        lines.append({"ordinal": 3 + 2 * n, "type": "response_item", "payload": out})
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def test_relaunch_keeps_the_exec_options_and_resumes_the_session() -> None:
    argv = ["/x/codex", "exec", "--disable", "plugins", "-m", "gpt", "--json", "-C", "/repo", "Do the task."]
    prompt = "The sandbox stopped and resumed this session."
    assert CODEX.relaunch(argv, SESSION, prompt, None) == [
        "/x/codex",
        "exec",
        "--disable",
        "plugins",
        "-m",
        "gpt",
        "--json",
        "-C",
        "/repo",
        "resume",
        SESSION,
        prompt,
    ]
    # A recorded 'resume --last' is replaced by the session named here; no session: a new one.
    again = ["codex", "exec", "--color=never", "resume", "--last", "go on"]
    assert CODEX.relaunch(again, SESSION, "p", None) == ["codex", "exec", "--color=never", "resume", SESSION, "p"]
    assert CODEX.relaunch(argv, None, "p", None)[-3:] == ["-C", "/repo", "p"]
    assert sessions.for_command(["/opt/bin/codex", "exec", "x"]) is CODEX


def test_calls_map_the_model_call_ids_and_a_placed_copy_is_found(tmp_path: Path) -> None:
    data = rollout("call_a", "call_b")
    assert CODEX.calls(data) == {"call_a": 2, "call_b": 4}
    home = str(tmp_path / ".codex")
    assert CODEX.find(SESSION, [home]) is None
    dest = CODEX.place(home, "/anywhere", SESSION)
    os.makedirs(os.path.dirname(dest))
    Path(dest).write_bytes(data)
    assert CODEX.find(SESSION, [str(tmp_path / "other"), home]) == dest
    assert CODEX.find("../evil", [home]) is None
    # A fork: cut just before a call's function_call, the session renamed everywhere.
    forked = CODEX.fork(data, "call_b", "new-session")
    assert CODEX.calls(forked) == {"call_a": 2} and SESSION.encode() not in forked
    assert json.loads(forked.split(b"\n")[0])["payload"]["id"] == "new-session"
    assert CODEX.fork(data, None, "n2").count(b"\n") == data.count(b"\n")
    with pytest.raises(KeyError):
        CODEX.fork(data, "call_nope", "n3")


def test_resume_continue_plan_relaunches_codex_on_its_stored_rollout_unconfined_as_recorded(
    repo: Path, tmp_path: Path
) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.note({"agent_command": ["codex", "exec", "-m", "gpt", "Do it."], "subdir": "", "isolation": "off"})
    done = run.start_call("write_file", {"path": "a.txt"}, call_id="call_a", agent_session=SESSION)
    run.finish_call(done, "succeeded", paths=[])
    cut = run.start_call("run_command", {"argv": ["sh", "-c", "make"]}, call_id="call_b", agent_session=SESSION)
    data = rollout("call_a", "call_b")
    transcripts.store(run, "codex", SESSION, data, CODEX.calls(data), "session end")
    home = tmp_path / "codex-home"
    plan = continue_.plan(run, resume(run), {"codex": [str(home)]})
    assert plan.agent == "codex" and plan.session == SESSION and plan.restored and plan.isolate == "off"
    assert plan.argv == ["codex", "exec", "-m", "gpt", "resume", SESSION, plan.prompt]
    assert plan.blocked == [cut] and cut in plan.prompt
    assert plan.transcript is not None and Path(plan.transcript).read_bytes() == data
    assert CODEX.find(SESSION, [str(home)]) == plan.transcript


def workspace(tmp_path: Path) -> Workspace:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    return ws


def test_mcp_calls_carry_the_clients_call_id_and_session_and_a_denied_input_is_refused(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    run = ws.run
    assert run is not None
    wrote = ws.write_file("a.txt", "A\n", request_id=3, client_call="call_a", agent_session=SESSION)
    assert wrote["call_id"] == "call_a" and run.entry("call_a").agent_session == SESSION
    # The same client id again (a client that reuses ids): the server's own id, never a clash.
    again = ws.write_file("b.txt", "B\n", request_id=4, client_call="call_a", agent_session=SESSION)
    assert again["call_id"].startswith("mcp-")
    odd = ws.write_file("c.txt", "C\n", request_id=5, client_call="../x y", agent_session=None)
    assert odd["call_id"].startswith("mcp-")
    # A blocked input (what resume --continue does to an uncertain call) is refused, and recorded.
    run.record(EventKind.call_denied, "call_a", reason="its outcome is unknown", epoch=run.state().epoch)
    with pytest.raises(SandboxError) as caught:
        ws.write_file("a.txt", "A\n", request_id=6, client_call="call_retry", agent_session=SESSION)
    assert "denied" in caught.value.message and "its outcome is unknown" in caught.value.message
    assert run.entry("call_retry").status == CallStatus.not_run
    assert run.entry("call_retry").agent_session == SESSION
    assert (Path(run.worktree) / "a.txt").read_text() == "A\n"
    # Another input of the same tool still runs.
    assert ws.write_file("a.txt", "A2\n", request_id=7, client_call="call_c")["changed"] is True


def test_rewind_of_a_codex_run_forks_its_rollout_before_the_call(repo: Path, tmp_path: Path) -> None:
    from sandbox.recovery.rewind import rewind

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "a.txt"}, call_id="call_a", agent_session=SESSION) as c:
        c.write("a.txt", "one\n")
    with run.tool_call("run_command", {"argv": ["sh"]}, call_id="call_b", agent_session=SESSION) as c:
        c.write("a.txt", "two\n")
    data = rollout("call_a", "call_b")
    transcripts.store(run, "codex", SESSION, data, CODEX.calls(data), "session end")
    home = tmp_path / "codex-home"
    report = rewind(run, "call_b", {"codex": [str(home)]})
    assert (Path(run.worktree) / "a.txt").read_text() == "one\n"
    assert report.session is not None and report.session != SESSION and report.from_session == SESSION
    assert report.transcript is not None and CODEX.find(report.session, [str(home)]) == report.transcript
    forked = Path(report.transcript).read_bytes()
    assert CODEX.calls(forked) == {"call_a": 2} and SESSION.encode() not in forked
    assert transcripts.current_session(run) == report.session  # resume --continue goes on in the fork


def test_mcp_under_sandbox_run_works_on_that_run_and_refuses_where_it_cannot_record(repo: Path) -> None:
    """``sandbox mcp --new`` with ``SANDBOX_RUN`` (Codex's ``env_vars``) opens that run; read-only
    without a host to record through: one line."""
    import shutil
    import subprocess

    from tests.agents.claude_harness import SANDBOX

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    env = {**os.environ, "SANDBOX_RUN": run.run_id}
    served = subprocess.run(
        [SANDBOX, "mcp", "-C", str(repo), "--new"],
        cwd=repo,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert f"serving run {run.run_id}" in served.stderr, served.stderr
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    confined = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", SANDBOX, "mcp", "-C", str(repo), "--new"],
        cwd=repo,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert confined.returncode == 1, confined.stderr
    lines = confined.stderr.strip().splitlines()
    # The run's ledger is read-only there and no host answers (none was started): it cannot record.
    assert len(lines) == 1 and "does not answer" in lines[0] and "Traceback" not in confined.stderr, lines


def test_a_session_found_only_in_your_codex_home_is_continued_from_the_runs_home(repo: Path, tmp_path: Path) -> None:
    """A run made before Codex had a home in the run kept its rollout in your ``~/.codex``; the relaunch
    points Codex at the run's home, so the run's copy is written there (yours is left as it is)."""
    from sandbox.agent.adapters import codex

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.note({"agent_command": ["codex", "exec", "Do it."], "subdir": "", "isolation": "off"})
    done = run.start_call("write_file", {"path": "a.txt"}, call_id="call_a", agent_session=SESSION)
    run.finish_call(done, "succeeded", paths=[])
    data = rollout("call_a")
    yours = tmp_path / "user-codex"
    old = CODEX.place(str(yours), "/anywhere", SESSION)
    os.makedirs(os.path.dirname(old))
    Path(old).write_bytes(data)
    homes = {"codex": codex.session_homes({"CODEX_HOME": str(yours)}, str(tmp_path), run.dir)}
    plan = continue_.plan(run, resume(run), homes)
    assert plan.session == SESSION and plan.restored
    assert plan.transcript is not None and plan.transcript.startswith(codex.config_home(run.dir) + "/")
    assert Path(plan.transcript).read_bytes() == data and Path(old).read_bytes() == data
    # Found in the run's home the next time: left where the agent keeps it.
    again = continue_.plan(run, resume(run), homes)
    assert again.transcript == plan.transcript and not again.restored


def test_rewind_of_a_rollout_that_cannot_be_cut_rewinds_the_files_and_says_so(repo: Path, tmp_path: Path) -> None:
    """A stored rollout without its ``session_meta`` (a fetched run's copy is anybody's text): the files
    go back, the conversation is not forked, and the report says so (it was a KeyError, exit 3)."""
    from sandbox.recovery.rewind import rewind

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "a.txt"}, call_id="call_a", agent_session=SESSION) as c:
        c.write("a.txt", "one\n")
    with run.tool_call("run_command", {"argv": ["sh"]}, call_id="call_b", agent_session=SESSION) as c:
        c.write("a.txt", "two\n")
    data = b"\n".join(rollout("call_a", "call_b").split(b"\n")[1:])  # no session_meta line
    transcripts.store(run, "codex", SESSION, data, CODEX.calls(data), "session end")
    report = rewind(run, "call_b", {"codex": [str(tmp_path / "codex-home")]})
    assert (Path(run.worktree) / "a.txt").read_text() == "one\n"
    assert report.session is None and report.transcript is None
    assert any("only the files were rewound" in m for m in report.messages), report.messages
