"""``sandbox compare`` counts every way a call did not succeed: failed, interrupted, violation (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.models import CallStatus
from sandbox.run.run import Run
from sandbox.store.project import Project


def _sb(repo: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["-C", str(repo), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_compare_counts_interrupted_and_violation_calls(repo: Path) -> None:
    a, b = (r["run"] for r in json.loads(_sb(repo, "start", "--count", "2", "--json"))["runs"])
    project, _workdir, _ = Project.discover(str(repo))
    run = Run.open(project, a)
    run.start_call("Bash", {"command": "sleep 30"}, call_id="toolu_stopped")
    run.finish_call("toolu_stopped", CallStatus.failed, paths=[], error="interrupted: Esc", mark="interrupted")
    run.start_call("Bash", {"command": "false"}, call_id="toolu_failed")
    run.finish_call("toolu_failed", CallStatus.failed, paths=[], error="exit code 1")
    run.refuse_call("Bash", {"command": "rm -r x"}, "the user said no", call_id="toolu_refused")
    run.violation("toolu_refused", "it ran anyway")
    out = json.loads(_sb(repo, "compare", a, b, "--json"))
    rows = {r["run"]: r for r in out["runs"]}
    assert (rows[a]["failed_calls"], rows[a]["interrupted_calls"], rows[a]["violation_calls"]) == (1, 1, 1)
    assert (rows[b]["failed_calls"], rows[b]["interrupted_calls"], rows[b]["violation_calls"]) == (0, 0, 0)
    header, first, second = _sb(repo, "compare", a, b).splitlines()[:3]
    assert header.split()[:5] == ["RUN", "CALLS", "FAILED", "INTERRUPTED", "VIOLATION"]
    assert {first.split()[0]: first.split()[1:5], second.split()[0]: second.split()[1:5]} == {
        a: ["3", "1", "1", "1"],
        b: ["0", "0", "0", "0"],
    }
