"""``sandbox mcp`` against a model that plants traps with its own ``run_command`` first.

The MCP server is not confined (the commands it runs are, and so is the git of its search): a tool that
opens what the model planted in the worktree or the run's git dir must neither hang (a FIFO), nor read
outside, nor run anything. Each answer must come back within a bound, as a tool error or a result, and the session
must go on answering.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests import cliserver, fifo_swap
from tests.conftest import user_state

SANDBOX = str(Path(sys.executable).parent / "sandbox")
#: Seconds one tool call may take here (each takes well under a second when nothing hangs).
LIMIT = 20
#: What the option-injection trap would make if git ran it (unique: a /tmp/x of the machine's own is not ours).
MARK = os.path.join(tempfile.gettempdir(), f"sandbox-trap-{secrets.token_hex(6)}")

TRAPS = {
    "fifo-gitignore": ("mkfifo .gitignore", "search", {"pattern": "app"}),
    "fifo-nested-gitignore": ("mkfifo src/.gitignore", "search", {"pattern": "app", "path": "src"}),
    # The run's git config is read-only inside; the agent's global one is its own (and the search's git reads it).
    "fifo-excludesfile": (
        'mkfifo x.fifo && git config --global core.excludesFile "$PWD/x.fifo"',
        "search",
        {"pattern": "app"},
    ),
    "fifo-attributesfile": (
        'mkfifo x.fifo && git config --global core.attributesFile "$PWD/x.fifo"',
        "search",
        {"pattern": "app"},
    ),
    "fifo-info-exclude": (
        'g="$(git rev-parse --git-dir)"; mkdir -p "$g/info"; rm -f "$g/info/exclude"; mkfifo "$g/info/exclude"',
        "search",
        {"pattern": "app"},
    ),
    # git grep reads the attributes of each file it greps (is it binary?): this one hung the server for ever.
    "fifo-gitattributes": ("mkfifo .gitattributes", "search", {"pattern": "app"}),
    "fifo-nested-gitattributes": ("mkfifo src/.gitattributes", "search", {"pattern": "app"}),
    "fifo-read": ("mkfifo p", "read_file", {"path": "p"}),
    "fifo-edit": ("mkfifo p", "edit_file", {"path": "p", "old_string": "a", "new_string": "b"}),
    "fifo-write-over": ("mkfifo p", "write_file", {"path": "p", "content": "x\n"}),
    "fifo-list": ("mkfifo p", "list_files", {"path": "."}),
    "glob-climbs-out": ("true", "search", {"pattern": "hello", "glob": "../../**"}),
    "glob-top-magic": ("true", "search", {"pattern": "hello", "glob": ":(top)*"}),
    "pattern-is-an-option": ("true", "search", {"pattern": f"--open-files-in-pager=touch {MARK}"}),
}


def _timed_out(exc: BaseException) -> bool:
    """True when ``exc`` is a timeout, or a group (the SDK's task groups) holding one."""
    inner = getattr(exc, "exceptions", None)
    return isinstance(exc, TimeoutError) or (isinstance(inner, tuple) and any(_timed_out(e) for e in inner))


@pytest.mark.parametrize("trap", list(TRAPS), ids=list(TRAPS))
def test_a_planted_trap_never_hangs_or_escapes_the_mcp_server(repo: Path, trap: str) -> None:
    plant, tool, args = TRAPS[trap]
    before = user_state(repo)

    async def main() -> dict[str, Any]:
        command, argv = cliserver.stdio_command("mcp", "--new")
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            # Its own recording may refuse (a scan cannot read a FIFO'd .gitignore): the trap is there.
            await session.call_tool("run_command", {"command": plant})
            with anyio.fail_after(LIMIT):
                answer = await session.call_tool(tool, args)
            with anyio.fail_after(LIMIT):  # and the server still answers
                after = await session.call_tool("read_file", {"path": "src/app.py"})
            text = "".join(getattr(c, "text", "") for c in answer.content)
            return {
                "error": answer.is_error,
                "text": text,
                "after": "".join(getattr(c, "text", "") for c in after.content),
            }

    try:
        out = anyio.run(main)
    except BaseException as exc:  # the SDK's task groups wrap the timeout
        if _timed_out(exc):
            pytest.fail(f"{tool} hung on {trap}")
        raise

    assert "print('app')" in out["after"], out
    assert "Traceback" not in out["text"], out
    assert "hello\nuser edit" not in out["text"]  # nothing of the user's tree
    assert user_state(repo) == before
    assert not os.path.exists(MARK)


def test_a_search_reads_what_the_models_own_git_reads(repo: Path) -> None:
    """The search's git opens by name what the model wrote, so it runs where the model's commands run: in
    the run's sandbox, where nothing of your home is visible. Run by the server itself, it read your home's
    exclude file (any file your global config names) and hid a file the model's own git grep shows."""
    ignore = Path(os.environ["XDG_CONFIG_HOME"]) / "git" / "ignore"
    ignore.parent.mkdir(parents=True, exist_ok=True)
    ignore.write_text("hunter2\n")

    async def main() -> tuple[str, str]:
        command, argv = cliserver.stdio_command("mcp", "--new")
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(LIMIT):
                own = await session.call_tool(
                    "run_command", {"command": "echo app > hunter2 && git grep -l --untracked '^app$'"}
                )
                answer = await session.call_tool("search", {"pattern": "^app$"})
            return "".join(getattr(c, "text", "") for c in own.content), "".join(
                getattr(c, "text", "") for c in answer.content
            )

    own, found = anyio.run(main)
    assert "hunter2" in own, own  # the model's git does not see your home's exclude file
    assert "hunter2:1:app" in found, found


#: Searches for 5 s (each git stopped after 2 s) while the swapper (argv[3]: tests/fifo_swap.py) swaps the rule
#: files git grep reads: how many answers, how many stopped.
_SEARCH_WHILE_SWAPPED = """
import subprocess, sys, time
from sandbox.cli.machine import resolver
from sandbox.errors import UsageError
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store.project import Project

project, workdir, _run = Project.discover(sys.argv[1])
project.data_root = sys.argv[2]
confined = resolver("exec", None, None) if sys.argv[4] == "confined" else None
ws = Workspace(project, workdir, Settings(data_root=project.data_root, isolation=confined))
ws.search_deadline = 2.0
ws.start_run()
rules = (".gitattributes", ".gitignore", "src/.gitattributes", "src/.gitignore")
swapper = subprocess.Popen([sys.executable, sys.argv[3], "8", *(ws.run.worktree + "/" + n for n in rules)])
end, answered, stopped = time.monotonic() + 5, 0, 0
while time.monotonic() < end:
    try:
        ws.search("app")
    except UsageError as exc:
        stopped += "stopped after" in exc.message
    answered += 1
swapper.kill()
print(answered, stopped)
"""


@pytest.mark.parametrize("how", ["confined", "unconfined"])
def test_a_rule_file_swapped_for_a_fifo_while_git_greps_stops_that_search_only(
    repo: Path, tmp_path: Path, how: str
) -> None:
    """The check before the search's git is a race: a rule file swapped for a FIFO after it blocks that git.
    The git is killed at the search's deadline (in the run's sandbox, or with --isolate off), and the search
    says so; the server answers on."""
    import subprocess

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SEARCH_WHILE_SWAPPED, str(repo), str(tmp_path / "data"), fifo_swap.SCRIPT, how],
            capture_output=True,
            timeout=LIMIT + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a search hung on a rule file swapped for a FIFO")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    answered, _stopped = map(int, proc.stdout.split())
    assert answered > 1


