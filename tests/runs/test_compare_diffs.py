"""``sandbox compare`` for choosing a winner (issue 34 item 7): each run's diff of the paths the runs changed
differently (--stat for short), recorded checks shown without --check, a failed check apart from failed calls,
runs in one order however they are named."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli


def sb(where: Path, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["-C", str(where), *args], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def test_compare_shows_diffs_recorded_checks_and_keeps_its_order(repo: Path) -> None:
    a, b = (r["run"] for r in json.loads(sb(repo, "start", "--count", "2", "--json"))["runs"])
    sb(repo, "exec", a, "--isolate", "off", "--", "sh", "-c", "printf 'X = 2\\n' > src/util.py; echo same > s.txt")
    sb(repo, "exec", b, "--isolate", "off", "--", "sh", "-c", "printf 'X = 3\\n' > src/util.py; echo same > s.txt")
    text = sb(repo, "compare", a, b)
    assert f"== {a}" in text and f"== {b}" in text
    mine, theirs = text.split(f"== {a}")[1].split(f"== {b}")
    assert "\n+X = 2\n" in mine and "\n+X = 3\n" in theirs and "s.txt" not in mine + theirs  # s.txt: the same in both
    assert "\\n" not in mine  # lines as git prints them, not one line of escaped newlines
    stat = sb(repo, "compare", a, b, "--stat")
    assert "src/util.py | 2 +-" in stat and "+X = 2" not in stat
    # A check: recorded as a call; shown afterwards without --check; failing it is not a failed call.
    out = json.loads(sb(repo, "compare", a, b, "--isolate", "off", "--check", "grep -q 'X = 2' src/util.py", "--json"))
    assert {r["run"]: r["check"]["exit_code"] for r in out["runs"]} == {a: 0, b: 1}
    again = json.loads(sb(repo, "compare", b, a, "--json"))
    assert [r["run"] for r in again["runs"]] == [r["run"] for r in out["runs"]] == [a, b]  # oldest first
    rows = {r["run"]: r for r in again["runs"]}
    assert rows[b]["check"]["exit_code"] == 1 and rows[b]["failed_calls"] == 0
    assert "src/util.py" in again["diffs"][a] and "s.txt" not in again["diffs"][a]
    table = sb(repo, "compare", b, a).splitlines()
    row_b = next(line for line in table if line.startswith(b))
    assert "FAILED (1)" in row_b and row_b.split()[2] == "0"
    assert "passed (0)" in next(line for line in table if line.startswith(a))
