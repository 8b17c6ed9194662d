"""The agent's conversation stored with the run (issue #22): chunked, deduplicated, mapped, read back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.agent import sessions, transcripts
from sandbox.run.run import Run
from sandbox.store.project import Project

SESSION = "0b7c3d9e-1111-4222-8333-444455556666"


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    return Run.open(Project(run.project.common_dir), run.run_id)


def claude_lines(calls: int, start: int = 0, pad: int = 600) -> bytes:
    """A Claude Code-shaped transcript: per call, an assistant tool_use record and its user tool_result."""
    out = []
    for n in range(start, start + calls):
        tool = f"toolu_{n:06d}"
        content = [{"type": "tool_use", "id": tool, "name": "Bash", "input": {"command": "x" * pad}}]
        message = {"id": f"msg_{n}", "role": "assistant", "content": content}
        out.append({"type": "assistant", "uuid": f"a{n}", "sessionId": SESSION, "message": message})
        result = [{"type": "tool_result", "tool_use_id": tool, "content": "ok"}]
        out.append(
            {"type": "user", "uuid": f"u{n}", "sessionId": SESSION, "message": {"role": "user", "content": result}}
        )
    return b"".join(json.dumps(r).encode() + b"\n" for r in out)


def test_chunks_of_a_prefix_are_the_leading_chunks_of_what_it_grew_into() -> None:
    small = claude_lines(200)
    grown = small + claude_lines(50, start=200)
    a, b = transcripts.chunk(small), transcripts.chunk(grown)
    assert b"".join(a) == small and b"".join(b) == grown
    assert len(a) > 10 and a[:-1] == b[: len(a) - 1]  # only the last, still open, chunk differs
    assert all(len(c) <= transcripts.MAX_CHUNK for c in b)


def test_store_dedups_and_writes_only_new_bytes(repo: Path) -> None:
    run = start(repo)
    data = claude_lines(300)
    agent = sessions.ClaudeCode()
    first = transcripts.store(run, "claude-code", SESSION, data, agent.calls(data), "session end")
    assert first is not None and transcripts.load(run, first) == data
    assert transcripts.store(run, "claude-code", SESSION, data, agent.calls(data), "again") is None  # same bytes
    grown = data + claude_lines(5, start=300)
    second = transcripts.store(run, "claude-code", SESSION, grown, agent.calls(grown), "checkpoint")
    assert second is not None and transcripts.load(reopen(run), second) == grown
    records = transcripts.records(reopen(run))
    assert [r["reason"] for r in records] == ["session end", "checkpoint"]
    assert records[0]["new_bytes"] == len(data)
    new_bytes = len(grown) - len(data)
    assert new_bytes <= records[1]["new_bytes"] <= new_bytes + transcripts.MAX_CHUNK  # O(new bytes), not O(all)
    assert records[1]["new_bytes"] < len(grown) // 4
    assert transcripts.latest(reopen(run), SESSION) == second


def test_calls_map_each_tool_use_to_the_line_of_its_message() -> None:
    data = claude_lines(3)
    calls = sessions.ClaudeCode().calls(data)
    assert calls == {"toolu_000000": 0, "toolu_000001": 2, "toolu_000002": 4}


def test_fork_cuts_before_the_call_under_a_new_session_and_leaves_the_original() -> None:
    data = claude_lines(3)
    agent = sessions.ClaudeCode()
    forked = agent.fork(data, "toolu_000002", "new-session")
    records = [json.loads(line) for line in forked.splitlines()]
    assert len(records) == 4 and {r["sessionId"] for r in records} == {"new-session"}
    assert list(agent.calls(forked)) == ["toolu_000000", "toolu_000001"]
    with pytest.raises(KeyError):
        agent.fork(data, "toolu_missing", "x")


def test_find_looks_in_every_candidate_home(tmp_path: Path) -> None:
    agent = sessions.ClaudeCode()
    run_home, user_home = tmp_path / "run" / ".claude", tmp_path / "home" / ".claude"
    assert agent.find(SESSION, [str(run_home), str(user_home)]) is None
    path = Path(agent.place(str(user_home), "/w/t.x_y", SESSION))
    assert path.parent.name == "-w-t-x-y"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"{}\n")
    assert agent.find(SESSION, [str(run_home), str(user_home)]) == str(path)
    assert agent.find("../etc", [str(user_home)]) is None  # not a session id: never globbed


def test_find_takes_no_link_fifo_or_device_the_agent_left_in_its_home(tmp_path: Path) -> None:
    """The run's homes are writable inside; what is found is read outside (and kept with the run)."""
    agent = sessions.ClaudeCode()
    home = tmp_path / "run" / ".claude"
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    for cwd, target in (("/w/a", str(secret)), ("/w/b", "/dev/zero")):
        path = Path(agent.place(str(home), cwd, SESSION))
        path.parent.mkdir(parents=True)
        path.symlink_to(target)
    fifo = Path(agent.place(str(home), "/w/c", SESSION))
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    assert agent.find(SESSION, [str(home)]) is None
    gemini_chats = tmp_path / "gem" / "tmp" / "proj" / "chats"
    gemini_chats.mkdir(parents=True)
    os.mkfifo(gemini_chats / f"session-1-{SESSION[:8]}.jsonl")  # its first line would be read: never opened
    assert sessions.GeminiCli().find(SESSION, [str(tmp_path / "gem")]) is None


