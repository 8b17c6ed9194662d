"""``sandbox mcp`` through the MCP SDK's own client, over stdio, against the real server process.

Every tool once, recorded calls checked in the ledger, a failing and a timed-out command, path
escapes refused (nothing written outside), and the two crashes: kill -9 of the client mid-call
(the server sees its pipe close, stops the command, leaves the call unfinished) and kill -9 of the
server mid-call; after either, ``sandbox resume`` reports the call uncertain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx  # the HTTP client the MCP SDK itself uses
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import sandbox
from sandbox.agent import procs
from tests import cliserver
from tests.conftest import make_repo, sandbox_cmd, user_state

SANDBOX = str(Path(sys.executable).parent / "sandbox")


@asynccontextmanager
async def connect(repo: Path, *args: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with ``sandbox mcp ARGS`` started in ``repo``."""
    command, argv = cliserver.stdio_command("mcp", *args)
    params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def serve(repo: Path, *args: str) -> Callable[[Callable[[ClientSession], Any]], Any]:
    """Run ``body(session)`` against a fresh server; returns what it returns."""

    def runner(body: Callable[[ClientSession], Any]) -> Any:
        async def main() -> Any:
            async with connect(repo, *args) as session:
                return await body(session)

        return anyio.run(main)

    return runner


def only_run(repo: Path) -> sandbox.Run:
    return sandbox.open_run(str(repo))


def test_tools_listed_with_schemas_annotations_and_instructions(repo: Path) -> None:
    async def body(s: ClientSession) -> Any:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        return tools

    tools = serve(repo)(body)
    assert set(tools) == {
        "start_run",
        "open_run",
        "list_runs",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search",
        "run_command",
        "show_log",
        "show_diff",
        "resume_report",
        "checkpoint",
        "rewind",
    }
    for name in ("read_file", "list_files", "search", "show_log", "show_diff", "list_runs"):
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint is True
    assert tools["write_file"].annotations.read_only_hint is False
    assert tools["edit_file"].input_schema["required"] == ["path", "old_string", "new_string"]
    props = tools["run_command"].input_schema["properties"]
    assert set(props) == {"command", "timeout_seconds", "idempotency", "replay"}
    assert set(props["idempotency"]["enum"]) == {"idempotent", "conditional", "non_idempotent"}
    for forbidden in ("apply", "undo", "drop"):
        assert not any(forbidden in name for name in tools)  # never from the model's side


def test_instructions_say_apply_undo_drop_stay_with_the_user(repo: Path) -> None:
    async def main() -> Any:
        command, argv = cliserver.stdio_command("mcp")
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await session.initialize()

    init = anyio.run(main)
    assert "cannot apply, undo or drop" in (init.instructions or "")


