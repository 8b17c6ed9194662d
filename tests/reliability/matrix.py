"""The crash matrix: rows filled by test_crash_matrix, printed at the end of the session.

Standard library only: tests/conftest.py imports it on the pytest-xdist controller too, which runs no
test itself and gathers the rows each worker sends back (``workeroutput``) before printing them.
"""

from __future__ import annotations

from pathlib import Path

#: Rows of the crash matrix, filled by test_crash_matrix (on a worker: sent to the controller at its end).
MATRIX_ROWS: list[dict[str, str]] = []
MATRIX_FILE = Path(__file__).with_name("last_matrix.txt")
COLUMNS = ("point", "operation", "recovery", "result")


def format_matrix(rows: list[dict[str, str]]) -> str:
    """The crash matrix as a plain-text table."""
    widths = {c: max([len(c)] + [len(r.get(c, "")) for r in rows]) for c in COLUMNS}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in COLUMNS)]
    lines.append("  ".join("-" * widths[c] for c in COLUMNS))
    for row in sorted(rows, key=lambda r: (r["point"], r["operation"])):
        lines.append("  ".join(row.get(c, "").ljust(widths[c]) for c in COLUMNS).rstrip())
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, str]]) -> tuple[str, str]:
    """The matrix's one-line header and its table."""
    points = {r["point"].split("@")[0] for r in rows}
    passed = sum(1 for r in rows if r["result"].startswith("ok"))
    header = f"crash matrix: {len(rows)} cases over {len(points)} fault points, {passed} recovered"
    return header, format_matrix(rows)
