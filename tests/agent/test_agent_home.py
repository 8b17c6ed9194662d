"""Each run's own home for an agent's state (:mod:`sandbox.agent.agenthome`, issue #26).

The seeding merge (what the run accepted and what the user changed since both hold), the homes'
place in the run and in the sandbox (writable there, the user's agent state read-only and nothing
created in the user's home), and the hooks kept out of the worktree's settings.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sandbox.agent import adapters, agenthome, agentstate, host
from sandbox.agent.adapters import claude_code, gemini
from sandbox.confine import spawn
from tests.conftest import sandbox_cmd

COMMAND = "sandbox hook claude-code"


def test_merge3_keeps_what_each_side_changed() -> None:
    base = {"theme": "dark", "projects": {"/repo": {"trusted": True}}, "approved": ["a"], "n": 1}
    user = {"theme": "light", "projects": {"/repo": {"trusted": True}}, "approved": ["a", "u"], "n": 1}
    run = {"theme": "dark", "projects": {"/repo": {"trusted": True}, "/wt": {"trusted": True}}, "approved": ["a", "r"],
           "n": 5, "onboarded": True}  # fmt: skip
    assert agenthome.merge3(base, user, run) == {
        "theme": "light",  # the user changed it outside
        "projects": {"/repo": {"trusted": True}, "/wt": {"trusted": True}},  # the run trusted its worktree
        "approved": ["a", "u", "r"],  # both approved a key: both hold
        "n": 5,
        "onboarded": True,
    }
    # A deletion is a change too; both changing one value: the user's wins.
    assert agenthome.merge3({"a": 1, "b": 2}, {"a": 1}, {"a": 3, "b": 2}) == {"a": 3}
    assert agenthome.merge3({"a": 1}, {"a": 2}, {"a": 3}) == {"a": 2}


def test_seeding_merges_at_every_session_and_never_writes_the_users_file(tmp_path: Path) -> None:
    user_home, run_dir = tmp_path / "home", tmp_path / "run"
    user_home.mkdir()
    (user_home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "dark"}))
    (user_home / ".claude").mkdir()
    (user_home / ".claude" / "commands").mkdir()
    (user_home / ".claude" / ".credentials.json").write_text('{"token": "t"}')
    user_before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    env = claude_code.session_env(str(run_dir), str(tmp_path / "wt"), str(user_home), COMMAND)
    home = Path(env["CLAUDE_CONFIG_DIR"])
    assert home == Path(claude_code.config_home(str(run_dir)))
    assert json.loads((home / ".claude.json").read_text()) == {"hasCompletedOnboarding": True, "theme": "dark"}
    settings = json.loads((home / "settings.json").read_text())
    assert COMMAND in json.dumps(settings["hooks"]["PreToolUse"])  # the sandbox's hooks: in the run's settings
    assert (home / "commands").is_symlink() and not (home / "agents").exists()  # only what the user has
    assert json.loads((home / ".credentials.json").read_text()) == {"token": "t"}
    # Inside, the agent trusts its folder; outside, the user changes the theme. Both hold next time.
    saved = json.loads((home / ".claude.json").read_text())
    saved["projects"] = {"/wt": {"hasTrustDialogAccepted": True}}
    (home / ".claude.json").write_text(json.dumps(saved))
    (user_home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "light"}))
    user_before[user_home / ".claude.json"] = (user_home / ".claude.json").read_bytes()
    claude_code.session_env(str(run_dir), str(tmp_path / "wt"), str(user_home), COMMAND)
    again = json.loads((home / ".claude.json").read_text())
    assert again["theme"] == "light" and again["projects"]["/wt"]["hasTrustDialogAccepted"] is True
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == user_before


def test_gemini_home_holds_its_settings_with_the_hooks_and_links_only_what_exists(tmp_path: Path) -> None:
    user_home, run_dir = tmp_path / "home", tmp_path / "run"
    (user_home / ".gemini").mkdir(parents=True)
    (user_home / ".gemini" / "settings.json").write_text('{"ui": {"theme": "x"}}')
    env = gemini.session_env(str(run_dir), str(tmp_path / "wt"), str(user_home), "sandbox hook gemini")
    state = Path(env["GEMINI_CLI_HOME"]) / ".gemini"
    settings = json.loads((state / "settings.json").read_text())
    assert settings["ui"] == {"theme": "x"} and "sandbox hook gemini" in json.dumps(settings["hooks"])
    assert not (state / "GEMINI.md").exists() and not (user_home / ".gemini" / "GEMINI.md").exists()
    assert env["GEMINI_CLI_TRUSTED_FOLDERS_PATH"].startswith(str(run_dir))


def test_seeding_never_reads_or_writes_through_a_link_the_agent_left_in_its_home(tmp_path: Path) -> None:
    """The home is writable inside; seeding runs outside, where a masked secret is readable."""
    user_home, run_dir, elsewhere = tmp_path / "home", tmp_path / "run", tmp_path / "elsewhere"
    (user_home / ".gemini").mkdir(parents=True)
    (user_home / ".gemini" / "settings.json").write_text('{"ui": {"theme": "x"}}')
    secret = user_home / ".docker" / "config.json"  # masked inside the sandbox, and a JSON object
    secret.parent.mkdir()
    secret.write_text('{"auths": {"registry": {"auth": "s3cret"}}}')
    elsewhere.mkdir()
    wt = str(tmp_path / "wt")
    home = Path(claude_code.session_env(str(run_dir), wt, str(user_home), COMMAND)["CLAUDE_CONFIG_DIR"])
    (home / ".claude.json").unlink()
    (home / ".claude.json").symlink_to(secret)
    (user_home / ".claude.json").write_text('{"theme": "light"}')  # changed outside since: a merge is written
    gemini_home = Path(gemini.session_env(str(run_dir), wt, str(user_home), None)["GEMINI_CLI_HOME"])
    shutil.rmtree(gemini_home / ".gemini")
    (gemini_home / ".gemini").symlink_to(elsewhere)
    os.mkfifo(home / "settings.json.tmp")
    (home / "settings.json").unlink()
    os.rename(home / "settings.json.tmp", home / "settings.json")  # would hang a blocking open
    claude_code.session_env(str(run_dir), wt, str(user_home), COMMAND)
    gemini.session_env(str(run_dir), wt, str(user_home), None)
    assert COMMAND in (home / "settings.json").read_text()  # a regular file again, with the hooks
    assert not (home / ".claude.json").is_symlink() and "s3cret" not in (home / ".claude.json").read_text()
    assert json.loads((home / ".claude.json").read_text()) == {"theme": "light"}
    assert secret.read_text() == '{"auths": {"registry": {"auth": "s3cret"}}}'
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert not (gemini_home / ".gemini").is_symlink()
    assert json.loads((gemini_home / ".gemini" / "settings.json").read_text())["ui"] == {"theme": "x"}


def test_uninstall_takes_only_the_sandboxs_hooks_out_of_the_worktree(tmp_path: Path) -> None:
    adapter = adapters.load("claude-code")
    (tmp_path / ".claude").mkdir()
    theirs = {"permissions": {"allow": ["Bash(ls:*)"]}}
    (tmp_path / ".claude" / "settings.local.json").write_text(json.dumps(theirs))
    adapters.install(adapter, str(tmp_path), COMMAND)
    assert adapters.uninstall(adapter, str(tmp_path)) is True
    assert json.loads((tmp_path / ".claude" / "settings.local.json").read_text()) == theirs
    assert adapters.uninstall(adapter, str(tmp_path)) is False


def test_without_state_drops_the_replaced_agent_state(tmp_path: Path) -> None:
    home = str(tmp_path)
    writable = agentstate.state_paths(agentstate.DEFAULT_AGENT_STATE, home)
    config, private = agentstate.config_paths(agentstate.AGENT_CONFIG, agentstate.AGENT_PRIVATE, writable, home)
    isolation = spawn.Isolation(writable=tuple(writable), config=tuple(config), private=tuple(private))
    replaced = agentstate.state_paths([*claude_code.REPLACES, *gemini.REPLACES], home)
    left = agentstate.without_state(isolation, replaced)
    assert set(left.writable) == {f"{home}/.codex/", f"{home}/.npm/", f"{home}/.local/state/claude/"}
    assert left.config and all(p.startswith(f"{home}/.codex/") for p in left.config)  # Codex keeps its own
    assert left.private == ()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_run_session_writes_its_agent_home_and_nothing_in_the_users(repo: Path, tmp_path: Path) -> None:
    """Confined ``sandbox run --hooks claude-code``: the home is writable (lock dir, temp file, rename),
    the user's ``~/.claude.json`` and ``~/.gemini`` are read-only, and nothing is created in the home."""
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)  # the user has Gemini CLI: no GEMINI.md may appear
    (home / ".claude.json").write_text("{}\n")
    before = _outside_data(home)
    script = (
        'set -e; cd "$CLAUDE_CONFIG_DIR"; mkdir .claude.json.lock; printf "{\\"saved\\": 1}" > .claude.json.tmp;'
        " mv .claude.json.tmp .claude.json; rmdir .claude.json.lock;"
        ' if echo x > "$HOME/.claude.json" 2>/dev/null; then echo WROTE-USER; fi;'
        ' if touch "$HOME/.gemini/x" 2>/dev/null; then echo WROTE-GEMINI; fi'
    )
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "SANDBOX_HOOK_AUTOSTART": "1"}
    started = sandbox_cmd("start", "--json", cwd=repo, env=env)
    run_id = json.loads(started.stdout)["run"]
    proc = sandbox_cmd("run", run_id, "--hooks", "claude-code", "--", "sh", "-c", script, cwd=repo, env=env)
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    assert "WROTE" not in out
    assert (home / ".claude.json").read_text() == "{}\n"
    assert _outside_data(home) == before
    from sandbox.store import layout

    run_dir = layout.run_dir(str(repo / ".git"), run_id)
    assert json.loads(Path(claude_code.config_home(run_dir), ".claude.json").read_text()) == {"saved": 1}
    assert not Path(repo, ".claude").exists()
    host.stop_host(str(repo / ".git"))


