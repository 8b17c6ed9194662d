"""Fixtures of the reliability suite (the crash matrix is printed by tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import make_user_repo


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """A user's repository with committed, staged, uncommitted, untracked and ignored files."""
    return make_user_repo(tmp_path / "repo")
