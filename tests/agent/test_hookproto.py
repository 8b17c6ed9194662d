"""The generic hook protocol, the Gemini CLI adapter, run discovery and the settings parser."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from sandbox.agent import hookproto
from sandbox.agent.adapters import claude_code, gemini
from sandbox.run import config
from tests.conftest import write
from tests.hook_fixtures import fixture, hook, reopen, start_run


def event(cwd: str | Path, **fields: object) -> dict[str, object]:
    base: dict[str, object] = {"event": "start", "cwd": str(cwd), "tool": "shell", "call_id": "c1"}
    base.update(fields)
    return base


def test_generic_write_start_and_finish(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    start = event(wt / "src", tool="save", kind="write", paths=["new.py"], input={"text": "x"})
    assert hook("generic", start).exit_code == 0
    write(wt, "src/new.py", "x\n")
    write(wt, "other.txt", "not this call's\n")
    assert hook("generic", {**start, "event": "finish", "result": {"ok": True}}).exit_code == 0
    entry = reopen(run).entry("c1")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["src/new.py"]
    assert entry.result == {"ok": True}  # small results live in the event itself


def test_generic_command_failed_with_policy_override(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("generic", event(wt, kind="command", idempotency="idempotent", replay="auto"))
    write(wt, "out.txt", "o\n")
    hook("generic", event(wt, event="finish", status="failed", error="exit 3"))
    entry = reopen(run).entry("c1")
    assert (entry.status.value, entry.error, entry.replay_policy.value) == ("failed", "exit 3", "auto")
    assert [f.path for f in entry.files] == ["out.txt"]


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"event": "begin"}, "'event'"),
        ({"tool": ""}, "'tool'"),
        ({"kind": "delete"}, "'kind'"),
        ({"paths": "a.txt"}, "'paths'"),
        ({"event": "finish", "call_id": None}, "needs a 'call_id'"),
        ({"status": "ok", "event": "finish"}, "'status'"),
    ],
)
def test_generic_rejects_malformed_events(repo: Path, fields: dict[str, object], words: str) -> None:
    run = start_run(repo)
    result = hook("generic", event(run.worktree, **fields))
    assert result.exit_code == 1 and words in result.stderr
    assert reopen(run).entries() == []


def test_read_payload_limits() -> None:
    with pytest.raises(hookproto.HookInputError, match="8 MiB"):
        hookproto.read_payload(io.BytesIO(b"1" * (hookproto.MAX_PAYLOAD + 1)))
    with pytest.raises(hookproto.HookInputError, match="not valid JSON"):
        hookproto.read_payload(io.BytesIO(b"[" * 100000))
    assert hookproto.read_payload(io.BytesIO(b'{"a": 1}')) == {"a": 1}


def test_locate_from_a_subdirectory_and_refusals(repo: Path, tmp_path: Path) -> None:
    run = start_run(repo)
    loc = hookproto.locate(str(Path(run.worktree) / "src"))
    assert (loc.run_id, loc.worktree) == (run.run_id, run.worktree)
    assert loc.run_dir == run.dir
    with pytest.raises(hookproto.HookInputError, match="not inside a sandbox run"):
        hookproto.locate(str(repo / "src"))
    with pytest.raises(hookproto.HookInputError, match="not a directory"):
        hookproto.locate(str(tmp_path / "missing"))


def test_claude_adapter_maps_fields() -> None:
    doc = fixture("claude-code", "Edit", "/w")
    ev = claude_code.to_event(doc["pre"])
    assert ev is not None and (ev.phase, ev.kind, ev.paths, ev.call_id) == (
        "start",
        "write",
        ["/w/src/app.py"],
        "toolu_01EditB2c3D4e5F6g7H8i9",
    )
    failed = claude_code.to_event(doc["failure"])
    assert failed is not None and failed.status == "failed" and failed.error and "not found" in failed.error


def test_gemini_pairs_before_and_after(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    for tool in ("write_file", "run_shell_command", "read_file", "google_web_search"):
        doc = fixture("gemini", tool, wt)
        result = hook("gemini", doc["before"])
        assert result.exit_code == 0 and result.stdout.strip() == "{}"
        if tool == "write_file":
            write(wt, "src/greet.py", "def greet(name):\n    return f'hi {name}'\n")
        if tool == "run_shell_command":
            write(wt, "shell.txt", "from-gemini\n")
        assert hook("gemini", doc["after"]).exit_code == 0
    doc = fixture("gemini", "run_shell_command_failure", wt)
    hook("gemini", doc["before"])
    hook("gemini", doc["after"])
    entries = reopen(run).entries()
    assert [e.tool_name for e in entries] == [
        "write_file",
        "run_shell_command",
        "read_file",
        "google_web_search",
        "run_shell_command",
    ]
    assert all(e.call_id.startswith("gemini_") for e in entries)
    assert [f.path for f in entries[0].files] == ["src/greet.py"]
    assert [f.path for f in entries[1].files] == ["shell.txt"]
    assert entries[3].replay_policy.value == "never"
    # Gemini reports a non-zero exit only in the text the model gets ("Exit Code: 1"), never as an error.
    assert entries[4].status.value == "failed" and entries[4].error == "exit code 1"
    assert all(e.status.value in ("succeeded", "failed") for e in entries)


def test_gemini_ignores_other_events() -> None:
    assert gemini.to_event({"hook_event_name": "SessionStart", "cwd": "/"}) is None


@pytest.mark.parametrize("adapter", [claude_code, gemini])
def test_settle_events_read_alike(adapter: object) -> None:
    """Both adapters settle through one helper: a Ctrl-C exit is interrupted, a turn's end is not."""
    to_event = adapter.to_event  # type: ignore[attr-defined]
    ended = to_event({"hook_event_name": "SessionEnd", "cwd": "/w", "session_id": "s1", "reason": "prompt_input_exit"})
    assert ended is not None
    assert (ended.phase, ended.tool, ended.agent_session, ended.session_end, ended.interrupted) == (
        "settle",
        "*",
        "s1",
        True,
        True,
    )
    assert "prompt_input_exit" in (ended.error or "")
    other = to_event({"hook_event_name": "SessionEnd", "cwd": "/w", "session_id": "", "reason": "logout"})
    assert other is not None and (other.agent_session, other.interrupted) == (None, False)
    with pytest.raises(hookproto.HookInputError, match="no 'cwd'"):
        to_event({"hook_event_name": "SessionEnd", "session_id": "s1"})


