"""What of a recorded agent command line may run again, and a conversation forked only where asked.

A command line recorded in another clone (a fetched run) keeps only the options its adapter lists in
``CARRY_OVER``, with a value it allows; everything else is dropped and named. ``fork_conversation``
refuses a call that is not the source run's, or not in its conversation, instead of copying it whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.agent import adapters, sessions, transcripts
from sandbox.run.run import Run
from sandbox.runs.many import fork
from sandbox.store.project import Project
from tests.agent.test_transcripts import SESSION, claude_lines
from tests.conftest import sandbox_cmd


def test_claude_code_keeps_model_and_output_choices_only() -> None:
    argv = ["/tmp/x/claude-2.1", "-p", "Do it.", "--model", "opus", "--output-format=json", "--verbose"]
    argv += ["--mcp-config", "a.json", "b.json", "--settings", "s.json", "--dangerously-skip-permissions"]
    argv += ["--add-dir", "/", "--permission-mode", "bypassPermissions", "--debug-file", "/tmp/d", "-r", "OLD"]
    line, dropped = sessions.ClaudeCode().carried(argv, "/usr/bin/claude")
    assert sessions.ClaudeCode().relaunch(line, "S", "NOTE", None) == [
        "/usr/bin/claude",
        "NOTE",
        "-p",
        "--model",
        "opus",
        "--output-format=json",
        "--verbose",
        "--resume",
        "S",
    ]
    assert dropped == [
        "--mcp-config a.json b.json",
        "--settings s.json",
        "--dangerously-skip-permissions",
        "--add-dir /",
        "--permission-mode bypassPermissions",
        "--debug-file /tmp/d",
    ]


def test_gemini_and_codex_drop_what_loads_code_or_widens_their_sandbox() -> None:
    gemini = sessions.GeminiCli()
    argv = ["gemini", "-m", "pro", "--yolo", "-e", "evil", "--include-directories", "/", "-p", "Do it."]
    line, dropped = gemini.carried(argv, "/usr/bin/gemini")
    assert gemini.relaunch(line, None, "NOTE", None) == ["/usr/bin/gemini", "-m", "pro", "-p", "NOTE"]
    assert dropped == ["--yolo", "-e evil", "--include-directories /"]
    codex = sessions.Codex()
    argv = ["codex", "exec", "-m", "gpt", "-c", "mcp_servers.x.command=sh", "-s", "danger-full-access"]
    argv += ["--dangerously-bypass-approvals-and-sandbox", "--disable", "plugins", "-a", "never", "Do it."]
    line, dropped = codex.carried(argv, "/usr/bin/codex")
    assert codex.relaunch(line, "S", "NOTE", None) == [
        "/usr/bin/codex",
        "exec",
        "-m",
        "gpt",
        "--disable",
        "plugins",
        "resume",
        "S",
        "NOTE",
    ]
    assert dropped == [
        "-c mcp_servers.x.command=sh",
        "-s danger-full-access",
        "--dangerously-bypass-approvals-and-sandbox",
        "-a never",
    ]


def test_every_carried_option_is_parsed_as_its_adapter_lists_it() -> None:
    """An option listed with values takes one (the parser knows it so); one listed without takes none."""
    for name, agent in sessions.agents().items():
        safe = adapters.agent(name).CARRY_OVER
        assert safe, name
        for option, values in safe.items():
            takes = option in agent.VALUE
            assert takes == bool(values), (name, option)
            assert option not in agent.VARIADIC | agent.OPTIONAL, (name, option)


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def with_conversation(repo: Path, home: Path) -> Run:
    """A run whose agent (claude) made two calls, its transcript stored with the run."""
    run = start(repo)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": ""})
    for n in range(2):
        call = run.start_call("Bash", {"command": "x" * 600}, call_id=f"toolu_{n:06d}", agent_session=SESSION)
        run.finish_call(call, "succeeded", paths=[])
    data = claude_lines(2)
    transcripts.store(run, "claude-code", SESSION, data, sessions.ClaudeCode().calls(data), "session end")
    call = run.start_call("exec", {"argv": ["true"]}, call_id="call_outside")  # no tool use of the conversation
    run.finish_call(call, "succeeded", paths=[])
    return run


def test_fork_conversation_refuses_a_call_it_does_not_hold_instead_of_copying_it_whole(
    repo: Path, tmp_path: Path
) -> None:
    source = with_conversation(repo, tmp_path)
    homes = {"claude-code": [str(tmp_path / "home" / ".claude")]}
    target = fork(source)
    for at in ("NOPE", "call_outside"):
        with pytest.raises(transcripts.ForkError) as refused:
            transcripts.fork_conversation(source, target, at, homes)
        assert "was not forked" in refused.value.message and "\n" not in refused.value.message
    assert transcripts.records(target) == [] and transcripts.agent_command(target) is None  # nothing copied
    new = transcripts.fork_conversation(source, target, "#1", homes)  # any name 'log' accepts
    assert new is not None
    stored = transcripts.latest(target, new)
    assert stored is not None and list(stored.index.calls) == ["toolu_000000"]  # cut after call #1


def test_fork_at_an_unknown_call_forks_nothing(repo: Path) -> None:
    source = with_conversation(repo, repo)
    listed = sandbox_cmd("list", "--json", cwd=repo)
    done = sandbox_cmd("fork", source.run_id, "--at", "NOPE", cwd=repo)
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert len(json.loads(sandbox_cmd("list", "--json", cwd=repo).stdout)) == len(json.loads(listed.stdout))


@pytest.mark.parametrize("words", [["--model", "opus\n"], ["--model=opus\n"], ["--output-format", "json\n"]])
def test_a_carried_value_with_a_trailing_newline_is_dropped(words: list[str]) -> None:
    """A plain word is the whole value: a regular expression's ``$`` also matches before a final
    newline, which let ``opus\\n`` through as a model name."""
    line, dropped = sessions.ClaudeCode().carried(["claude", "-p", *words, "go"], "/usr/bin/claude")
    assert line == ["/usr/bin/claude", "-p", "go"]
    assert dropped == [" ".join(words)]


def test_codex_keeps_only_features_whose_disabling_takes_something_away() -> None:
    """Codex's features include approvals (``write_stdin_approval``, ``guardian_approval``) and its
    guard against injected tool output: a fetched record turning those off must not be kept."""
    argv = ["codex", "exec", "--disable", "write_stdin_approval", "--disable=guardian_approval"]
    argv += ["--disable", "untrusted_as_tool_output", "--disable", "plugins", "--disable=apps", "go"]
    line, dropped = sessions.Codex().carried(argv, "/usr/bin/codex")
    assert line == ["/usr/bin/codex", "exec", "--disable", "plugins", "--disable=apps", "go"]
    assert dropped == [
        "--disable write_stdin_approval",
        "--disable=guardian_approval",
        "--disable untrusted_as_tool_output",
    ]


def test_a_stored_conversation_that_cannot_be_cut_forks_the_files_and_says_so(repo: Path) -> None:
    """A stored index naming a tool use its transcript lacks (a fetched run's is anybody's text): the
    files are forked, the conversation is not, and ``fork`` says so in one line (it was a traceback)."""
    run = start(repo)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": ""})
    call = run.start_call("Bash", {"command": "true"}, call_id="toolu_000000", agent_session=SESSION)
    run.finish_call(call, "succeeded", paths=[])
    data = claude_lines(1)
    index = {**sessions.ClaudeCode().calls(data), "toolu_ghost": 10**6}
    transcripts.store(run, "claude-code", SESSION, data, index, "session end")
    done = sandbox_cmd("fork", run.run_id, "--at", "toolu_000000", cwd=repo)
    err = done.stderr.decode()
    assert done.returncode == 0 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "was not forked" in err, err