def test_every_tool_once_and_the_ledger(repo: Path) -> None:
    before = user_state(repo)

    async def body(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        r = await s.call_tool("list_runs", {})
        assert not r.is_error and r.structured_content["runs"] == []
        r = await s.call_tool("read_file", {"path": "README.md"})
        assert r.is_error and "No run is open" in text(r)
        r = await s.call_tool("start_run", {"label": "mcp-test"})
        assert not r.is_error, text(r)
        out["run"] = r.structured_content
        out["worktree"] = wt = r.structured_content["worktree"]
        r = await s.call_tool("read_file", {"path": "README.md"})
        assert text(r) == "     1\thello\n     2\tuser edit"
        r = await s.call_tool("read_file", {"path": os.path.join(wt, "README.md"), "offset": 2, "limit": 1})
        assert text(r) == "     2\tuser edit"
        r = await s.call_tool("write_file", {"path": "src/new/mod.py", "content": "A = 1\nA = 1\n"})
        assert not r.is_error and r.structured_content["changed"] is True
        out["write"] = r.structured_content["call_id"]
        r = await s.call_tool("edit_file", {"path": "src/new/mod.py", "old_string": "A = 1", "new_string": "A = 2"})
        assert r.is_error and "occurs 2 times" in text(r)
        r = await s.call_tool("edit_file", {"path": "src/new/mod.py", "old_string": "B", "new_string": "C"})
        assert r.is_error and "not found" in text(r)
        r = await s.call_tool(
            "edit_file", {"path": "src/new/mod.py", "old_string": "A = 1", "new_string": "A = 2", "replace_all": True}
        )
        assert not r.is_error and r.structured_content["replacements"] == 2
        out["edit_all"] = r.structured_content["call_id"]
        r = await s.call_tool("edit_file", {"path": "src/app.py", "old_string": "'app'", "new_string": "'mcp'"})
        assert not r.is_error
        out["edit"] = r.structured_content["call_id"]
        r = await s.call_tool("list_files", {})
        assert text(r).splitlines() == [".gitignore", "README.md", "notes.txt", "src/"]
        r = await s.call_tool("list_files", {"pattern": "*.py"})
        assert text(r).splitlines() == ["src/app.py", "src/util.py", "src/new/mod.py"]
        r = await s.call_tool("list_files", {"path": "src", "pattern": "new/*.py"})
        assert text(r).splitlines() == ["src/new/mod.py"]
        r = await s.call_tool("search", {"pattern": r"A = \d"})
        assert text(r).splitlines() == ["src/new/mod.py:1:A = 2", "src/new/mod.py:2:A = 2"]
        r = await s.call_tool("search", {"pattern": "print", "glob": "*.py"})
        assert text(r) == "src/app.py:1:print('mcp')"
        r = await s.call_tool("run_command", {"command": "echo out; echo err >&2; printf 'x\\n' > made.txt"})
        assert not r.is_error
        res = r.structured_content
        assert res["status"] == "succeeded" and res["exit_code"] == 0 and res["files_changed"] == ["made.txt"]
        assert "out" in res["output"] and "err" in res["output"]
        out["cmd"] = res["call_id"]
        r = await s.call_tool("show_log", {})
        out["log"] = text(r)
        r = await s.call_tool("show_log", {"call_id": out["cmd"]})
        assert '"exit_code": 0' in text(r)
        r = await s.call_tool("show_diff", {})
        out["diff"] = text(r)
        r = await s.call_tool("show_diff", {"call_id": out["edit"]})
        assert "+print('mcp')" in text(r) and "mod.py" not in text(r)
        r = await s.call_tool("show_diff", {"call_id": "@"})  # the CLI's call names: '@' is the last call
        assert "+x" in text(r) and "made.txt" in text(r)
        r = await s.call_tool("show_diff", {"stat_only": True})
        assert "3 files changed" in text(r)
        r = await s.call_tool(
            "checkpoint", {"label": "edits done", "step_id": "s1", "messages": [{"role": "user"}], "state": {"k": 1}}
        )
        assert not r.is_error and r.structured_content["checkpoint_id"].startswith("ckpt_")
        r = await s.call_tool("list_runs", {})
        assert [row["open"] for row in r.structured_content["runs"]] == [True]
        res_list = await s.list_resources()
        assert {str(x.uri) for x in res_list.resources} == {"sandbox://run/diff", "sandbox://run/log"}
        diff_res = await s.read_resource("sandbox://run/diff")
        assert "+print('mcp')" in diff_res.contents[0].text
        log_res = await s.read_resource(f"sandbox://runs/{out['run']['run_id']}/log")
        assert out["cmd"] in log_res.contents[0].text
        r = await s.call_tool("resume_report", {})
        assert not r.is_error and r.structured_content["uncertain"] == []
        assert r.structured_content["messages"] == [{"role": "user"}]  # the checkpoint's, given back
        assert r.structured_content["state"] == {"k": 1} and r.structured_content["last_completed_step"] == "s1"
        out["note"] = r.structured_content["note"]
        return out

    out = serve(repo)(body)
    assert user_state(repo) == before  # nothing of the user's changed
    run = only_run(repo)
    entries = {e.call_id: e for e in run.entries()}
    assert list(entries) == [out["write"], out["edit_all"], out["edit"], out["cmd"]]
    assert all(cid.startswith("mcp-") for cid in entries)
    assert [e.tool_name for e in entries.values()] == ["write_file", "edit_file", "edit_file", "run_command"]
    assert all(e.status.value == "succeeded" for e in entries.values())
    assert [f.path for f in entries[out["cmd"]].files] == ["made.txt"]
    assert entries[out["cmd"]].input["isolation"] == "bwrap, network off"
    assert out["log"].count("succeeded") == 4 and out["cmd"] in out["log"]
    assert "+A = 2" in out["diff"] and "+print('mcp')" in out["diff"]
    # What the CLI shows agrees with the tools.
    cli_diff = sandbox_cmd("diff", run.run_id, cwd=repo)
    assert cli_diff.returncode == 0 and cli_diff.stdout.decode().strip() == out["diff"].strip()
    assert Path(out["worktree"], "src/new/mod.py").read_text() == "A = 2\nA = 2\n"


def test_failing_and_timed_out_commands_are_failed_calls(repo: Path) -> None:
    async def body(s: ClientSession) -> list[dict[str, Any]]:
        a = await s.call_tool("run_command", {"command": "echo partial > p.txt; echo boom >&2; exit 3"})
        b = await s.call_tool("run_command", {"command": "echo t > t.txt; sleep 30", "timeout_seconds": 1})
        c = await s.call_tool("run_command", {"command": "head -c 100000 /dev/zero | tr '\\0' x; echo; echo END"})
        d = await s.call_tool("write_file", {"path": "src", "content": "not a directory\n"})
        assert d.is_error and "it is a directory" in text(d)
        # A failed command is a failed tool call for the client, with the same structured answer.
        assert a.is_error and b.is_error and not c.is_error
        assert '"exit_code": 3' in text(a)
        return [a.structured_content, b.structured_content, c.structured_content]

    failed, timed_out, long = serve(repo, "--new")(body)
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and failed["error"] == "exit code 3"
    assert "boom" in failed["output"] and failed["files_changed"] == ["p.txt"]
    assert timed_out["status"] == "failed" and timed_out["timed_out"] is True and timed_out["exit_code"] is None
    assert "timed out after 1 s" in timed_out["error"] and timed_out["files_changed"] == ["t.txt"]
    assert long["output_truncated"] is True and long["output"].rstrip().endswith("END") and len(long["output"]) < 31_000
    run = only_run(repo)
    by_id = {e.call_id: e for e in run.entries()}
    assert by_id[failed["call_id"]].status.value == "failed" and by_id[failed["call_id"]].error == "exit code 3"
    result = by_id[failed["call_id"]].result
    assert {k: result[k] for k in ("exit_code", "timed_out")} == {"exit_code": 3, "timed_out": False}
    assert set(result) == {"exit_code", "timed_out", "output_tail"}  # its output, kept beside (#34)
    assert by_id[timed_out["call_id"]].status.value == "failed"
    assert "timed out" in (by_id[timed_out["call_id"]].error or "")
    write = run.entries()[-1]  # a write that fails in the tool is recorded failed, with its error
    assert write.tool_name == "write_file" and write.status.value == "failed" and "it is a directory" in write.error


def test_path_escapes_are_refused_and_write_nothing_outside(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    before = user_state(repo)

    async def body(s: ClientSession) -> dict[str, str]:
        r = await s.call_tool(
            "run_command", {"command": f"ln -s {outside} out_dir && ln -s {outside}/secret.txt out_file"}
        )
        assert r.structured_content["status"] == "succeeded", r.structured_content
        answers = {}
        attempts = [
            ("read_file", {"path": "../secret.txt"}),
            ("read_file", {"path": str(outside / "secret.txt")}),
            ("read_file", {"path": "out_file"}),
            ("read_file", {"path": "out_dir/secret.txt"}),
            ("read_file", {"path": ".git/config"}),
            ("read_file", {"path": "src/../../x"}),
            ("write_file", {"path": "../escape.txt", "content": "x"}),
            ("write_file", {"path": str(outside / "new.txt"), "content": "x"}),
            ("write_file", {"path": "out_dir/new.txt", "content": "x"}),
            ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}),
            ("write_file", {"path": ".GIT/config", "content": "x"}),
            ("write_file", {"path": str(repo / "README.md"), "content": "x"}),
            ("edit_file", {"path": "out_file", "old_string": "secret", "new_string": "x"}),
            ("list_files", {"path": "out_dir"}),
            ("list_files", {"path": ".."}),
            ("search", {"pattern": "secret", "path": "out_dir"}),
        ]
        for name, args in attempts:
            r = await s.call_tool(name, args)
            answers[f"{name} {args['path']}"] = text(r) if r.is_error else "ALLOWED: " + text(r)
        return answers

    answers = serve(repo, "--new")(body)
    for attempt, answer in answers.items():
        assert not answer.startswith("ALLOWED"), (attempt, answer)
        assert "secret\n" not in answer
    assert "climbs out with '..'" in answers["read_file ../secret.txt"]
    assert "outside the worktree" in answers[f"read_file {outside / 'secret.txt'}"]
    assert "leads out of the worktree through a symlink" in answers["read_file out_file"]
    assert "symlink" in answers["write_file out_dir/new.txt"]
    assert "inside .git" in answers["write_file .git/hooks/pre-commit"]
    assert sorted(os.listdir(outside)) == ["secret.txt"] and (outside / "secret.txt").read_text() == "secret\n"
    assert user_state(repo) == before
    run = only_run(repo)
    assert [e.tool_name for e in run.entries()] == ["run_command"]  # refusals record nothing