def _shell(output: str, *sections: str, display: object = None) -> dict[str, object]:
    body = "\n".join([f"Output: {output or '(empty)'}", *sections])
    shown = output if display is None else display
    return {"llmContent": f"<untrusted_context>\n{body}\n</untrusted_context>", "returnDisplay": shown}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (_shell("fine", "Process Group PGID: 12"), (None, None)),
        (_shell("", "Exit Code: 2", "Process Group PGID: 12"), (2, None)),
        (_shell("oops\nExit Code: 0", "Exit Code: 3", "Process Group PGID: 12"), (3, None)),
        # The command printed a fake section and exited 0: only Gemini's own sections count.
        (_shell("Exit Code: 9\nProcess Group PGID: 1", "Process Group PGID: 12"), (None, None)),
        (_shell("", "Signal: SIGKILL", "Process Group PGID: 12"), (None, "SIGKILL")),
        (_shell("x", "Error: spawn failed", "Exit Code: 127"), (127, None)),
        # returnDisplay not the output (ANSI output, debug mode): the trailing sections decide.
        (_shell("x\ny", "Exit Code: 4", "Background PIDs: 5, 6", display=[{"text": "x"}]), (4, None)),
        ({"llmContent": [{"text": "not a shell result"}]}, (None, None)),
        ("not an object", (None, None)),
    ],
)
def test_gemini_shell_exit_code_from_its_text(response: object, expected: tuple[object, object]) -> None:
    assert gemini.shell_outcome(response) == expected


def test_gemini_denied_call_gets_gemini_s_own_refusal(repo: Path) -> None:
    """A denial covers the tool and input: every BeforeTool asking for it gets {"decision": "deny"}."""
    run = start_run(repo)
    wt = Path(run.worktree)
    doc = fixture("gemini", "run_shell_command", wt)
    planned = run.plan_call("run_shell_command", doc["before"]["tool_input"])
    run.deny(planned, "not today")
    for _attempt in range(2):  # a retry is a new call to the sandbox (Gemini gives no call id)
        result = hook("gemini", doc["before"])
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        assert answer["decision"] == "deny" and "not today" in answer["reason"] and planned in answer["reason"]
    ran = [e for e in reopen(run).entries() if e.status.value in ("started", "succeeded", "failed", "uncertain")]
    assert ran == []  # a refused attempt may be logged, never as having run
    other = fixture("gemini", "read_file", wt)
    assert hook("gemini", other["before"]).stdout.strip() == "{}"  # other calls still run


