"""A command's output as evidence (issue #34, item 4): the tails of stdout and stderr kept with the call,
bounded, shown escaped by ``log --call`` and ``--json``; from ``sandbox exec`` (alone and through the
repository's host), ``sandbox mcp``'s ``run_command``, and the agents' hooks (Claude Code's Bash
``tool_response``, Gemini CLI's ``run_shell_command``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sandbox.run import output
from sandbox.run.run import Run
from tests.conftest import make_repo, sandbox_cmd
from tests.hook_fixtures import fixture, hook, payload, reopen, start_run

FAILING = "echo collected 3 items; printf '\\033[31mFAILED test_x.py::test_one\\033[0m\\n' >&2; exit 1"


def _started(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    return data["run"], Path(data["worktree"])


def _call_json(repo: Path, run_id: str, call: str) -> dict[str, Any]:
    proc = sandbox_cmd("log", run_id, "--call", call, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_exec_keeps_the_tails_of_stdout_and_stderr_and_log_shows_them_escaped(repo: Path) -> None:
    run_id, worktree = _started(repo)
    proc = sandbox_cmd("exec", "--", "sh", "-c", FAILING, cwd=worktree)
    assert proc.returncode == 1
    # The output still reaches the user as it did.
    assert proc.stdout == b"collected 3 items\n"
    assert b"\x1b[31mFAILED test_x.py::test_one" in proc.stderr
    shown = sandbox_cmd("log", run_id, "--call", "1", "--no-pager", "--no-color", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert "stdout: (18 bytes)\n  collected 3 items\n" in text
    assert "stderr: (" in text and "\\033[31mFAILED test_x.py::test_one\\033[0m" in text
    assert b"\x1b" not in shown.stdout  # the terminal escape is shown, never sent
    data = _call_json(repo, run_id, "1")
    assert data["result"]["exit_code"] == 1  # the result stays small and inline: its readers are unchanged
    assert data["output"]["stdout"]["text"] == "collected 3 items\n"
    assert data["output"]["stderr"]["text"] == "\x1b[31mFAILED test_x.py::test_one\x1b[0m\n"
    assert data["output"]["stderr"]["bytes"] == data["output"]["stderr"]["kept"] == 36


def test_the_kept_tail_is_bounded_and_says_how_much_came_before(repo: Path) -> None:
    run_id, worktree = _started(repo)
    big = "head -c 200000 /dev/zero | tr '\\0' a; echo; echo THE-END"
    proc = sandbox_cmd("exec", "--", "sh", "-c", big, cwd=worktree)
    assert proc.returncode == 0 and len(proc.stdout) == 200009  # passed through whole
    data = _call_json(repo, run_id, "1")
    out = data["output"]["stdout"]
    assert out["bytes"] == 200009 and out["kept"] == output.LIMIT == 65536
    assert out["text"].endswith("a\nTHE-END\n") and len(out["text"]) == 65536
    assert len(json.dumps(data["result"])) < 1000  # the tail is a blob beside the event, not in the result
    shown = sandbox_cmd("log", run_id, "--call", "1", "--no-pager", cwd=repo).stdout.decode()
    assert "[the first 134473 of 200009 bytes are not kept]" in shown


def test_exec_through_the_repositorys_host_keeps_the_output_too(repo: Path) -> None:
    from sandbox.agent.hosted import run_hosted
    from tests.agent.test_host import serve_in_thread

    run = start_run(repo)
    host, thread = serve_in_thread(run.project.common_dir)
    try:
        script = "head -c 70000 /dev/zero | tr '\\0' b; echo; echo to-err >&2; exit 4"
        done = run_hosted(
            run.worktree,
            run.run_id,
            ["sh", "-c", script],
            tool_name="run_command",
            idempotency="conditional",
            replay="ask",
            call_id=None,
        )
        assert done is not None and done.returncode == 4
    finally:
        host.request_stop()
        thread.join(10)
    entry = reopen(run).entries()[-1]
    kept = output.read(run, entry)
    assert set(kept) == {"stdout", "stderr"}, entry.result
    assert kept["stderr"][1] == b"to-err\n"
    tail, raw = kept["stdout"]
    assert tail["bytes"] == 70001 and tail["kept"] == 65536 and raw.endswith(b"b\n")  # the total travelled too
    assert entry.result["exit_code"] == 4 and "stdout" not in entry.result


def test_mcp_run_command_keeps_its_output(tmp_path: Path) -> None:
    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    assert ws.run is not None
    answer = ws.run_command("echo one; echo two >&2; exit 2")
    assert answer.exit_code == 2
    entry = Run.open(ws.run.project, ws.run.run_id).entries()[-1]
    kept = output.read(ws.run, entry)
    assert set(kept) == {"output"} and kept["output"][1] == b"one\ntwo\n"  # one pipe: both streams in order


def test_claude_codes_bash_output_is_kept_from_its_tool_response(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    hook("claude-code", payload("Bash", "pre", wt))
    response = {"stdout": "x" * 70_000 + "\nlast line\n", "stderr": "warning: \u202egnp.exe\n", "interrupted": False}
    post = payload("Bash", "post", wt, tool_response=response)
    assert hook("claude-code", post).exit_code == 0
    entry = reopen(run).entries()[0]
    kept = output.read(run, entry)
    assert kept["stdout"][0]["bytes"] == 70_011 and kept["stdout"][1].endswith(b"\nlast line\n")
    assert entry.result == {
        "interrupted": False,
        output.KEY: {name: dict(t) for name, (t, _raw) in kept.items()},
    }  # the rest of the response as it was; before, a response this big was dropped whole
    shown = sandbox_cmd("log", run.run_id, "--call", "1", "--no-pager", cwd=repo).stdout.decode()
    assert "warning: \\u202egnp.exe" in shown and "\u202e" not in shown  # a bidi override is shown, not obeyed


def test_geminis_shell_output_is_kept_from_its_after_tool(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    doc = fixture("gemini", "run_shell_command", wt)
    env = {**os.environ}
    for which in ("before", "after"):
        raw = json.dumps(doc[which]).encode()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "sandbox"), "hook", "gemini"], input=raw, capture_output=True, env=env
        )
        assert proc.returncode == 0, proc.stderr
    entry = reopen(run).entries()[0]
    kept = output.read(run, entry)
    assert b"Output: (empty)" in kept["output"][1]


def test_the_hook_side_bounds_the_same_streams_as_the_recorder_keeps() -> None:
    from sandbox.agent import hookproto

    assert set(hookproto.OUTPUT_KEYS) == set(output.TEXTS) and hookproto.OUTPUT_LIMIT == output.LIMIT


def test_stdout_and_stderr_to_one_place_stay_in_order_and_are_kept_as_one_stream(repo: Path) -> None:
    run_id, worktree = _started(repo)
    exe = str(Path(sys.executable).parent / "sandbox")
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done"
    env = {**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"}
    proc = subprocess.run(
        [exe, "exec", "--", "sh", "-c", script], cwd=worktree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert proc.returncode == 0
    lines = proc.stdout.decode().splitlines()
    assert lines[:6] == ["out1", "err1", "out2", "err2", "out3", "err3"]  # as the terminal would show them
    data = _call_json(repo, run_id, "1")
    assert set(data["output"]) == {"output"} and data["output"]["output"]["text"] == "\n".join(lines[:6]) + "\n"


def test_one_channel_for_both_streams_is_kept_through_the_host_too(repo: Path) -> None:
    """Issue 34 item 4: through the host, output sent to one place (``>log 2>&1``, a terminal) was
    recorded as a plain "output" text in the result, never as its tail: ``log --call`` showed nothing."""
    from tests.agent.test_host import serve_in_thread

    run = start_run(repo)
    run_id, worktree = run.run_id, run.worktree
    host, thread = serve_in_thread(run.project.common_dir)
    try:
        exe = str(Path(sys.executable).parent / "sandbox")
        script = "echo out1; echo err1 >&2"
        env = {**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"}
        proc = subprocess.run(
            [exe, "exec", "--", "sh", "-c", script],
            cwd=worktree,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        assert proc.returncode == 0, proc.stdout
    finally:
        host.request_stop()
        thread.join(10)
    data = _call_json(repo, run_id, "1")
    assert data["result"].get("output_tail"), data["result"]
    assert set(data["output"]) == {"output"} and data["output"]["output"]["text"] == "out1\nerr1\n"
    assert "output" not in data["result"] and "sandbox_output" not in data["result"]
