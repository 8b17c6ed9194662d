"""Fixtures of the reliability suite, and the crash matrix printed at the end of the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import MATRIX_FILE, MATRIX_ROWS, make_user_repo

COLUMNS = ("point", "operation", "recovery", "result")


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """A user's repository with committed, staged, uncommitted, untracked and ignored files."""
    return make_user_repo(tmp_path / "repo")


def format_matrix(rows: list[dict[str, str]]) -> str:
    """The crash matrix as a plain-text table."""
    widths = {c: max([len(c)] + [len(r.get(c, "")) for r in rows]) for c in COLUMNS}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in COLUMNS)]
    lines.append("  ".join("-" * widths[c] for c in COLUMNS))
    for row in sorted(rows, key=lambda r: (r["point"], r["operation"])):
        lines.append("  ".join(row.get(c, "").ljust(widths[c]) for c in COLUMNS).rstrip())
    return "\n".join(lines) + "\n"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not MATRIX_ROWS:
        return
    table = format_matrix(MATRIX_ROWS)
    points = {r["point"].split("@")[0] for r in MATRIX_ROWS}
    passed = sum(1 for r in MATRIX_ROWS if r["result"].startswith("ok"))
    header = f"crash matrix: {len(MATRIX_ROWS)} cases over {len(points)} fault points, {passed} recovered"
    terminalreporter.section("crash matrix")
    terminalreporter.write_line(header)
    terminalreporter.write(table)
    try:
        MATRIX_FILE.write_text(header + "\n" + table)
    except OSError:
        pass
