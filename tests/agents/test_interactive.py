"""The everyday path typed by hand (issue #26): ``sandbox run RUN -- claude`` in a real terminal.

A private tmux server (:mod:`tests.agents.tmux`, 160x45) runs a shell; the tests type into it as a
user does, against the scripted model server, with the pinned Claude Code and a private ``HOME``.
Every wait polls the pane and is bounded.

Steps:

* trust and key: the first ``sandbox run`` of a run asks "trust this folder?" and "use this API
  key?"; both are accepted; the second session of the same run asks neither, and the user's own
  ``~/.claude.json`` is byte-identical, and nothing new is in the user's home;
* default mode: a run whose worktree the user trusted (seeded from the user's file) asks "Do you
  want to create new.py?" before the Write, the file appears only after "Yes", ``/exit`` prints the
  sandboxed way to resume, the terminal settings (``stty -a``) are as before, and the transcript is
  in the run's Claude home, not under the user's ``~/.claude``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent.adapters import claude_code, gemini
from tests.agents import gemini_server as gs
from tests.agents.anthropic_server import ModelServer, write
from tests.agents.claude_harness import SANDBOX, cli_start, stop_services
from tests.agents.tmux import Terminal
from tests.conftest import wait_until
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents

KEY = "sk-ant-test-0000"
TRUST = "Yes, I trust this folder"
KEY_DIALOG = "Do you want to use this API key"
#: Claude Code's input box is up (the status line under it names the permission mode).
READY = r"(shift\+tab to cycle|\? for shortcuts)"


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


def _home(tmp_path: Path, claude_json: dict[str, object]) -> Path:
    """The user's HOME: onboarding done (else Claude Code calls api.anthropic.com first), and git's config."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps(claude_json) + "\n")
    gitconfig = Path(os.environ["HOME"]) / ".gitconfig"
    if gitconfig.exists():
        shutil.copy(gitconfig, home / ".gitconfig")
    return home


def _env(server: ModelServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "CLAUDE"))}
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def _listing(home: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(home)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(home.rglob("*"))
        if not p.name.startswith("debug")
    }


def _exit(term: Terminal) -> str:
    term.type("/exit")
    term.wait_for(r"/exit", timeout=10)
    term.settle()
    term.keys("Enter")
    return term.wait_prompt(timeout=60)


def test_trust_and_api_key_are_asked_once_per_run(claude_bin: str, repo: Path, tmp_path: Path) -> None:
    home = _home(tmp_path, {"hasCompletedOnboarding": True})
    run = cli_start(repo)
    before = _listing(home)
    with ModelServer([]) as server, Terminal(tmp_path, _env(server, home), repo) as term:
        term.run(f"{SANDBOX} run {run.run_id} -- {claude_bin}")
        term.wait_for(TRUST)
        term.settle()
        term.press_until("Down", f"❯ {TRUST}")
        term.settle()
        term.keys("Enter")
        term.wait_for(KEY_DIALOG)
        term.settle()
        term.press_until("Up", r"❯ Yes")
        term.settle()
        term.keys("Enter")
        term.wait_for(READY)
        _exit(term)
        term.run("clear")
        term.wait_prompt(timeout=10)
        # The same run again: neither question comes back.
        term.run(f"{SANDBOX} run {run.run_id} -- {claude_bin}")
        shown = term.wait_for(READY)
        assert TRUST not in shown and KEY_DIALOG not in shown
        _exit(term)
    assert _listing(home) == before  # the user's ~/.claude.json unchanged, nothing made in the home
    saved = json.loads(Path(claude_code.config_home(run.dir), ".claude.json").read_text())
    assert saved["projects"][os.path.realpath(run.worktree)]["hasTrustDialogAccepted"] is True
    assert KEY in saved["customApiKeyResponses"]["approved"]


