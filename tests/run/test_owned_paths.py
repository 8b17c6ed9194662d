"""The sandbox's own files in a worktree (agents' hook settings) are never the agent's.

One list per run (``<run dir>/private.json``, :mod:`sandbox.run.include`) keeps them out of a call's
files, ``agent_session`` cuts, drift at resume, ``diff`` (text and JSON) and what ``apply`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import sandbox_cmd, user_state

SETTINGS = {"gemini": ".gemini/settings.json", "claude-code": ".claude/settings.local.json"}


def start(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    return str(info["run"]), Path(info["worktree"])


def install(repo: Path, agent: str, run_id: str) -> None:
    proc = sandbox_cmd("hooks", "install", agent, run_id, cwd=repo)
    assert proc.returncode == 0, proc.stderr


def log(repo: Path, run_id: str) -> list[dict[str, object]]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries: list[dict[str, object]] = json.loads(proc.stdout)
    return entries


def paths_of(entry: dict[str, object]) -> list[str]:
    return [f["path"] for f in entry["files"]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("agent", sorted(SETTINGS))
def test_not_in_a_call_nor_in_a_cut(repo: Path, agent: str) -> None:
    run_id, wt = start(repo)
    install(repo, agent, run_id)
    settings = SETTINGS[agent]
    # A command that rewrites the settings file and another file: only the other is the call's.
    script = f"printf '{{}}' > {settings} && echo x > a.txt"
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    # An agent under `sandbox run` whose change is cut at its end (no hooks of its own fire).
    proc = sandbox_cmd("run", run_id, "--hooks", agent, "--", "sh", "-c", "echo y > b.txt", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert (wt / settings).exists()
    assert [paths_of(e) for e in log(repo, run_id)] == [["a.txt"], ["b.txt"]]


def test_not_drift_at_resume(repo: Path) -> None:
    run_id, wt = start(repo)
    install(repo, "gemini", run_id)
    (wt / "stray.txt").write_text("changed outside any call\n")
    proc = sandbox_cmd("resume", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert [d["path"] for d in json.loads(proc.stdout)["drift"]] == ["stray.txt"]


def test_not_in_diff_nor_apply_even_when_recorded_earlier(repo: Path) -> None:
    """A settings file recorded before the sandbox took it over stays out of the patch and of apply."""
    before = user_state(repo)
    run_id, wt = start(repo)
    proc = sandbox_cmd("write", run_id, SETTINGS["gemini"], cwd=repo, input=b'{"theme": "dark"}\n')
    assert proc.returncode == 0, proc.stderr
    proc = sandbox_cmd("write", run_id, "src/app.py", cwd=repo, input=b"print('agent')\n")
    assert proc.returncode == 0, proc.stderr
    install(repo, "gemini", run_id)
    text = sandbox_cmd("diff", run_id, cwd=repo).stdout.decode()
    assert "src/app.py" in text and ".gemini" not in text
    stat = sandbox_cmd("diff", run_id, "--stat", cwd=repo).stdout.decode()
    assert "src/app.py" in stat and ".gemini" not in stat
    files = json.loads(sandbox_cmd("diff", run_id, "--json", cwd=repo).stdout)["files"]
    assert [f["path"] for f in files] == ["src/app.py"]
    assert user_state(repo) == before
    applied = sandbox_cmd("apply", run_id, cwd=repo)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "src" / "app.py").read_text() == "print('agent')\n"
    assert not (repo / ".gemini").exists()


def test_hooks_install_gemini_names_the_trust_for_the_worktree(repo: Path) -> None:
    run_id, wt = start(repo)
    proc = sandbox_cmd("hooks", "install", "gemini", run_id, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.decode().splitlines() if "GEMINI_CLI_TRUSTED_FOLDERS_PATH=" in x][0]
    path = line.split("GEMINI_CLI_TRUSTED_FOLDERS_PATH=")[1].split()[0].strip("'")
    assert json.loads(Path(path).read_text()) == {str(wt.resolve()): "TRUST_FOLDER"}
