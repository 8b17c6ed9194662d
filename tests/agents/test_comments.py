"""Review comments back to the real Claude Code (issue #34, item 9).

A session under ``sandbox run`` writes a file; the reviewer comments on a line of it with ``sandbox
comment``; ``sandbox resume RUN --continue`` relaunches Claude Code on its own conversation and the
scripted server's next request carries the comment as the user's words; the agent's fix is recorded
in the same agent session, and the ledger says which comments were sent in which session (never twice).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.models import CallStatus
from tests.agents.anthropic_server import ModelServer, write
from tests.agents.claude_harness import claude_env, cli_start, stop_services, via_run
from tests.agents.test_continue import _sandbox, _texts, _tool_ids
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


def test_comments_go_to_the_agent_as_its_next_message_once(claude_bin: str, repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "claude-home"
    run = cli_start(repo)
    wt = Path(run.worktree)
    first = write(str(wt / "src/greet.py"), "def f(name):\n    return 'hi ' + name\n")
    with ModelServer([first]) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    said = _sandbox("comment", run.run_id, "src/greet.py:1", "Name it greet, not f.", cwd=repo)
    assert said.returncode == 0, said.stderr
    assert "Comment c1 on src/greet.py:1 (on call #1) recorded." in said.stdout
    listed = json.loads(_sandbox("comments", run.run_id, "--json", cwd=repo).stdout)
    assert [(c["id"], c["call_id"], c["sent_at"]) for c in listed] == [("c1", first.tools[0].id, None)]

    fix = write(str(wt / "src/greet.py"), "def greet(name):\n    return 'hi ' + name\n")
    with ModelServer([fix]) as server:
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env=claude_env(server, home))
        requests = server.agent_requests()
    assert done.returncode == 0, done.stderr
    assert "handing 1 review comment(s) to the agent: c1" in done.stderr
    opening = requests[0]
    assert _tool_ids(opening)[:1] == [first.tools[0].id]  # its own conversation, continued
    assert "src/greet.py:1 (changed by your call #1): Name it greet, not f." in _texts(opening)
    entries = {e.call_id: e for e in reopen(run).entries()}
    assert entries[fix.tools[0].id].status == CallStatus.succeeded
    assert (wt / "src/greet.py").read_text().startswith("def greet(name):")
    session_id = entries[first.tools[0].id].agent_session
    assert session_id is not None and entries[fix.tools[0].id].agent_session == session_id
    # The ledger: c1 went to that session; a second resume sends nothing again.
    listed = json.loads(_sandbox("comments", run.run_id, "--json", cwd=repo).stdout)
    assert listed[0]["sent_session"] == session_id and listed[0]["sent_agent"] == "claude-code"
    shown = _sandbox("comments", run.run_id, cwd=repo).stdout
    assert f"[sent to claude-code session {session_id}]" in shown
    with ModelServer([]) as server:
        again = _sandbox("resume", run.run_id, "--continue", cwd=repo, env=claude_env(server, home))
        requests = server.agent_requests()
    assert again.returncode == 0, again.stderr
    assert "review comment" not in again.stderr
    assert _texts(requests[0]).count("The reviewer left") == 1  # in the conversation once: not sent again


def test_gemini_gets_the_comments_too_and_its_shell_output_is_kept(repo: Path, tmp_path: Path, gemini_bin: str) -> None:
    import os

    from sandbox.run import output
    from tests.agents import gemini_server as gs
    from tests.agents.test_continue import _gemini_home
    from tests.agents.test_gemini import agent_env

    home = _gemini_home(tmp_path)
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        gs.call("write_file", file_path=str(wt / "a.txt"), content="one\n"),
        gs.call("run_shell_command", command="echo from-the-test; echo oops >&2; exit 3"),
    ]
    with gs.serve([*turns, gs.text("Done.")]) as server:
        session = _sandbox(
            "run",
            run.run_id,
            "--",
            gemini_bin,
            "-p",
            "do the task",
            "--yolo",
            cwd=repo,
            env={**os.environ, **agent_env(server, home)},
        )
    assert session.returncode == 0, session.stderr
    shell = reopen(run).entries()[1]
    kept = output.read(run, shell)
    assert b"from-the-test" in kept["output"][1] and b"oops" in kept["output"][1]  # Gemini's one text of both
    said = _sandbox("comment", run.run_id, "a.txt:1", "Write two, not one.", cwd=repo)
    assert said.returncode == 0, said.stderr
    fix = gs.call("write_file", file_path=str(wt / "a.txt"), content="two\n")
    with gs.serve([fix, gs.text("Fixed.")]) as server:
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env={**os.environ, **agent_env(server, home)})
        first = server.conversation()[0].body
    assert done.returncode == 0, done.stderr
    texts = "\n".join(p.get("text", "") for c in first["contents"] for p in c.get("parts", []))
    assert "a.txt:1 (changed by your call #1): Write two, not one." in texts
    assert (wt / "a.txt").read_text() == "two\n"
    listed = json.loads(_sandbox("comments", run.run_id, "--json", cwd=repo).stdout)
    assert listed[0]["sent_agent"] == "gemini" and listed[0]["sent_at"]


def test_codex_gets_the_comments_too_and_its_run_command_output_is_kept(
    codex_bin: str, repo: Path, tmp_path: Path
) -> None:
    from sandbox.run import output
    from tests.agents.openai_server import ResponsesServer
    from tests.agents.test_codex_mcp import mcp
    from tests.agents.test_continue_codex import _codex_under_run, _user_text, codex_env

    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        mcp("write_file", path="a.txt", content="one\n"),
        mcp("run_command", command="echo from-codex; echo oops >&2; exit 2"),
    ]
    with ResponsesServer(turns) as server:
        session = _codex_under_run(codex_bin, repo, run.run_id, codex_env(tmp_path, server, repo))
    assert session.returncode == 0, session.stderr
    shell = [e for e in reopen(run).entries() if e.tool_name == "run_command"][0]
    assert output.read(run, shell)["output"][1] == b"from-codex\noops\n"  # 'sandbox mcp' in the sandbox, via the host
    said = _sandbox("comment", run.run_id, "a.txt:1", "Write two, not one.", cwd=repo)
    assert said.returncode == 0, said.stderr
    fix = mcp("write_file", path="a.txt", content="two\n")
    with ResponsesServer([fix]) as server:
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env=codex_env(tmp_path, server, repo))
        requests = server.model_requests()
    assert done.returncode == 0, done.stderr + done.stdout
    assert "a.txt:1 (changed by your call #1): Write two, not one." in _user_text(requests[0].body)
    assert (wt / "a.txt").read_text() == "two\n"
    listed = json.loads(_sandbox("comments", run.run_id, "--json", cwd=repo).stdout)
    assert listed[0]["sent_agent"] == "codex" and listed[0]["sent_at"]