def test_a_cancelled_command_is_stopped_and_recorded_interrupted(repo: Path) -> None:
    """notifications/cancelled (the client's user stopped it: Ctrl-C or Esc, and the client is still there):
    the command is killed and the call is interrupted with the reason and its files; the session goes on."""

    async def body(s: ClientSession) -> tuple[str, Any]:
        wt = (await s.call_tool("list_runs", {})).structured_content["runs"][0]["worktree"]
        with anyio.move_on_after(60) as scope:  # cancelled as soon as the command has started
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while not Path(wt, "started.flag").exists():
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                await s.call_tool("run_command", {"command": "touch started.flag; sleep 300; touch after.txt"})
        assert not scope.cancelled_caught  # the watcher cancelled it, not the 60 s guard
        for _ in range(200):  # the worker records the call once the command is dead
            entry = only_run(repo).entries()[-1]
            if entry.status.value != "started":
                break
            await anyio.sleep(0.05)
        after = await s.call_tool("write_file", {"path": "later.txt", "content": "still here\n"})
        return wt, (entry, after)

    wt, (entry, after) = serve(repo, "--new")(body)
    assert entry.tool_name == "run_command" and entry.status.value == "interrupted"
    assert entry.error == "cancelled by the client; the command was killed"
    assert [f.path for f in entry.files] == ["started.flag"] and not Path(wt, "after.txt").exists()
    assert not after.is_error