def test_a_server_pinned_to_one_run_does_not_write_into_another(repo: Path) -> None:
    import json

    from tests.conftest import sandbox_cmd

    a = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    b = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
    other = Path(b["worktree"])

    async def main() -> bool:
        command, argv = cliserver.stdio_command("mcp", "--run", a)
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            started = await session.call_tool("start_run", {})
            assert started.is_error and "works on run" in str(started.content), started
            opened = await session.call_tool("open_run", {"run_id": b["run"]})
            if opened.is_error:
                return False
            wrote = await session.call_tool("write_file", {"path": "planted.txt", "content": "x\n"})
            return not wrote.is_error

    wrote = anyio.run(main)
    assert not wrote and not (other / "planted.txt").exists()


def test_a_server_pinned_to_one_run_shows_nothing_of_another(repo: Path) -> None:
    """A pinned server (--run, --new) is the model's view of its own run: another agent's run is neither
    listed nor readable through the resources (its diff carried what that agent wrote: a secret here), and
    a name that matches no run is refused as another run's is (no oracle of the runs' names)."""
    import json

    from tests.conftest import sandbox_cmd

    other = json.loads(sandbox_cmd("start", "--json", "--label", "victim", cwd=repo).stdout)["run"]
    assert (
        sandbox_cmd("exec", other, "--", "sh", "-c", "echo API_KEY=victim-secret > config.env", cwd=repo).returncode
        == 0
    )

    async def main() -> dict[str, Any]:
        command, argv = cliserver.stdio_command("mcp", "--new")
        params = StdioServerParameters(command=command, args=argv, env=dict(os.environ), cwd=str(repo))
        out: dict[str, Any] = {}
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.call_tool("list_runs", {})
            out["listed"] = "".join(getattr(c, "text", "") for c in listed.content)
            for name in (other, "victim", "no-such-run"):
                for what in ("diff", "log", "conversations"):
                    try:
                        read_back = await session.read_resource(f"sandbox://runs/{name}/{what}")
                        out[f"{name}/{what}"] = "".join(getattr(c, "text", "") for c in read_back.contents)
                    except Exception as exc:  # the SDK raises the server's error
                        out[f"{name}/{what}"] = f"REFUSED {exc}"
        return out

    out = anyio.run(main)
    assert other not in out["listed"] and "victim" not in out["listed"], out["listed"]
    for key, text in out.items():
        if key == "listed":
            continue
        assert "victim-secret" not in text and text.startswith("REFUSED"), (key, text)
        assert "works on run" in text, (key, text)


#: A confined agent's client for another session's HTTP MCP server (the SDK's, run inside the sandbox).
HTTP_CLIENT = r"""
import sys, anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with streamable_http_client(sys.argv[1]) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        r = await s.call_tool("write_file", {"path": "from-another-run.txt", "content": "x\n"})
        print("ERROR" if r.is_error else "WROTE")

anyio.run(main)
"""


def test_a_confined_agent_cannot_drive_another_sessions_http_server(repo: Path) -> None:
    import json
    import signal
    import socket
    import subprocess
    import time

    from tests.conftest import sandbox_cmd

    a = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    b = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [SANDBOX, "mcp", "--run", b["run"], "--http", str(port)],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        proc = sandbox_cmd("exec", a, "--network", "on", "--", sys.executable, "-c", HTTP_CLIENT, url, cwd=repo)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    assert b"WROTE" not in proc.stdout and not (Path(b["worktree"]) / "from-another-run.txt").exists()
