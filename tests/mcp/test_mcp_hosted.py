"""``sandbox mcp`` inside the sandbox of ``sandbox run`` records its calls through the repository's host.

The server is started as Codex starts it under ``sandbox run RUN -- AGENT`` (default isolation):
a real bubblewrap-confined process whose run directory and ledger are read-only, driven by the MCP
SDK's own client over stdio through ``sandbox run``. Its tools write the worktree and run commands
right where it is (no sandbox nested in the sandbox); the repository's host records every call:
``started`` before the tool acts, the finish with the written path or the watcher's paths, under the
client's ``_meta`` call and session ids, a policy's refusal recorded ``not_run`` with nothing done.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from sandbox.models import CallStatus
from tests.agents.claude_harness import cli_start, stop_services
from tests.conftest import tree_digest
from tests.hook_fixtures import reopen

SANDBOX = str(Path(sys.executable).parent / "sandbox")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


@asynccontextmanager
async def confined_server(repo: Path, run_id: str) -> AsyncIterator[ClientSession]:
    """An SDK client session with ``sandbox run RUN -- sandbox mcp --new`` (the README's Codex command)."""
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_RUN"}
    params = StdioServerParameters(
        command=SANDBOX, args=["run", run_id, "--", SANDBOX, "mcp", "--new"], env=env, cwd=str(repo)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def test_confined_server_records_every_call_through_the_host(repo: Path) -> None:
    (repo / ".sandbox.toml").write_text('[[tools]]\nmatch = "edit_file"\ndeny = "no edits in this test"\n')
    before = tree_digest(repo)
    run = cli_start(repo)
    wt = Path(run.worktree)
    session = "codex-session-1"
    probe = f"cat /proc/1/comm; touch {run.dir}/forged 2>/dev/null || echo ledger-read-only; echo hi > b.txt"

    async def body(s: ClientSession) -> dict[str, Any]:
        def meta(call: str) -> dict[str, Any]:
            return {"callId": call, "sessionId": session}

        out: dict[str, Any] = {}
        out["write"] = await s.call_tool("write_file", {"path": "src/a.txt", "content": "one\n"}, meta=meta("call_w"))
        out["edit"] = await s.call_tool(
            "edit_file", {"path": "src/a.txt", "old_string": "one", "new_string": "two"}, meta=meta("call_e")
        )
        args = {"command": probe, "idempotency": "idempotent"}
        out["cmd"] = await s.call_tool("run_command", args, meta=meta("call_c"))
        out["fail"] = await s.call_tool("run_command", {"command": "echo x > c.txt; exit 3"}, meta=meta("call_f"))
        out["checkpoint"] = await s.call_tool("checkpoint", {"label": "here"})
        return out

    async def main() -> dict[str, Any]:
        async with confined_server(repo, run.run_id) as s:
            return await body(s)

    got = anyio.run(main)
    write, edit, cmd, fail, ckpt = (got[k] for k in ("write", "edit", "cmd", "fail", "checkpoint"))
    assert not write.is_error and write.structured_content["call_id"] == "call_w", _text(write)
    assert edit.is_error and "no edits in this test" in _text(edit), _text(edit)
    answer = cmd.structured_content
    assert not cmd.is_error and answer["status"] == "succeeded", answer
    # Confined (bubblewrap is PID 1 of its namespace: the command ran in the server's sandbox, not a
    # nested one), the run's directory read-only there, and the call's file found by the host.
    assert answer["output"].split() == ["bwrap", "ledger-read-only"], answer
    assert answer["files_changed"] == ["b.txt"], answer
    assert fail.is_error and fail.structured_content["exit_code"] == 3, _text(fail)
    assert ckpt.is_error and "sandbox checkpoint" in _text(ckpt) and "\n" not in _text(ckpt).strip(), _text(ckpt)

    entries = {e.call_id: e for e in reopen(run).entries()}
    w, e, c, f = (entries[k] for k in ("call_w", "call_e", "call_c", "call_f"))
    assert (w.status, [x.path for x in w.files], w.summary) == (CallStatus.succeeded, ["src/a.txt"], "write src/a.txt")
    assert e.status == CallStatus.not_run and "no edits in this test" in (e.error or "")
    assert (c.status, [x.path for x in c.files], c.idempotency.value) == (CallStatus.succeeded, ["b.txt"], "idempotent")
    assert c.summary == probe
    assert f.status == CallStatus.failed and f.error == "exit code 3" and [x.path for x in f.files] == ["c.txt"]
    assert {x.agent_session for x in (w, e, c, f)} == {session}
    assert (wt / "src/a.txt").read_text() == "one\n"  # the refused edit did nothing
    assert not (Path(run.dir) / "forged").exists()
    assert tree_digest(repo) == before  # the user's tree untouched until apply


def _client_script(repo: Path, run_id: str, command: str) -> str:
    return f"""
import anyio, os
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
async def main():
    params = StdioServerParameters(command={SANDBOX!r}, args=["run", {run_id!r}, "--", {SANDBOX!r}, "mcp", "--new"],
                                   env=dict(os.environ), cwd={str(repo)!r})
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        await s.call_tool("run_command", {{"command": {command!r}}}, meta={{"callId": "call_long"}})
anyio.run(main)
"""


def test_client_killed_mid_command_leaves_the_call_uncertain(repo: Path, tmp_path: Path) -> None:
    """The client dies while the confined server's command runs: the server stops the command and
    leaves the call ``started``, as a crash leaves it (the unconfined server does the same), and
    ``sandbox resume`` reports it uncertain."""
    import signal
    import subprocess
    import time

    from sandbox.agent import procs

    run = cli_start(repo)
    wt = Path(run.worktree)
    command = "echo before > before.txt; touch started.flag; sleep 300; echo after > after.txt"
    client = subprocess.Popen(
        [sys.executable, "-c", _client_script(repo, run.run_id, command)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "client.err", "wb"),  # noqa: SIM115
        cwd=repo,
    )
    deadline = time.monotonic() + 60
    while not (wt / "started.flag").exists():
        assert client.poll() is None, (tmp_path / "client.err").read_text()
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    below = procs.descendants(client.pid)
    client.send_signal(signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 60
    while any(procs.start_time(p.pid) is not None for p in below):  # sandbox run, the server, the command
        assert time.monotonic() < deadline, [p.cmd for p in below if procs.start_time(p.pid) is not None]
        time.sleep(0.05)
    assert reopen(run).entry("call_long").status == CallStatus.started
    assert not (wt / "after.txt").exists()  # the command was stopped, not finished
    resumed = subprocess.run([SANDBOX, "resume", run.run_id, "--json"], cwd=repo, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert [u["call_id"] for u in json.loads(resumed.stdout)["uncertain"]] == ["call_long"]
    assert reopen(run).entry("call_long").status == CallStatus.uncertain