def _client_script(repo: Path, run_id: str, command: str) -> str:
    return f"""
import anyio, os, sys
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
async def main():
    params = StdioServerParameters(command={SANDBOX!r}, args=["mcp", "--run", {run_id!r}],
                                   env=dict(os.environ), cwd={str(repo)!r})
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        print("ready", flush=True)
        await s.call_tool("run_command", {{"command": {command!r}, "idempotency": "non_idempotent"}})
        print("returned", flush=True)
anyio.run(main)
"""


def _start_mid_call(repo: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, str, sandbox.Run]:
    """A client whose run_command is running (its marker file exists): (client, server pid, run id, run)."""
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = json.loads(started.stdout)["run"]
    run = sandbox.open_run(str(repo), run_id)
    command = "echo before > before.txt; touch started.flag; sleep 300; echo after > after.txt"
    client = subprocess.Popen(
        [sys.executable, "-c", _client_script(repo, run_id, command)],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "client.err", "wb"),  # noqa: SIM115
        cwd=repo,
    )
    flag = Path(run.worktree, "started.flag")
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert client.poll() is None, (tmp_path / "client.err").read_text()
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    servers = [p for p in procs.descendants(client.pid) if " mcp --run " in p.cmd]
    assert len(servers) == 1, procs.descendants(client.pid)
    return client, servers[0].pid, run_id, run


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while procs.start_time(pid) is not None:
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.05)


def _sleepers(run: sandbox.Run) -> list[procs.Proc]:
    return [p for p in procs.descendants(1) if "sleep 300" in p.cmd and run.worktree in _cwd(p.pid)]


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _resume_reports_uncertain(repo: Path, run: sandbox.Run) -> None:
    entry = run.entries()[-1]
    assert entry.tool_name == "run_command" and entry.status.value == "started"  # as a crash leaves it
    resumed = sandbox_cmd("resume", run.run_id, "--json", cwd=repo)
    assert resumed.returncode == 0, resumed.stderr.decode()
    report = json.loads(resumed.stdout)
    assert [u["call_id"] for u in report["uncertain"]] == [entry.call_id]
    assert entry.call_id in report["do_not_replay"]  # non_idempotent: never replayed blindly
    assert sandbox.open_run(str(repo), run.run_id).entry(entry.call_id).status.value == "uncertain"
    assert not Path(run.worktree, "after.txt").exists()  # the command was stopped, not finished


