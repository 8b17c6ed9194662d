"""The real Claude Code crashes, continues and rewinds with its conversation (issue #22).

Claude Code is killed with SIGKILL during a Bash call under ``sandbox run``; ``sandbox resume RUN
--continue`` relaunches it on its own conversation (the scripted server's next request carries the
earlier turns and the resume note), the uncertain command stays refused until approved, and the
session goes on recording. ``sandbox rewind RUN --to CALL --continue`` puts the files back to just
before CALL and continues a fork of the conversation cut there. A pushed run continues its
conversation in another clone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent.adapters import claude_code
from sandbox.models import CallStatus
from tests import cliserver
from tests.agents.anthropic_server import ModelServer, Request, ToolUse, Turn, bash, result_text, write
from tests.agents.claude_harness import (
    TIMEOUT,
    claude_args,
    claude_env,
    cli_start,
    push_into_another_clone,
    stop_services,
    via_run,
)
from tests.agents.test_claude_code import _children, _with_marker
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents

NEW_FILE = "src/new.py"
NEW_TEXT = "def new():\n    return 1\n"
NOTE_HEAD = "The sandbox stopped and resumed this session"


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HOME for Claude Code (its settings and sessions)."""
    return tmp_path / "claude-home"


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique marker for a test's long commands; processes carrying it are stopped at the end."""
    mark = f"42.{os.getpid() % 1000:03d}{time.monotonic_ns() % 1000:03d}"
    yield mark
    for pid in _with_marker(f"sleep {mark}"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _tool_ids(request: Request) -> list[str]:
    """The tool_use ids of a request's messages, in order."""
    out = []
    for message in request.body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                out.append(str(block.get("id")))
    return out


def _texts(request: Request) -> str:
    """Every text of a request's user messages, joined."""
    out = []
    for message in request.body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                out.append(str(block.get("text", "")))
    return "\n".join(out)


def _sandbox(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cliserver.sandbox(*args, cwd=cwd, env=env, input=b"", timeout=TIMEOUT, text=True)


def _crash_during_bash(claude_bin: str, repo: Path, run_id: str, wt: Path, home: Path, turns: list[Turn]) -> str:
    """Run Claude Code under ``sandbox run`` and SIGKILL it once the last turn's Bash wrote started.txt."""
    with ModelServer(list(turns)) as server:
        proc = cliserver.popen(  # forked by the tests' command server: its pid is sandbox run's own
            *("run", run_id, "--", *claude_args(claude_bin, "bypassPermissions", home / "debug.log")),
            cwd=repo,
            env=claude_env(server, home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not (wt / "started.txt").exists() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert (wt / "started.txt").exists(), proc.communicate(timeout=30)
            claude = [
                p
                for s in _children(proc.pid)
                for p in _children(s)
                if "claude" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
            ]
            assert len(claude) == 1
            os.kill(claude[0], signal.SIGKILL)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return err


def test_kill_9_then_resume_continue(claude_bin: str, repo: Path, home: Path, marker: str) -> None:
    run = cli_start(repo)
    wt = Path(run.worktree)
    command = f"echo started > started.txt; sleep {marker}; echo late > late.txt"
    first = write(str(wt / NEW_FILE), NEW_TEXT)
    long_call = ToolUse("Bash", {"command": command, "description": "long"})
    err = _crash_during_bash(claude_bin, repo, run.run_id, wt, home, [first, Turn(tools=[long_call])])
    assert reopen(run).entry(long_call.id).status == CallStatus.started, err

    retry = ToolUse("Bash", {"command": command, "description": "long"})  # the same input under a new id
    after = write(str(wt / "src/after.py"), "AFTER = 1\n")
    with ModelServer([Turn(tools=[retry]), after]) as server:
        started = time.monotonic()
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env=claude_env(server, home))
        elapsed = time.monotonic() - started
        requests = server.agent_requests()
    assert done.returncode == 0, done.stderr
    assert "continuing claude-code session" in done.stderr and long_call.id in done.stderr
    # The first request of the continued session carries the earlier turns and the note.
    opening = requests[0]
    assert _tool_ids(opening)[:2] == [first.tools[0].id, long_call.id], _tool_ids(opening)
    assert NOTE_HEAD in _texts(opening) and long_call.id in _texts(opening)
    # The model's retry of the uncertain command is refused, with a reason it understands.
    refused = server.tool_result(retry.id)
    assert refused is not None and refused.get("is_error") is True
    assert "outcome is unknown" in result_text(refused)
    entries = {e.call_id: e for e in reopen(run).entries()}
    assert entries[retry.id].status == CallStatus.not_run
    assert entries[long_call.id].status == CallStatus.uncertain
    # The session goes on, recorded, in the same agent session.
    assert entries[after.tools[0].id].status == CallStatus.succeeded
    assert (wt / "src/after.py").read_text() == "AFTER = 1\n" and not (wt / "late.txt").exists()
    assert entries[after.tools[0].id].agent_session == entries[first.tools[0].id].agent_session
    print(f"resume --continue took {elapsed:.2f} s in all")

    # Approving the blocked call lifts the block: the same command would run again.
    from sandbox.run import approvals

    assert approvals.is_denied(reopen(run), "Bash", long_call.input) is not None
    approved = _sandbox("approve", run.run_id, long_call.id, cwd=repo)
    assert approved.returncode == 0, approved.stderr
    assert approvals.is_denied(reopen(run), "Bash", long_call.input) is None
    assert reopen(run).entry(long_call.id).status == CallStatus.uncertain  # its outcome is still unknown


def test_transcript_is_stored_with_the_run_and_mapped(claude_bin: str, repo: Path, home: Path) -> None:
    """After a ``sandbox run`` session the run holds the conversation, each call mapped to its line."""
    from sandbox.agent import transcripts

    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [write(str(wt / NEW_FILE), NEW_TEXT), bash("echo x > x.txt")]
    with ModelServer(turns) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    run = reopen(run)
    session_id = run.entries()[0].agent_session
    assert session_id is not None
    stored = transcripts.latest(run, session_id)
    assert stored is not None and stored.index.agent == "claude-code"
    assert set(stored.index.calls) == {t.tools[0].id for t in turns}
    # In the run's own Claude Code home ('sandbox run' gives it one), never in yours.
    assert not (home / ".claude" / "projects").exists()
    found = list(Path(claude_code.transcripts_dir(run.dir)).glob(f"*/{session_id}.jsonl"))
    assert len(found) == 1 and transcripts.load(run, stored) == found[0].read_bytes()
    # At a checkpoint the conversation as it is then is stored too (only its new bytes).
    more = b'{"type":"user","message":{"role":"user","content":"more"}}\n'
    with found[0].open("ab") as fh:
        fh.write(more)
    made = _sandbox("checkpoint", run.run_id, "--label", "later", cwd=repo, env={**os.environ, "HOME": str(home)})
    assert made.returncode == 0, made.stderr
    records = transcripts.records(reopen(run))
    assert [r["reason"] for r in records] == ["session end", "checkpoint ckpt_001"]
    # Only the first copy's last, still open, chunk and the new line are new bytes. (Chunks end at a
    # line whose hash agrees, one in eight: a short conversation may be one open chunk, stored again
    # whole, so a plain "fewer new bytes than the first copy" held only for most conversations.)
    first = transcripts.read(run, str(records[0]["commit"])).index
    assert records[1]["new_bytes"] <= run.repo[first.chunks[-1]].size + len(more)
    second = transcripts.read(run, str(records[1]["commit"])).index
    assert second.chunks[: len(first.chunks) - 1] == first.chunks[:-1]


def test_rewind_to_a_call_then_continue(claude_bin: str, repo: Path, home: Path) -> None:
    """Files back to just before the call; the next request carries exactly the turns before it."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [write(str(wt / "a.txt"), "one\n"), bash("echo two > b.txt"), write(str(wt / "c.txt"), "three\n")]
    ids = [t.tools[0].id for t in turns]
    with ModelServer(turns) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    assert (wt / "b.txt").exists() and (wt / "c.txt").exists()
    original = list(Path(claude_code.transcripts_dir(run.dir)).glob("*/*.jsonl"))
    assert len(original) == 1
    before = original[0].read_bytes()

    later = write(str(wt / "d.txt"), "four\n")
    with ModelServer([later]) as server:
        done = _sandbox("rewind", run.run_id, "--to", ids[1], "--continue", cwd=repo, env=claude_env(server, home))
        requests = server.agent_requests()
    assert done.returncode == 0, done.stderr
    assert "forked just before call #" in done.stderr and "after the rewind point: #" in done.stderr  # the Bash too
    opening = requests[0]
    assert _tool_ids(opening) == [ids[0]]  # exactly the turns before the call
    assert "rewound this session to just before call" in _texts(opening)
    assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists() and not (wt / "c.txt").exists()
    assert (wt / "d.txt").read_text() == "four\n"
    assert original[0].read_bytes() == before  # the agent's own transcript is never edited
    entries = {e.call_id: e for e in reopen(run).entries()}
    assert entries[later.tools[0].id].status == CallStatus.succeeded
    assert entries[later.tools[0].id].agent_session != entries[ids[0]].agent_session  # the fork's session


def test_a_pushed_run_continues_its_conversation_in_another_clone(claude_bin: str, tmp_path: Path, repo: Path) -> None:
    """Clone B has never seen the agent's session: resume --continue writes it from the run's copy.

    The run was fetched, so its record is clone A's word: B runs the ``claude`` on its own PATH, drops
    the recorded options no adapter lists as safe (the permission bypass among them) and takes the
    ones its user gives after ``--``.
    """
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [write(str(wt / NEW_FILE), NEW_TEXT), bash("echo built > out.txt")]
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    with ModelServer(turns) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home_a, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    other = push_into_another_clone(tmp_path, repo, run.run_id)
    stop_services(repo)

    later = write(str(tmp_path / "unused"), "")  # its path is set below, once the worktree in B is known
    with ModelServer([later]) as server:
        env = claude_env(server, home_b)
        path = _sandbox("path", run.run_id, cwd=other, env=env)
        assert path.returncode == 0, path.stderr
        wt_b = Path(path.stdout.strip())
        later.tools[0].input["file_path"] = str(wt_b / "b.txt")
        later.tools[0].input["content"] = "from b\n"
        env["PATH"] = f"{Path(claude_bin).parent}{os.pathsep}{env['PATH']}"
        extra = ("--", "--dangerously-skip-permissions")  # the user's own choice, not the record's
        done = _sandbox("resume", run.run_id, "--continue", *extra, cwd=other, env=env)
        requests = server.agent_requests()
    stop_services(other)
    assert done.returncode == 0, done.stderr
    assert "from the run's stored copy" in done.stderr
    assert "dropped the recorded option '--dangerously-skip-permissions'" in done.stderr, done.stderr
    assert _tool_ids(requests[0])[:2] == [t.tools[0].id for t in turns]  # the conversation of clone A
    assert (wt_b / "b.txt").read_text() == "from b\n" and (wt_b / "out.txt").read_text() == "built\n"
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, _workdir, _cwd_run = Project.discover(str(other))
    entries = {e.call_id: e for e in Run.open(project, run.run_id).entries()}
    assert entries[later.tools[0].id].status == CallStatus.succeeded
    assert entries[later.tools[0].id].agent_session == entries[turns[0].tools[0].id].agent_session  # same session


def test_fork_at_a_call_forks_the_conversation(claude_bin: str, repo: Path, home: Path) -> None:
    """``fork --at CALL`` then ``resume FORK --continue``: the agent goes on from just after CALL."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [write(str(wt / "a.txt"), "one\n"), write(str(wt / "b.txt"), "two\n")]
    ids = [t.tools[0].id for t in turns]
    with ModelServer(turns) as server:
        session = via_run(claude_bin, repo, run.run_id, server, home, "bypassPermissions")
    assert session.returncode == 0, session.stderr
    forked = _sandbox("--json", "fork", run.run_id, "--at", ids[0], cwd=repo)
    assert forked.returncode == 0, forked.stderr
    fork = json.loads(forked.stdout)
    fork_wt = Path(fork["worktree"])
    assert (fork_wt / "a.txt").exists() and not (fork_wt / "b.txt").exists()
    later = write(str(fork_wt / "c.txt"), "three\n")
    with ModelServer([later]) as server:
        done = _sandbox("resume", fork["run"], "--continue", cwd=repo, env=claude_env(server, home))
        requests = server.agent_requests()
    assert done.returncode == 0, done.stderr
    assert _tool_ids(requests[0]) == [ids[0]]  # the conversation up to just after the call
    assert (fork_wt / "c.txt").read_text() == "three\n" and not (wt / "c.txt").exists()


def test_gemini_kill_9_then_resume_continue(repo: Path, tmp_path: Path, marker: str, gemini_bin: str) -> None:
    """Gemini CLI, killed mid-command, continues on its stored chat (``--session-file``) with the note."""
    from tests.agents import gemini_server as gs
    from tests.agents.test_gemini import agent_env, kill_gemini

    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    run = cli_start(repo)
    wt = Path(run.worktree)
    command = f"echo started > started.txt; sleep {marker}; echo late > late.txt"
    turns = [
        gs.call("write_file", file_path=str(wt / "a.txt"), content="one\n"),
        gs.call("run_shell_command", command=command),
    ]
    with gs.serve(turns) as server:
        proc = cliserver.popen(  # forked by the tests' command server: its pid is sandbox run's own
            *("run", run.run_id, "--", gemini_bin, "-p", "do the task", "--yolo"),
            cwd=repo,
            env={**os.environ, **agent_env(server, home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 90
            while not (wt / "started.txt").exists() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert (wt / "started.txt").exists(), proc.communicate(timeout=30)
            kill_gemini(proc.pid)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    uncertain = [e for e in reopen(run).entries() if e.status == CallStatus.started]
    assert [e.tool_name for e in uncertain] == ["run_shell_command"]

    again = [
        gs.call("run_shell_command", command=command),
        gs.call("write_file", file_path=str(wt / "b.txt"), content="two\n"),
    ]
    with gs.serve([*again, gs.text("All done.")]) as server:
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env={**os.environ, **agent_env(server, home)})
        first = server.conversation()[0].body
        responses = server.function_responses()
    assert done.returncode == 0, done.stderr
    assert "continuing gemini session" in done.stderr
    parts = [p for c in first["contents"] for p in c.get("parts", [])]
    asked = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
    # The earlier turns: Gemini writes a turn's tool calls to its chat once they end, so the command
    # in flight at the kill is not among them; the note tells the model about it.
    assert asked[:1] == ["write_file"]
    note = "\n".join(p.get("text", "") for p in parts)
    assert NOTE_HEAD in note and uncertain[0].call_id in note
    refused = [r for r in responses if r.get("name") == "run_shell_command"]
    assert refused and "outcome is unknown" in json.dumps(refused[-1])
    assert (wt / "b.txt").read_text() == "two\n" and not (wt / "late.txt").exists()
    entries = reopen(run).entries()
    assert [e.status for e in entries if e.tool_name == "run_shell_command"] == [
        CallStatus.uncertain,
        CallStatus.not_run,
    ]
    wrote = [e for e in entries if e.tool_name == "write_file"]
    assert [(e.status, [f.path for f in e.files]) for e in wrote][-1] == (CallStatus.succeeded, ["b.txt"])
    assert wrote[-1].agent_session is not None  # the continued session, recorded


def _gemini_home(tmp_path: Path) -> Path:
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    return home


def test_gemini_rewind_to_a_call_then_continue(repo: Path, tmp_path: Path, gemini_bin: str) -> None:
    """Gemini CLI: rewind cuts a copy of its chat just before the call; the continue sends the turns before it."""
    from sandbox.agent.sessions import GeminiCli
    from tests.agents import gemini_server as gs
    from tests.agents.test_gemini import agent_env

    home = _gemini_home(tmp_path)
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        gs.call("write_file", file_path=str(wt / "a.txt"), content="one\n"),
        gs.call("run_shell_command", command="echo two > b.txt"),
        gs.call("write_file", file_path=str(wt / "c.txt"), content="three\n"),
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
    assert (wt / "b.txt").exists() and (wt / "c.txt").exists()
    entries = reopen(run).entries()
    assert [e.tool_name for e in entries] == ["write_file", "run_shell_command", "write_file"]
    chats = [p for p in (Path(run.dir)).rglob("session-*.jsonl")]
    assert chats, list(Path(run.dir).rglob("*"))
    originals = {p: p.read_bytes() for p in chats}

    later = gs.call("write_file", file_path=str(wt / "d.txt"), content="four\n")
    with gs.serve([later, gs.text("All done.")]) as server:
        done = _sandbox(
            "rewind",
            run.run_id,
            "--to",
            entries[1].call_id,
            "--continue",
            cwd=repo,
            env={**os.environ, **agent_env(server, home)},
        )
        first = server.conversation()[0].body
    assert done.returncode == 0, done.stderr
    assert "forked just before call" in done.stderr
    parts = [p for c in first["contents"] for p in c.get("parts", [])]
    asked = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
    assert asked == ["write_file"]  # exactly the turns before the call
    assert "rewound this session to just before call" in "\n".join(p.get("text", "") for p in parts)
    assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists() and not (wt / "c.txt").exists()
    assert (wt / "d.txt").read_text() == "four\n"
    assert all(p.read_bytes() == data for p, data in originals.items())  # Gemini's own chat never edited
    from sandbox.agent import transcripts

    rewound = [e.data["rewind"] for _oid, e in reopen(run).events() if "rewind" in (e.data or {})]
    stored = transcripts.latest(reopen(run), rewound[0]["session"])
    assert stored is not None  # the cut copy is kept with the run, and holds the turns before the call only
    assert [name for _id, name, _args in GeminiCli().tool_calls(transcripts.load(run, stored))] == ["write_file"]

    # fork --at the first call: the new run's conversation is the chat up to just after it.
    made = _sandbox("--json", "fork", run.run_id, "--at", entries[0].call_id, cwd=repo)
    assert made.returncode == 0, made.stderr
    fork = json.loads(made.stdout)
    fork_wt = Path(fork["worktree"])
    with gs.serve([gs.call("write_file", file_path=str(fork_wt / "e.txt"), content="five\n"), gs.text("ok")]) as server:
        resumed = _sandbox("resume", fork["run"], "--continue", cwd=repo, env={**os.environ, **agent_env(server, home)})
        first = server.conversation()[0].body
    assert resumed.returncode == 0, resumed.stderr
    parts = [p for c in first["contents"] for p in c.get("parts", [])]
    assert [p["functionCall"]["name"] for p in parts if "functionCall" in p] == ["write_file"]
    assert (fork_wt / "e.txt").read_text() == "five\n" and not (fork_wt / "b.txt").exists()
