"""The real Claude Code using only ``sandbox mcp``'s tools (issue 15).

Claude Code is started in the user's own repository with ``--mcp-config`` naming ``sandbox mcp
--run RUN``, its built-in file and shell tools disallowed (``--disallowedTools``) and the server's
tools allowed. The scripted model (:mod:`tests.agents.anthropic_server`) writes, edits, runs a
command that succeeds and one that fails, reads, and tries a built-in Write anyway. The ledger has
one call per changing MCP tool use, the user's tree is untouched until ``apply``, and ``apply`` +
``undo`` come out right.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.anthropic_server import ModelServer, ToolUse, Turn, result_text
from tests.agents.claude_harness import SANDBOX, TIMEOUT, claude_env, cli_start, sandbox, stop_services
from tests.agents.test_claude_code import _apply_and_undo
from tests.conftest import tree_digest, user_state
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents

BUILTIN = ["Write", "Edit", "NotebookEdit", "Bash", "Read", "Glob", "Grep", "LS"]


def mcp_tool(name: str, **args: object) -> Turn:
    """A turn asking for one tool of the ``sandbox`` MCP server (Claude Code names it mcp__sandbox__NAME)."""
    return Turn(tools=[ToolUse(f"mcp__sandbox__{name}", dict(args))])


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


def test_claude_code_with_only_the_mcp_tools(claude_bin: str, repo: Path, tmp_path: Path) -> None:
    run = cli_start(repo)
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {"mcpServers": {"sandbox": {"command": SANDBOX, "args": ["mcp", "-C", str(repo), "--run", run.run_id]}}}
        )
    )
    turns = [
        mcp_tool("write_file", path="src/new.py", content="def new():\n    return 1\n"),
        mcp_tool("edit_file", path="src/app.py", old_string="print('app')", new_string="print('edited')"),
        mcp_tool("run_command", command="echo built > out.txt"),
        mcp_tool("run_command", command="echo broken >&2; exit 3"),
        mcp_tool("read_file", path="src/app.py"),
        Turn(tools=[ToolUse("Write", {"file_path": str(repo / "escape.txt"), "content": "x"})]),
        mcp_tool("show_diff", stat_only=True),
    ]
    uses = [t.tools[0].id for t in turns]
    user_before, files_before = user_state(repo), tree_digest(repo)
    home = tmp_path / "claude-home"
    with ModelServer(turns) as server:
        proc = subprocess.run(
            [
                claude_bin,
                "-p",
                "Do the task.",
                "--mcp-config",
                str(config),
                "--strict-mcp-config",
                "--disallowedTools",
                *BUILTIN,
                "--allowedTools",
                "mcp__sandbox",
                "--permission-mode",
                "default",
                "--debug-file",
                str(tmp_path / "debug.log"),
            ],
            cwd=repo,
            env=claude_env(server, home),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        offered = {t["name"] for t in server.agent_requests()[0].body["tools"]}
        first = json.dumps(server.agent_requests()[0].body)
        results = {tid: server.tool_result(tid) for tid in uses}
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # Claude Code defers MCP tools (named to the model, loaded through its ToolSearch); they are there.
    assert all(f"mcp__sandbox__{name}" in first for name in ("write_file", "edit_file", "run_command"))
    assert not offered & set(BUILTIN)  # the built-in file and shell tools are not even offered

    # What the model was told, tool by tool.
    for tid in uses:
        assert results[tid] is not None, tid
    assert json.loads(result_text(results[uses[0]]))["changed"] is True
    # A failed command is a failed tool call (isError): Claude Code adds its own hint after our JSON.
    assert results[uses[3]] is not None and results[uses[3]].get("is_error") is True
    failed, _end = json.JSONDecoder().raw_decode(result_text(results[uses[3]]))
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and "broken" in failed["output"]
    assert "print('edited')" in result_text(results[uses[4]])
    assert results[uses[5]].get("is_error") is True  # the built-in Write is refused by Claude Code itself
    assert "src/new.py" in result_text(results[uses[6]]) and "out.txt" in result_text(results[uses[6]])
    assert not (repo / "escape.txt").exists()

    # The ledger: one call per changing tool use, in order, with its files; reads are not recorded.
    entries = reopen(run).entries()
    assert [(e.tool_name, e.status.value, [f.path for f in e.files]) for e in entries] == [
        ("write_file", "succeeded", ["src/new.py"]),
        ("edit_file", "succeeded", ["src/app.py"]),
        ("run_command", "succeeded", ["out.txt"]),
        ("run_command", "failed", []),
    ]
    assert all(e.call_id.startswith("mcp-") for e in entries)
    assert entries[3].error == "exit code 3"
    assert user_state(repo) == user_before and tree_digest(repo) == files_before  # nothing reached the user
    diff = sandbox("diff", run.run_id, cwd=repo)
    assert diff.returncode == 0 and "+print('edited')" in diff.stdout and "+def new():" in diff.stdout
    _apply_and_undo(repo, run.run_id, {"src/new.py": "def new():\n    return 1\n", "src/app.py": "print('edited')\n"})
