"""The registry of agents (issue 24): one module per agent in sandbox/agent/adapters, no list by hand."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import sandbox.agent.adapters as adapters
from sandbox.agent import netproxy
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
    assert adapters.hook_names() == ("claude-code", "gemini")


def test_what_is_derived_from_the_registry() -> None:
    assert adapters.by_program("/opt/bin/claude-2.1") is adapters.agent("claude-code")
    assert adapters.by_program("python3") is None
    assert netproxy.agent_of("codex") == "codex" and netproxy.agent_of("python3", "claude-code") == "claude"
    assert netproxy.default_allowlist("gemini", {})[0] == "generativelanguage.googleapis.com"


def test_hook_commands_follow_the_registry() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["hook", "--help"], catch_exceptions=False)
    assert all(name in listed.output for name in adapters.hook_names())
    refused = runner.invoke(cli, ["hooks", "install", "codex", "--print"], catch_exceptions=False)
    assert refused.exit_code == 2 and "'codex' is not one of 'claude-code', 'gemini'" in refused.output