def test_default_mode_asks_before_write_and_exit_keeps_the_terminal(
    claude_bin: str, repo: Path, tmp_path: Path
) -> None:
    run = cli_start(repo)
    wt = Path(run.worktree)
    # The user trusted the worktree and approved the key in their own file: the run is seeded with both.
    trusted = {os.path.realpath(wt): {"hasTrustDialogAccepted": True}}
    home = _home(
        tmp_path,
        {"hasCompletedOnboarding": True, "customApiKeyResponses": {"approved": [KEY]}, "projects": trusted},
    )
    turn = write(str(wt / "new.py"), "print('new')\n")
    with ModelServer([turn]) as server, Terminal(tmp_path, _env(server, home), repo) as term:
        term.run("stty -a > ../stty-before.txt")
        term.wait_prompt(timeout=10)
        term.run(f"{SANDBOX} run {run.run_id} -- {claude_bin} --permission-mode default")
        term.wait_for(READY)
        term.settle()
        term.type("Create new.py, please.")
        term.wait_for(r"Create new\.py, please\.", timeout=10)
        term.settle()
        term.keys("Enter")
        term.wait_for(r"Do you want to create new\.py\?")
        assert not (wt / "new.py").exists()  # asked before the Write ran
        term.settle()
        term.keys("Enter")  # 1. Yes
        term.wait_for(r"Done\.", timeout=60)
        assert (wt / "new.py").read_text() == "print('new')\n"
        shown = _exit(term)
        hint = re.search(rf"sandbox run {re.escape(run.run_id)} -- claude --resume ([0-9a-f-]{{36}})", shown)
        assert hint is not None, shown
        term.run("stty -a > ../stty-after.txt")
        term.wait_prompt(timeout=10)
        # The prompt seen may be the one before the command: wait for the shell to have written it.
        after = repo.parent / "stty-after.txt"
        wait_until(lambda: after.exists() and after.stat().st_size > 0, timeout=30)
    assert (repo.parent / "stty-after.txt").read_text() == (repo.parent / "stty-before.txt").read_text()
    entry = reopen(run).entry(turn.tools[0].id)
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["new.py"]
    # The transcript is the run's: an unconfined 'claude --resume' in the user's repository cannot find it.
    transcripts = list(Path(claude_code.transcripts_dir(run.dir)).glob(f"*/{hint.group(1)}.jsonl"))
    assert len(transcripts) == 1
    assert not (home / ".claude").exists()


def test_gemini_saves_its_settings_in_the_run_and_nothing_in_the_users_home(
    gemini_bin: str, repo: Path, tmp_path: Path
) -> None:
    """Gemini CLI: no project-level hook warning, ``/theme`` saves (in the run's home), ``/quit`` prints
    the sandboxed way to resume, and the user's ``~/.gemini`` is as it was (no ``GEMINI.md`` made)."""
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text('{"security": {"auth": {"selectedType": "gemini-api-key"}}}')
    before = _listing(home)
    run = cli_start(repo)
    with gs.serve([gs.text("Done.")]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "GEMINI"))}
        env.update({"HOME": str(home), "GOOGLE_GEMINI_BASE_URL": server.base_url, "GEMINI_API_KEY": "test-key"})
        with Terminal(tmp_path, env, repo) as term:
            term.run(f"{SANDBOX} run {run.run_id} -- {gemini_bin}")
            term.wait_for("Type your message")
            term.settle()
            term.type("hello")
            term.wait_for(r"> hello", timeout=10)
            term.settle()
            term.keys("Enter")
            term.wait_for(r"Done\.")
            term.settle()
            term.type("/theme")
            term.wait_for(r"/theme", timeout=10)
            term.settle()
            term.keys("Enter")
            term.wait_for("Select Theme")
            term.settle()
            term.press_until("Up", r"●\s+\d+\. (?!Default Dark)")  # the selection moved off the current theme
            term.settle()
            term.keys("Enter")
            term.wait_for(r"Type your message", timeout=20)
            term.settle()
            term.type("/quit")
            term.wait_for(r"/quit", timeout=10)
            term.settle()
            term.keys("Enter")
            term.wait_prompt(timeout=60)
            shown = term.history()
    assert "project-level hooks" not in shown and "Failed to save" not in shown, shown
    hint = re.search(rf"sandbox run {re.escape(run.run_id)} -- gemini --resume ([0-9A-Za-z-]+)", shown)
    assert hint is not None, shown
    assert _listing(home) == before
    saved = json.loads((Path(gemini.cli_home(run.dir)) / ".gemini" / "settings.json").read_text())
    assert saved["ui"]["theme"] and saved["security"]["auth"]["selectedType"] == "gemini-api-key"
