"""Helpers shared by the hook tests: recorded payloads from fixtures/ and a run to replay them on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import Project

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CLAUDE_TOOLS = sorted(p.stem for p in (FIXTURES / "claude-code").glob("*.json"))


def fixture(agent: str, tool: str, cwd: str | Path) -> dict[str, Any]:
    """A fixture document with its ``__CWD__`` placeholders filled in."""
    text = (FIXTURES / agent / f"{tool}.json").read_text().replace("__CWD__", str(cwd))
    doc: dict[str, Any] = json.loads(text)
    return doc


def payload(tool: str, which: str, cwd: str | Path, call_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """One Claude Code payload (``pre``, ``post`` or ``failure``), optionally with another call id."""
    data: dict[str, Any] = fixture("claude-code", tool, cwd)[which]
    if call_id:
        data["tool_use_id"] = call_id
    data.update(changes)
    return data


def start_run(root: Path) -> Run:
    """A new run of the repository at ``root``."""
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    """The same run opened afresh (what another process would see)."""
    return Run.open(Project(run.project.common_dir), run.run_id)


def hook(agent: str, data: Any, *args: str) -> Result:
    """Invoke ``sandbox hook AGENT`` through click with ``data`` (JSON-encoded unless bytes) on stdin."""
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return CliRunner().invoke(cli, ["hook", agent, *args], input=raw, catch_exceptions=False)