def test_client_killed_mid_call_leaves_the_call_uncertain(repo: Path, tmp_path: Path) -> None:
    client, server_pid, _run_id, run = _start_mid_call(repo, tmp_path)
    client.send_signal(signal.SIGKILL)
    client.wait()
    _wait_gone(server_pid)  # it saw its pipe close, stopped the command, and exited
    assert _sleepers(run) == []
    # Its answer to the abandoned call met a closed pipe: the end of the session, said as such, no crash.
    said = (tmp_path / "client.err").read_text()
    assert "unexpected error" not in said and "the client went away during" in said, said
    _resume_reports_uncertain(repo, run)


def test_server_killed_mid_call_leaves_the_call_uncertain(repo: Path, tmp_path: Path) -> None:
    client, server_pid, _run_id, run = _start_mid_call(repo, tmp_path)
    os.kill(server_pid, signal.SIGKILL)
    _wait_gone(server_pid)
    deadline = time.monotonic() + 30
    while _sleepers(run):  # confined: the command's sandbox dies with the server
        assert time.monotonic() < deadline, _sleepers(run)
        time.sleep(0.05)
    client.kill()
    client.wait()
    _resume_reports_uncertain(repo, run)


def test_server_killed_mid_call_unconfined_resume_finds_the_survivor(repo: Path, tmp_path: Path) -> None:
    """--isolate off: the command outlives the server; resume refuses until it is stopped."""
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = json.loads(started.stdout)["run"]
    run = sandbox.open_run(str(repo), run_id)
    script = _client_script(repo, run_id, "touch started.flag; sleep 300").replace(
        '"--run", ', '"--isolate", "off", "--run", '
    )
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    flag = Path(run.worktree, "started.flag")
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.05)
    server = next(p for p in procs.descendants(client.pid) if " mcp " in p.cmd and "sleep" not in p.cmd)
    os.kill(server.pid, signal.SIGKILL)
    client.kill()
    client.wait()
    try:
        refused = sandbox_cmd("resume", run_id, cwd=repo)
        assert refused.returncode == 1 and "running process" in refused.stderr.decode(), refused.stderr.decode()
        stopped = sandbox_cmd("resume", run_id, "--stop-processes", "--json", cwd=repo)
        assert stopped.returncode == 0, stopped.stderr.decode()
        report = json.loads(stopped.stdout)
        assert len(report["uncertain"]) == 1 and report["stopped_processes"]
    finally:
        for p in _sleepers(run):
            os.kill(p.pid, signal.SIGKILL)


def test_bad_usage_is_one_line(repo: Path) -> None:
    both = sandbox_cmd("mcp", "--new", "--run", "abc", cwd=repo)
    assert both.returncode == 2 and both.stderr.decode().count("\n") == 1 and "not both" in both.stderr.decode()
    unknown = sandbox_cmd("mcp", "--run", "nosuch", cwd=repo)
    assert unknown.returncode == 2 and unknown.stderr.decode().count("\n") == 1