def test_gemini_find_takes_only_a_chat_whose_first_record_names_the_session(tmp_path: Path) -> None:
    agent = sessions.GeminiCli()
    session = "0a1b2c3d-0000-4000-8000-000000000001"
    chats = tmp_path / "gem" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    other = chats / f"session-1-{session[:8]}.jsonl"
    other.write_text(json.dumps({"sessionId": "0a1b2c3d-other"}) + "\n")  # same 8-character prefix
    assert agent.find(session, [str(tmp_path / "gem")]) is None
    mine = chats / f"session-2-{session[:8]}.jsonl"
    mine.write_text(json.dumps({"sessionId": session}) + "\n")
    assert agent.find(session, [str(tmp_path / "none"), str(tmp_path / "gem")]) == str(mine)


def test_relaunch_replaces_the_prompt_and_keeps_the_flags() -> None:
    agent = sessions.ClaudeCode()
    argv = ["claude", "-p", "Do it.", "--allowedTools", "Bash", "Edit", "--model", "m", "-r", "old", "--fork-session"]
    assert agent.relaunch(argv, "S", "NOTE", None) == [
        "claude",
        "NOTE",
        "-p",
        "--allowedTools",
        "Bash",
        "Edit",
        "--model",
        "m",
        "--resume",
        "S",
    ]
    assert sessions.for_command(["/usr/bin/claude"]) is sessions.agents()["claude-code"]
    assert sessions.for_command(["aider"]) is None


def gemini_chat(session: str, calls: list[tuple[str, str, dict[str, str]]], imported: bool = False) -> bytes:
    """A Gemini CLI 0.61-shaped chat: meta, a whole-list ``$set``, then per call its model turn twice."""
    out: list[object] = [{"sessionId": session, "kind": "main"}]
    out.append({"$set": {"messages": [{"id": "ctx", "type": "user", "content": [{"text": "context"}]}]}})
    for n, (gid, name, args) in enumerate(calls):
        turn = {"id": f"turn{n}", "type": "gemini", "content": ""}
        out += [turn, {"$set": {"lastUpdated": "t"}}]
        out.append({**turn, "toolCalls": [{"id": gid, "name": name, "args": args, "status": "success"}]})
        out.append({"id": f"resp{n}", "type": "user", "content": [{"functionResponse": {"id": gid, "name": name}}]})
    if imported:  # a continued chat restates the whole list after the imported turns
        out.append({"$set": {"messages": [{"id": "ctx"}, *({"id": f"turn{n}"} for n in range(len(calls)))]}})
    return b"\n".join(json.dumps(r).encode() for r in out) + b"\n"