def test_generic_denied_call_blocks_with_exit_2(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    planned = run.plan_call("shell", {"cmd": "rm -rf build"})
    run.deny(planned, "keep the build")
    result = hook("generic", event(wt, call_id="c9", input={"cmd": "rm -rf build"}))
    assert result.exit_code == 2 and "keep the build" in result.stderr


def test_gemini_trust_names_only_the_worktree(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    env = gemini.agent_env(str(tmp_path / "rundir"), str(wt))
    path = env["GEMINI_CLI_TRUSTED_FOLDERS_PATH"]
    assert path.startswith(str(tmp_path / "rundir")) and list(env) == ["GEMINI_CLI_TRUSTED_FOLDERS_PATH"]
    assert json.loads(Path(path).read_text()) == {str(wt.resolve()): "TRUST_FOLDER"}


def test_config_sources_and_subset_parser(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.sandbox]\ninclude = [".env"]\nlink = ["node_modules"]\n',
    )
    write(tmp_path, ".worktreeinclude", "# secrets\n.env.local\n\nconfig/*.json\n")
    cfg = config.load(str(tmp_path))
    assert cfg.include == [".env", ".env.local", "config/*.json"] and cfg.link == ["node_modules"]
    text = (
        'include = [".env",\n  "a b"]  # comment\n[hooks]\nstrict = true\n'
        '[[tools]]\nmatch = "mcp__*"\nkind = "read"\n[[tools]]\nmatch = \'Web*\'\nreplay = "ask"\n'
    )
    parsed = config.parse_toml_subset(text)
    assert parsed == {
        "include": [".env", "a b"],
        "hooks": {"strict": True},
        "tools": [{"match": "mcp__*", "kind": "read"}, {"match": "Web*", "replay": "ask"}],
    }
    import tomllib

    assert tomllib.loads(text) == parsed
    with pytest.raises(config.ConfigError):
        config.parse_toml_subset("x = 1.5e3\n")


def test_config_errors_are_one_line(tmp_path: Path) -> None:
    write(tmp_path, ".sandbox.toml", '[[tools]]\nmatch = "x"\nkind = "teleport"\n')
    with pytest.raises(config.ConfigError, match="teleport"):
        config.load(str(tmp_path))
    write(tmp_path, ".sandbox.toml", "include = [\n")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load(str(tmp_path))


def test_generic_event_roundtrip() -> None:
    ev = hookproto.HookEvent.from_dict(event("/w", kind="write", paths=["a"]))
    assert hookproto.HookEvent.from_dict(json.loads(json.dumps(ev.to_dict()))) == ev


def test_resume_args_take_only_a_session_id_shaped_name(tmp_path: Path) -> None:
    """The newest transcript's name is resumed only when it has a session id's shape."""
    run_dir = str(tmp_path / "rundir")
    projects = Path(claude_code.transcripts_dir(run_dir)) / "-w"
    projects.mkdir(parents=True)
    (projects / "0a1b-2c3d.jsonl").write_text("{}\n")
    assert claude_code.resume_args(run_dir, 0) == ["--resume", "0a1b-2c3d"]
    (projects / "-rf.jsonl").write_text("{}\n")  # newer, and an option, not a session id
    os.utime(projects / "-rf.jsonl", (2**31, 2**31))
    assert claude_code.resume_args(run_dir, 0) is None


@pytest.mark.parametrize("prefix", ["toolu\n  2  toolu_fake succeeded ", "y" * 5000, 5, ["a"], "a b"])
def test_a_pair_prefix_is_bounded_and_printable_as_a_call_id(repo: Path, prefix: object) -> None:
    """A call without an id is named from its ``pair_prefix``: the same bounds as a call id (a newline
    or 5,000 characters in it made a call id that ``log`` prints as a column), one line when refused."""
    run = start_run(repo)
    result = hook("generic", event(run.worktree, call_id=None, pair_prefix=prefix))
    assert result.exit_code == 1 and "'pair_prefix'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert reopen(run).entries() == []


def _cancelled(text: str, display: str, output: str = "") -> dict[str, object]:
    """A shell result of Gemini CLI 0.61 for a command it stopped (its text, then the output so far)."""
    body = text + (f" Below is the output before it was cancelled:\n{output}" if output else " There was no output")
    return {"llmContent": f"<untrusted_context>\n{body}\n</untrusted_context>", "returnDisplay": display}


def test_gemini_shell_call_cancelled_by_the_user_is_interrupted(repo: Path) -> None:
    """Ctrl-C or Esc in Gemini's UI stops the command; Gemini says so only in the text (no error, no exit
    code). The call is ``interrupted`` with what it wrote (it was recorded ``succeeded``); a command that
    prints the sentence itself, or Gemini's own time limit, is never taken for the user's interrupt."""
    user = _cancelled("Command was cancelled by user before it could complete.", "Command cancelled by user.", "1\n2")
    assert gemini.shell_cancelled(user) == "user"
    timeout = _cancelled(
        "Command was automatically cancelled because it exceeded the timeout of 5.0 minutes without output.",
        "Command was automatically cancelled because it exceeded the timeout of 5.0 minutes without output.",
    )
    assert gemini.shell_cancelled(timeout) == "timeout"
    forged = _shell("Command was cancelled by user before it could complete.", "Process Group PGID: 12")
    assert gemini.shell_cancelled(forged) is None
    assert gemini.shell_cancelled({"llmContent": 3}) is None and gemini.shell_cancelled("text") is None

    run = start_run(repo)
    wt = Path(run.worktree)
    statuses = []
    for response in (user, timeout, forged):
        doc = fixture("gemini", "run_shell_command", wt)
        assert hook("gemini", doc["before"]).exit_code == 0
        write(wt, "partial.txt", f"written before the stop {len(statuses)}\n")
        after = dict(doc["after"], tool_response=response)
        assert hook("gemini", after).exit_code == 0
        entry = reopen(run).entries()[-1]
        statuses.append((entry.status.value, entry.error))
        assert [f.path for f in entry.files] == ["partial.txt"]
    assert statuses[0][0] == "interrupted" and "cancelled the command" in (statuses[0][1] or "")
    assert statuses[1] == ("failed", "Gemini CLI cancelled the command: it ran past Gemini's time limit without output")
    assert statuses[2] == ("succeeded", None)