@pytest.mark.parametrize("transport", ["http"])
def test_streamable_http_on_loopback(repo: Path, transport: str) -> None:
    from mcp.client.streamable_http import streamable_http_client

    # Port 0: the server binds a free port itself and announces it, so no other process can take it
    # between our choosing it and the server binding it.
    server = subprocess.Popen(
        [SANDBOX, "mcp", "--new", "--http", "0"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert server.stderr is not None
        port, token = 0, ""
        for _ in range(10):  # "serving run ...", the address, the token (bounded: the process ends or says it)
            line = server.stderr.readline().decode()
            assert line, f"the server ended: {server.wait()}"
            if "MCP server on http://127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
            if "--headers-for" in line:
                break
        # The client's header helper gets the token; it is printed nowhere and stored in no client config.
        helper = sandbox_cmd("mcp", "--headers-for", str(port), cwd=repo)
        assert helper.returncode == 0, helper.stderr
        token = json.loads(helper.stdout)["Authorization"].split("Bearer ", 1)[1]
        assert port > 0 and len(token) >= 32
        # A confined command (another run's agent with the network on could reach the port) cannot have it.
        from sandbox.cli.mcp_headers import token_path

        run_id = only_run(repo).run_id
        spy = f"cat {token_path(port)}; {SANDBOX} mcp --headers-for {port}"
        inside = sandbox_cmd("exec", run_id, "--network", "on", "--", "sh", "-c", spy, cwd=repo)
        assert token not in (inside.stdout + inside.stderr).decode(), inside.stdout
        url = f"http://127.0.0.1:{port}/mcp"

        async def main() -> Any:
            client = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                return await s.call_tool("write_file", {"path": "h.txt", "content": "over http\n"})

        result = anyio.run(main)
        assert not result.is_error, text(result)
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):  # no token, no entry
            refused = httpx.post(url, headers=header, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401, (header, refused.status_code)
        with open(f"/proc/{server.pid}/net/tcp") as fh:  # listening on 127.0.0.1 only
            listening = [ln.split() for ln in fh.readlines()[1:] if ln.split()[3] == "0A"]
        assert all(addr.startswith("0100007F:") for _sl, addr, *_ in listening if addr.endswith(f":{port:04X}"))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    entry = only_run(repo).entries()[-1]
    assert entry.tool_name == "write_file" and entry.status.value == "succeeded"


def test_http_serves_one_run_only(repo: Path) -> None:
    """Without --run or --new an HTTP server would open any run here to whoever holds its token."""
    done = subprocess.run([SANDBOX, "mcp", "--http", "0"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--run RUN or --new" in done.stderr and done.stderr.count("\n") == 1


def test_http_port_in_use_is_one_line_and_starts_no_run(repo: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [SANDBOX, "mcp", "--new", "--http", str(port)], cwd=repo, capture_output=True, text=True, timeout=60
        )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in done.stderr and "0 for a free one" in done.stderr
    assert sandbox_cmd("list", "--json", cwd=repo).stdout.strip() == b"[]"


def test_other_commands_do_not_import_the_sdk(repo: Path) -> None:
    """Only `sandbox mcp` pays for importing the MCP SDK (CLI start-up matters)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from sandbox.cli.app import cli\n"
        "for args in (['--help'], ['list'], ['mcp', '--help']):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'sandbox.mcp'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_an_unconfined_command_gets_no_mcp_bearer_token(tmp_path: Path) -> None:
    """The HTTP server's token is withheld from the model's commands, confined or not."""
    from sandbox.confine import envfilter
    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    env = {**os.environ, envfilter.MCP_TOKEN_ENV: "bearer-secret"}
    ws = Workspace(project, workdir, Settings(data_root=project.data_root, command_env=env))
    ws.start_run()
    answer = ws.run_command(f"echo token=${envfilter.MCP_TOKEN_ENV}.")
    assert "token=." in str(answer) and "bearer-secret" not in str(answer)


def test_run_command_sees_no_agent_login(repo: Path) -> None:
    """The run's agent homes hold the agents' logins (seeded from yours by 'sandbox run'): a command the
    model runs through MCP reads none of them, nor your home's."""
    from sandbox.agent import agenthome
    from sandbox.store import layout

    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    login = Path(agenthome.home_of(layout.run_dir(str(repo / ".git"), run_id), "claude")) / ".credentials.json"
    login.parent.mkdir(parents=True, exist_ok=True)
    login.write_text('{"token": "claude-login"}')
    mine = Path(os.environ["HOME"]) / ".claude" / ".credentials.json"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text('{"token": "home-login"}')

    @serve(repo, "--run", run_id)
    async def out(s: ClientSession) -> Any:
        r = await s.call_tool("run_command", {"command": f"cat {login} {mine}; true"})
        return r.structured_content

    assert "-login" not in out["output"], out["output"]


def test_a_resource_refused_says_why(repo: Path) -> None:
    """A resource's refusal is the sentence a tool would give, not the SDK's bare "Error reading resource"."""

    async def body(session: ClientSession) -> str:
        try:
            await session.read_resource("sandbox://runs/no-such-run/diff")  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - the SDK raises the server's error as McpError
            return str(exc)
        return "read"

    said = serve(repo)(body)
    assert "no-such-run" in said and "Error reading resource" not in said, said
