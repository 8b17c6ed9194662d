"""The registry of agents (issue 24): one module per agent in sandbox/agent/adapters, no list by hand."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

import sandbox.agent.adapters as adapters
from sandbox.agent import agenthome, sessions
from sandbox.cli import cli

FIELDS = {
    "NAME": str,
    "PROGRAM": str,
    "ENV": tuple,
    "ENDPOINTS": tuple,
    "BASE_URL": tuple,
    "CONFIG": tuple,
    "PRIVATE": tuple,
}
#: What an agent whose conversations the sandbox continues says besides (every agent today).
SESSION_FIELDS = ("SESSIONS", "session_homes")
HOOK_FIELDS = ("HOOK_HELP", "SETTINGS_PATH", "MARKER", "SUCCESS_STDOUT", "classify", "to_event", "hook_settings")


def test_every_module_of_the_package_is_an_agent_that_says_what_the_registry_needs() -> None:
    files = sorted(
        p.stem.replace("_", "-") for p in Path(adapters.__file__).parent.glob("*.py") if not p.stem.startswith("_")
    )
    assert list(adapters.names()) == files and {"claude-code", "gemini", "codex"} <= set(files)
    for name in adapters.names():
        module = adapters.agent(name)
        for field, kind in FIELDS.items():
            assert isinstance(getattr(module, field), kind), f"{name}.{field}"
        assert name == module.NAME
        if name in adapters.hook_names():
            assert all(hasattr(module, f) for f in HOOK_FIELDS), name
        assert all(hasattr(module, f) for f in SESSION_FIELDS), name
    assert adapters.hook_names() == ("claude-code", "gemini")


def test_each_agents_sessions_come_from_the_registry(tmp_path: Path) -> None:
    # The adapter names its sessions class and its homes: sandbox.agent.sessions keeps no list of its own.
    found = sessions.agents()
    assert list(found) == list(adapters.names())
    for name, agent in found.items():
        module = adapters.agent(name)
        assert type(agent).__name__ == module.SESSIONS and agent.name == name and agent.program == module.PROGRAM
        assert sessions.for_command([f"/opt/bin/{module.PROGRAM}"]) is agent
    home, run = str(tmp_path / "home"), str(tmp_path / "run")
    homes = sessions.config_homes({"CODEX_HOME": "/c", "CLAUDE_CONFIG_DIR": "/cl"}, home, run)
    assert homes == {
        name: adapters.agent(name).session_homes({"CODEX_HOME": "/c", "CLAUDE_CONFIG_DIR": "/cl"}, home, run)
        for name in found
    }
    assert homes["codex"] == [agenthome.home_of(run, "codex"), "/c"] and homes["claude-code"][1] == "/cl"
    assert homes["gemini"] == [os.path.join(agenthome.home_of(run, "gemini"), ".gemini"), os.path.join(home, ".gemini")]


def test_what_is_derived_from_the_registry() -> None:
    assert adapters.by_program("/opt/bin/claude-2.1") is adapters.agent("claude-code")
    assert adapters.by_program("python3") is None
    assert adapters.agent_of("codex") == "codex" and adapters.agent_of("python3", "claude-code") == "claude"
    assert adapters.default_allowlist("gemini", {})[0] == "generativelanguage.googleapis.com"


def test_hook_commands_follow_the_registry() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["hook", "--help"], catch_exceptions=False)
    assert all(name in listed.output for name in adapters.hook_names())
    refused = runner.invoke(cli, ["hooks", "install", "codex", "--print"], catch_exceptions=False)
    assert refused.exit_code == 2 and "'codex' is not one of 'claude-code', 'gemini'" in refused.output
