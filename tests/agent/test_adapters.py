"""The registry of agents (issue 24): one module per agent in sandbox/agent/adapters, no list by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import sandbox.agent.adapters as adapters
from sandbox.agent import agenthome, agentstate, sessions
from sandbox.agent.adapter import AgentAdapter, HookAdapter
from sandbox.cli import cli
from sandbox.cli.isolation import resolve
from sandbox.confine.policy import policy_for_run
from sandbox.confine.verdict import explain
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd

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


def test_each_adapter_keeps_the_contract_and_declares_its_login_and_variables() -> None:
    # mypy checks each module against the Protocol (its last lines); this says the same at run time.
    for name in adapters.names():
        module = adapters.agent(name)
        assert isinstance(module, AgentAdapter), name
        assert isinstance(module, HookAdapter) == (name in adapters.hook_names()), name
        assert module.ENV and module.STATE and module.LOGIN, name
        for path in (*module.STATE, *module.LOGIN, *module.CONFIG, *module.PRIVATE, *module.REPLACES):
            assert path.startswith("~/"), (name, path)
        # Its login lies in the state its run home stands in for: seeded there, never written in yours.
        for login in module.LOGIN:
            assert any(login == r or login.startswith(r) for r in module.REPLACES if r.endswith("/")), login
    # Nothing per agent is listed beside the registry.
    states = {p for n in adapters.names() for p in adapters.agent(n).STATE}
    assert set(agentstate.DEFAULT_AGENT_STATE) == states | {"~/.npm/"}
    assert adapters.settings_dirs() == (".claude", ".gemini")


def test_no_agents_login_is_visible_to_a_confined_command(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    logins = [home / p[2:] for n in adapters.names() for p in adapters.agent(n).LOGIN]
    for path in logins:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"token": "secret"}')
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    project, _workdir, _in_run = Project.discover(str(repo))
    run = Run.open(project, json.loads(proc.stdout)["run"])
    for command in ("exec", "run"):  # a command, or an agent other than the login's own
        policy = policy_for_run(resolve(str(repo), command, None, None), run)
        for path in logins:
            assert not explain(policy, str(path)).visible, (command, path)


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
