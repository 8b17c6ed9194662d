"""A hostile agent's git config in its own git dir never runs anything outside its sandbox.

The run's git directory is the agent's to write, even under confinement (bubblewrap binds it
read-write). Git runs commands named in config (``core.fsmonitor`` on every index read, filter
drivers on ``add``/checkout), so any git the *unconfined* sandbox process runs in the run's
worktree would run the agent's command outside the sandbox: with the user's rights, the user's
tree writable. Each test plants such a command from inside a confined ``sandbox exec`` (the
agent's own ``sh``), then drives the user's and the recorder's code paths that run git in the
worktree, and checks that the command never ran outside: its marker is written to a path that,
inside the sandbox, lands on the private ``/tmp`` (so a marker on the real file system can only
come from an unconfined process).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import on_pty, sandbox_cmd, user_state

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def start(repo: Path) -> tuple[str, Path]:
    out = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
    return out["run"], Path(out["worktree"])


def sh(repo: Path, run_id: str, script: str) -> None:
    """``script`` as an agent running unconfined runs it (``sandbox exec --isolate off``): a confined one
    can no longer write the run's git config (tests/agent/test_user_git.py); the sandbox's own
    commands must still never run what an unconfined one plants."""
    proc = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", script, cwd=repo, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()


#: Plants ``core.fsmonitor`` = a command writing $MARK, in the run's own git config (``git config``,
#: as the agent is allowed to), and sparse-checkout patterns that make the recorder ask git which
#: deleted paths the sparse checkout left out.
PLANT_CONFIG = (
    'git config core.fsmonitor "echo pwned > $MARK; true"'
    ' && g="$(git rev-parse --git-dir)" && mkdir -p "$g/info" && echo "/*" > "$g/info/sparse-checkout"'
)

#: The same through a git dir of the agent's own making: the worktree's ``.git`` file rewritten.
PLANT_GITFILE = (
    'cp -r "$(git rev-parse --absolute-git-dir)" .evil'
    ' && git --git-dir=.evil config core.fsmonitor "echo pwned > $MARK; true"'
    ' && mkdir -p .evil/info && echo "/*" > .evil/info/sparse-checkout'
    " && printf 'gitdir: .evil\\n' > .git"
)


@pytest.fixture
def mark(tmp_path: Path) -> Iterator[Path]:
    """The marker a planted command writes when it runs (outside the sandbox: on the real disk)."""
    path = tmp_path / "pwned"
    yield path


def assert_never_ran(mark: Path, when: str) -> None:
    assert not mark.exists(), f"the agent's git config ran a command outside the sandbox ({when})"


@pytest.mark.parametrize("plant", [PLANT_CONFIG, PLANT_GITFILE], ids=["run-git-config", "rewritten-dot-git"])
def test_core_fsmonitor_planted_by_the_agent_never_runs_unconfined(repo: Path, mark: Path, plant: str) -> None:
    run_id, wt = start(repo)
    sh(repo, run_id, f"MARK={mark}; {plant}; echo new > gone.txt")
    assert_never_ran(mark, "recording the planting call")
    before = user_state(repo)
    # A deleted path makes the recorder ask git whether the sparse checkout left it out.
    sh(repo, run_id, "rm gone.txt src/util.py; echo more >> README.md")
    assert_never_ran(mark, "recording a call that deletes files")
    for args in (["status", run_id], ["log", run_id], ["diff", run_id], ["resume", run_id], ["list"]):
        proc = sandbox_cmd(*args, cwd=repo, timeout=60)
        assert "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
        assert_never_ran(mark, f"sandbox {args[0]}")
    proc = sandbox_cmd("apply", run_id, cwd=repo, timeout=60)
    assert_never_ran(mark, "sandbox apply")
    assert proc.returncode in (0, 1), proc.stderr.decode()
    sandbox_cmd("undo", run_id, cwd=repo, timeout=60)
    assert_never_ran(mark, "sandbox undo")
    assert user_state(repo)["HEAD"] == before["HEAD"]


def test_mcp_search_never_runs_the_agents_fsmonitor(repo: Path, mark: Path) -> None:
    """``search`` runs ``git grep`` in the worktree from the (unconfined) MCP server."""
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    exe = str(Path(sys.executable).parent / "sandbox")

    async def main() -> dict[str, Any]:
        import os

        params = StdioServerParameters(
            command=exe, args=["mcp", "--new", "--isolate", "off"], env=dict(os.environ), cwd=str(repo)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            planted = await session.call_tool("run_command", {"command": f"MARK={mark}; {PLANT_CONFIG}"})
            assert planted.structured_content is not None
            assert planted.structured_content["status"] == "succeeded", planted.structured_content
            found = await session.call_tool("search", {"pattern": "app"})
            return {"error": found.is_error, "text": "".join(getattr(c, "text", "") for c in found.content)}

    found = anyio.run(main)
    assert_never_ran(mark, "the MCP search tool")
    assert not found["error"] and "src/app.py" in found["text"], found


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """``sandbox ARGS`` with standard output and error on a pseudo-terminal (so it pages)."""
    return on_pty(*args, cwd=cwd, env={"GIT_PAGER": None, "PAGER": None, "LESS": None}, stdin_null=True)


@pytest.mark.parametrize("key", ["core.pager", "include.path"])
def test_a_pager_the_agent_configures_is_never_started_by_the_users_commands(
    repo: Path, mark: Path, tmp_path: Path, key: str
) -> None:
    """``sandbox diff``/``log`` in the run's worktree (RUN left out, as the README allows) read the
    pager from git config: never from the run's own git dir, which the agent writes."""
    run_id, wt = start(repo)
    pager = f"echo pwned > {mark}; cat"
    if key == "core.pager":
        sh(repo, run_id, f"git config core.pager '{pager}' && echo x >> README.md")
    else:  # the same through a file the agent includes from its config
        sh(
            repo,
            run_id,
            f"printf '[core]\\n\\tpager = {pager}\\n' > inc.cfg && git config include.path \"$PWD/inc.cfg\"",
        )
    for cmd in (["diff"], ["log"], ["status"]):
        code, out = _on_a_terminal(cmd, wt)
        assert code == 0, out.decode(errors="replace")
        assert_never_ran(mark, f"sandbox {cmd[0]} in the worktree")
        assert b"Traceback" not in out
