"""A confined ``sandbox exec`` keeps the agents' state read-only and creates nothing in your home (issue 26).

Only ``sandbox run`` gives an agent its state, in a home of the run's own (``sandbox.agent.agenthome``);
a command run with ``sandbox exec`` (or through ``sandbox mcp``) is not an agent.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import sandbox_cmd

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

#: What each probe tries to write, below the user's home.
PROBES = (".claude/new.txt", ".claude.json", ".gemini/new.txt", ".gemini/GEMINI.md", ".codex/new.txt",
          ".claude/settings.json")  # fmt: skip


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path below ``root`` with a file's bytes (None for a directory)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = None
        for name in filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


def _start(repo: Path, env: dict[str, str]) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["run"])


@pytest.mark.parametrize("existing", [True, False], ids=["agents-used-before", "no-agent-state"])
def test_a_confined_exec_can_write_no_agent_state_and_creates_nothing_in_home(
    repo: Path, tmp_path: Path, existing: bool
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if existing:
        for folder in (".claude", ".gemini", ".codex"):
            (home / folder).mkdir()
        (home / ".claude.json").write_text('{"hasCompletedOnboarding": true}\n')
        (home / ".claude" / "settings.json").write_text("{}\n")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
    run_id = _start(repo, env)
    before = _tree(home)
    for probe in PROBES:
        target = home / probe
        script = 'mkdir -p "$(dirname "$1")" 2>/dev/null; echo planted > "$1"'
        proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", script, "probe", str(target), cwd=repo, env=env)
        assert proc.returncode != 0, (probe, proc.stderr)
    assert _tree(home) == before  # nothing written, nothing created (no GEMINI.md, no ~/.claude)
    entries = json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo, env=env).stdout)
    assert len(entries) == len(PROBES) and all(e["files"] == [] for e in entries)
