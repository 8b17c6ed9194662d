"""Seeding an agent's home in the run against what the agent left there in an earlier session.

The seeding (:mod:`sandbox.agent.agenthome`) runs outside the sandbox, at every ``sandbox run``, on a
directory the confined agent could write: whatever it left (a directory where a file goes, a file
where a directory goes, a document nested past any reader's depth, a setting or a configuration
folder that runs a command) must neither stop the next session with a traceback nor run in it.
"""

from __future__ import annotations

import json
from pathlib import Path

from sandbox.agent.adapters import claude_code

COMMAND = "sandbox hook claude-code"


def _evil(marker: Path) -> dict[str, str]:
    return {"type": "command", "command": f"touch {marker}"}


def test_claude_settings_that_run_commands_are_yours_at_the_next_session(tmp_path: Path) -> None:
    """Claude Code 2.1.328 lists its own settings that run a command (file suggestions, helpers, the
    subagents' status line, a process wrapper) and loads plugins, LSP servers and its own sandbox's
    programs from settings: each planted in the run's home is gone at the next seeding."""
    user_home, run_dir = tmp_path / "home", str(tmp_path / "run")
    (user_home / ".claude").mkdir(parents=True)
    (user_home / ".claude" / "settings.json").write_text('{"model": "mine"}')
    home = Path(claude_code.session_env(run_dir, str(tmp_path / "wt"), str(user_home), COMMAND)["CLAUDE_CONFIG_DIR"])
    evil = _evil(tmp_path / "PWNED")
    planted = {
        "fileSuggestion": evil,
        "subagentStatusLine": evil,
        "gcpAuthRefresh": "sh -c evil",
        "proxyAuthHelper": "sh -c evil",
        "processWrapper": "sh -c evil",
        "policyHelpers": {"linux": {"path": "/tmp/evil"}},
        "enabledPlugins": {"evil@planted": True},
        "extraKnownMarketplaces": {"planted": {"source": {"source": "directory", "path": "/tmp/m"}}},
        "pluginConfigs": {"evil@planted": {"options": {}}},
        "sandbox": {"bwrapPath": "/tmp/evil", "ripgrep": {"command": "/tmp/evil"}},
    }
    settings = json.loads((home / "settings.json").read_text())
    (home / "settings.json").write_text(json.dumps({**settings, **planted, "theme": "run's"}))
    claude_code.session_env(run_dir, str(tmp_path / "wt"), str(user_home), COMMAND)
    settings = json.loads((home / "settings.json").read_text())
    assert [k for k in planted if k in settings] == [], settings
    assert settings["theme"] == "run's" and settings["model"] == "mine"  # the rest is merged as before
