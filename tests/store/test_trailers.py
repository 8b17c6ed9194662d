"""The sandbox's own commits name what they belong to in git trailers, built in one place."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox.run.run import Run
from sandbox.store import trailers
from sandbox.store.project import Project
from tests.conftest import git


def test_the_message_is_subject_body_then_one_trailer_per_line() -> None:
    assert trailers.message("subject", [(trailers.RUN, "r1")]) == "subject\n\nSandbox-Run: r1\n"
    text = trailers.message("s", [(trailers.RUN, "r"), (trailers.SEQ, 3)], body="line one\n\nChanged: a")
    assert text == "s\n\nline one\n\nChanged: a\n\nSandbox-Run: r\nSandbox-Seq: 3\n"


def parsed(root: Path, commit: str) -> dict[str, str]:
    """The trailers of ``commit`` as git itself reads them (``git interpret-trailers --parse``)."""
    body = git(root, "log", "-1", "--format=%B", commit)
    proc = subprocess.run(
        ["git", "interpret-trailers", "--parse"], cwd=root, input=body, capture_output=True, text=True, check=True
    )
    return dict(line.split(": ", 1) for line in proc.stdout.splitlines() if line)


def test_git_reads_the_trailers_of_a_snapshot_and_a_call(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("edit") as call:
        call.write("a.txt", "a\n")
    entry = call.entry
    assert entry is not None and entry.commit is not None
    common = Path(run.project.common_dir)
    assert parsed(common, run.base) == {"Sandbox-Run": run.run_id}
    assert parsed(common, entry.commit) == {
        "Sandbox-Run": run.run_id,
        "Sandbox-Call": entry.call_id,
        "Sandbox-Status": "succeeded",
    }
