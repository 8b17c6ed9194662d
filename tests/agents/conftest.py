"""End-to-end tests with the real agent binaries (pinned in tests/agents/package.json).

The binaries are installed by ``make agents`` (``make test`` depends on it). When they are missing the
tests fail with the command that installs them; they are never skipped, in CI or anywhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

BIN_DIR = Path(__file__).resolve().parent / "node_modules" / ".bin"


def agent_binary(name: str) -> str:
    """The absolute path of a real agent binary (``claude``, ``gemini`` or ``codex``), or a test failure."""
    path = BIN_DIR / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"The real {name!r} binary is not installed; run 'make agents' (pinned npm packages).")
    return str(path)


@pytest.fixture
def claude_bin() -> str:
    """The real Claude Code binary."""
    return agent_binary("claude")


@pytest.fixture
def gemini_bin() -> str:
    """The real Gemini CLI binary."""
    return agent_binary("gemini")


@pytest.fixture
def codex_bin() -> str:
    """The real Codex CLI (its native binary comes from the platform package, e.g. @openai/codex-linux-x64)."""
    return agent_binary("codex")
