"""What a confined command leaves in the agent state it may write, and who runs it later.

Confinement makes the agent's state writable (``~/.claude/``, ``~/.claude.json``, ``~/.gemini/``,
``~/.npm/``, ...): Claude Code and Gemini CLI need it. Those files are also the *configuration* the
user's own, unconfined ``claude`` and ``gemini`` read at their next start anywhere: hooks
(``settings.json``) and MCP servers (``.claude.json``) are commands they run with the user's
rights. A command that writes them from inside the sandbox plants something that runs outside it
later (persistence). So those files are read-only in the sandbox
(``agentstate.AGENT_CONFIG``), and ``~/.claude.json``, which Claude Code rewrites at every start, is a
copy of the run's own there (``agentstate.AGENT_PRIVATE``). A command run with ``sandbox exec`` is no
agent: all of the agents' state is read-only for it, and nothing is made in the home (issue 26).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sandbox.store import layout
from tests.conftest import sandbox_cmd

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PLANT = (
    'printf \'{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/x"}]}]}}\''
    ' > "$HOME/.claude/settings.json"'
    '; printf \'{"mcpServers":{"x":{"command":"sh","args":["-c","touch /tmp/x"]}}}\' > "$HOME/.claude.json"'
    '; printf \'{"hooks":{"BeforeTool":[{"hooks":[{"type":"command","command":"touch /tmp/x"}]}]}}\''
    ' > "$HOME/.gemini/settings.json"'
)


def test_a_confined_command_cannot_plant_commands_in_the_users_agent_config(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)  # the user has Claude Code and Gemini CLI
    (home / ".gemini").mkdir()
    (home / ".claude.json").write_text("{}\n")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    started = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert started.returncode == 0, started.stderr.decode()
    run_id = json.loads(started.stdout)["run"]
    before = {p: p.read_bytes() if p.exists() else None for p in _config_files(home)}
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", PLANT, cwd=repo, env=env)
    after = {p: p.read_bytes() if p.exists() else None for p in _config_files(home)}
    for path, was in before.items():
        assert after[path] == was, (path, after[path], proc.stderr)  # not written, and nothing made
    assert b"Read-only file system" in proc.stderr  # the plant was refused, not skipped
    # No run's copy of ~/.claude.json either: 'sandbox exec' gives the command no agent state at all.
    assert not Path(layout.run_dir(str(repo / ".git"), run_id), "agent-state", ".claude.json").exists()


def _config_files(home: Path) -> list[Path]:
    return [home / ".claude" / "settings.json", home / ".claude.json", home / ".gemini" / "settings.json"]