def test_gemini_calls_are_found_by_tool_and_input_and_its_chat_is_cut_before_one() -> None:
    agent = sessions.GeminiCli()
    calls = [
        ("g1", "write_file", {"file_path": "a.txt"}),
        ("g2", "run_shell_command", {"command": "make"}),
        ("g3", "run_shell_command", {"command": "make"}),
        ("g4", "write_file", {"file_path": "b.txt"}),
    ]
    data = gemini_chat("0a1b2c3d-0000-4000-8000-00000000000a", calls, imported=True)
    recorded: list[tuple[str, str, object]] = [
        ("c1", "write_file", {"file_path": "a.txt"}),
        ("c2", "run_shell_command", {"command": "make"}),
        ("c3", "run_shell_command", {"command": "make"}),  # the same command twice: paired by order
        ("c4", "write_file", None),  # input kept as a blob: the tool alone pairs it
    ]
    assert [agent.own_call(data, c, recorded) for c in ("c1", "c2", "c3", "c4")] == ["g1", "g2", "g3", "g4"]
    # A call Gemini never wrote down (in flight at a crash) has no place; the others keep theirs.
    assert agent.own_call(data, "c5", [*recorded, ("c5", "run_shell_command", {"command": "x"})]) is None
    assert agent.own_call(data, "c1", [("c0", "read_file", {}), *recorded]) == "g1"
    new = "0a1b2c3d-0000-4000-8000-00000000000b"
    cut = [json.loads(line) for line in agent.fork(data, "g3", new).splitlines()]
    assert cut[0]["sessionId"] == new
    assert [c["id"] for r in cut for c in r.get("toolCalls", [])] == ["g1", "g2"]
    assert not any(r.get("id") in ("turn2", "turn3") for r in cut)
    assert agent.tool_calls(agent.fork(data, "g1", new)) == []


def test_a_session_not_shaped_as_an_id_is_never_the_one_continued(repo: Path, tmp_path: Path) -> None:
    """A forged (fetched) ledger's session becomes neither a path nor an agent argument (--resume ID)."""
    from sandbox.models import EventKind

    run = start(repo)
    with run.tool_call("Bash", {"command": "x"}, call_id="toolu_000000", agent_session=SESSION):
        pass
    forged = "--dangerously-skip-permissions"
    run.record(EventKind.note, data={"rewind": {"session": forged}}, epoch=run.state().epoch)
    transcripts.store(run, "claude-code", forged, claude_lines(1), {}, "forged")
    assert transcripts.current_session(run) == SESSION
    agent = sessions.ClaudeCode()
    assert transcripts.write_for_agent(agent, [str(tmp_path)], str(repo), "../../x", b"{}\n") is None
    assert not list(tmp_path.rglob("*.jsonl"))


def test_a_transcript_is_never_written_through_a_link_the_agent_left_in_its_home(tmp_path: Path) -> None:
    """The agent writes its home from inside its sandbox; the restored transcript is written from
    outside it: a directory turned into a link sends nothing anywhere (no transcript is placed)."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / "projects").mkdir(parents=True)
    outside.mkdir()
    cwd = "/w/tree"
    agent = sessions.agents()["claude-code"]
    dest = Path(agent.place(str(home), cwd, "0f8fad5b-d9cb-469f-a165-70867728950e"))
    dest.parent.symlink_to(outside)
    session = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert transcripts.write_for_agent(agent, [str(home)], cwd, session, b"{}\n") is None
    assert list(outside.iterdir()) == []
    dest.parent.unlink()
    assert transcripts.write_for_agent(agent, [str(home)], cwd, session, b"{}\n") == str(dest)
    assert dest.read_bytes() == b"{}\n"