def _outside_data(home: Path) -> list[str]:
    """The home's paths, less the sandbox's own data directory (runs' homes live there)."""
    data = home / ".local" / "share" / "sandbox"
    return sorted(str(p) for p in home.rglob("*") if p not in data.parents and data not in p.parents and p != data)


def test_hooks_none_still_gives_claude_its_home_without_the_hooks(repo: Path, tmp_path: Path) -> None:
    """``sandbox run --hooks none -- claude``: the run's home all the same (the user's is read-only in
    the sandbox), seeded without the sandbox's hooks, also when an earlier session put them there."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "claude"
    fake.write_text('#!/bin/sh\necho "home=$CLAUDE_CONFIG_DIR"\ncat "$CLAUDE_CONFIG_DIR/settings.json"\n')
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "SANDBOX_HOOK_AUTOSTART": "1"}
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo, env=env).stdout)["run"]
    outputs = []
    for hooks in ("claude-code", "none"):
        argv = ["run", run_id, "--isolate", "off", "--hooks", hooks, "--", str(fake)]
        proc = sandbox_cmd(*argv, cwd=repo, env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        outputs.append(proc.stdout.decode())
    assert all("home=" + str(repo / ".git" / "sandbox" / "runs" / run_id) in out for out in outputs), outputs
    assert COMMAND in outputs[0] and "sandbox hook" not in outputs[1]
    host.stop_host(str(repo / ".git"))


def test_the_sessions_lookup_names_the_same_homes_as_the_adapters(tmp_path: Path) -> None:
    """sandbox.agent.sessions asks each adapter for its homes: the run's own (the adapter's) first."""
    from sandbox.agent import sessions
    from sandbox.agent.adapters import claude_code, gemini

    homes = sessions.config_homes({}, str(tmp_path / "home"), str(tmp_path / "run"))
    assert homes["claude-code"][0] == claude_code.config_home(str(tmp_path / "run"))
    assert homes["gemini"][0] == os.path.join(gemini.cli_home(str(tmp_path / "run")), ".gemini")


def test_codex_home_seeds_config_toml_login_and_your_configuration(tmp_path: Path) -> None:
    """Codex's home (``CODEX_HOME``): ``config.toml`` copied as it is while the run leaves it alone,
    merged when it changed it (the guarded keys yours), ``auth.json`` merged, the rest linked in."""
    from sandbox.agent.adapters import codex

    tomllib = pytest.importorskip("tomllib")
    user, run_dir = tmp_path / "codex", str(tmp_path / "run")
    (user / "rules").mkdir(parents=True)
    (user / "prompts").mkdir()
    text = '# my settings\nmodel = "m1"\nnotify = ["notify-send"]\n\n[mcp_servers.mine]\ncommand = "mine"\n'
    (user / "config.toml").write_text(text)
    (user / "auth.json").write_text('{"OPENAI_API_KEY": "sk-1"}')
    (user / "deep.config.toml").write_text('model = "deep"\n')
    before = {p: p.read_bytes() for p in user.rglob("*") if p.is_file()}
    env = codex.session_env(run_dir, str(tmp_path / "wt"), str(tmp_path), None, user_codex=str(user))
    home = Path(env["CODEX_HOME"])
    assert home == Path(codex.config_home(run_dir)) == Path(agenthome.home_of(run_dir, "codex"))
    assert (home / "config.toml").read_text() == text  # as it is, comments and all
    assert json.loads((home / "auth.json").read_text()) == {"OPENAI_API_KEY": "sk-1"}
    assert (home / "rules").is_symlink() and (home / "deep.config.toml").is_symlink()
    assert not (home / "AGENTS.md").exists() and not (home / "skills").exists()  # only what you have
    # Inside: the run trusts its worktree, picks a model, plants an MCP server, a notify hook, a profile.
    run_text = (
        'model = "m-run"\nnotify = ["sh", "-c", "evil"]\n\n[projects."/wt"]\ntrust_level = "trusted"\n\n'
        '[mcp_servers.mine]\ncommand = "mine"\n\n[mcp_servers.evil]\ncommand = "sh"\n'
    )
    (home / "config.toml").write_text(run_text)
    (home / "evil.config.toml").write_text('[mcp_servers.x]\ncommand = "sh"\n')
    (home / "rules").unlink()
    (home / "rules").mkdir()
    (home / "rules" / "default.rules").write_text('prefix_rule(pattern=["rm"], decision="allow")\n')
    # Outside: you log in again.
    (user / "auth.json").write_text('{"OPENAI_API_KEY": "sk-2"}')
    before[user / "auth.json"] = (user / "auth.json").read_bytes()
    codex.session_env(run_dir, str(tmp_path / "wt"), str(tmp_path), None, user_codex=str(user))
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["model"] == "m-run" and config["projects"] == {"/wt": {"trust_level": "trusted"}}
    assert config["notify"] == ["notify-send"] and config["mcp_servers"] == {"mine": {"command": "mine"}}
    assert not (home / "evil.config.toml").exists() and (home / "rules").is_symlink()
    assert json.loads((home / "auth.json").read_text()) == {"OPENAI_API_KEY": "sk-2"}
    assert {p: p.read_bytes() for p in user.rglob("*") if p.is_file()} == before  # yours: only read


def test_toml_written_back_reads_the_same() -> None:
    import datetime

    tomllib = pytest.importorskip("tomllib")
    data = {
        "a": 'quote " back \\ tab \t nl \n del \x7f é 🙂',
        "n": -3,
        "f": 1.5e300,
        "inf": float("inf"),
        "b": False,
        "when": datetime.datetime(2026, 12, 1, 18, 0, tzinfo=datetime.timezone.utc),
        "list": [1, [2, "x"], {"k": "v", "odd key": {"deep": True}}],
        "odd.key": {"x y": {"z": 1}, "empty": {}},
        "t": {"u": 1, "sub": {"v": [{"w": 2}]}},
    }
    assert tomllib.loads(agenthome.dump_toml(data)) == data


def test_codex_sessions_are_looked_for_in_the_runs_home_first(tmp_path: Path) -> None:
    from sandbox.agent import sessions
    from sandbox.agent.adapters import codex

    run_dir = str(tmp_path / "run")
    homes = sessions.config_homes({"CODEX_HOME": "/mine"}, str(tmp_path / "home"), run_dir)
    assert homes["codex"] == [codex.config_home(run_dir), "/mine"]
    assert sessions.config_homes({}, "/h", run_dir)["codex"][1] == "/h/.codex"


def test_codex_hint_resumes_the_newest_session_of_the_runs_home(tmp_path: Path) -> None:
    from sandbox.agent.adapters import codex

    run_dir = str(tmp_path / "run")
    assert codex.resume_args(run_dir, 0) is None
    day = Path(codex.config_home(run_dir)) / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    session = "e16a73b6-8db1-48e4-a91d-b25c83f697aa"
    (day / f"rollout-2026-12-01T18-02-19-{session}.jsonl").write_text("{}\n")
    assert codex.resume_args(run_dir, 0) == ["resume", session]
    assert codex.resume_args(run_dir, 4e9) is None  # none saved since


def test_codex_home_without_your_codex_creates_nothing_of_yours(tmp_path: Path) -> None:
    from sandbox.agent.adapters import codex

    env = codex.session_env(str(tmp_path / "run"), str(tmp_path / "wt"), str(tmp_path / "home"), None)
    assert sorted(os.listdir(env["CODEX_HOME"])) == [] and not (tmp_path / "home").exists()
