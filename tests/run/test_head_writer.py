"""The run's head moves through one writer (issue 33): ``set_head_ref``, reached after a write only through
``RunCore.sync_head`` (a call's commit, an undo or redo in the run), and at a run's making (start, fork, fetch)."""

from __future__ import annotations

import re
from pathlib import Path

import sandbox
from sandbox.run.run import Run
from sandbox.store import layout
from tests.conftest import write
from tests.hook_fixtures import start_run

ROOT = Path(sandbox.__file__).resolve().parent


def test_only_set_head_ref_writes_a_runs_head_ref() -> None:
    """No module builds the head ref's name to write it but the one writer (reads: the fold cache's check)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"ref_name\([^)]*\"head\"\)", line):
                found.append((str(path.relative_to(ROOT)), line.strip()[:30]))
    assert found == [
        ("fast/foldcache.py", 'if state.get("head") is None o'),  # a read
        ("run/core.py", "name = layout.ref_name(self.ru"),  # _sync_head_ref: the name it compares
        ("run/core.py", "repo.references.create(layout."),  # set_head_ref
    ]
    core = (ROOT / "run" / "core.py").read_text(encoding="utf-8")
    assert core.count("references.create(name") == 0  # the read above only names it; set_head_ref writes


def test_an_undo_in_the_run_moves_the_head_ref_through_sync_head(repo: Path) -> None:
    from sandbox.merge.undo import undo

    run = start_run(repo)
    call = run.start_call("write", {"file_path": "a.txt"}, call_id="c1")
    write(Path(run.worktree), "a.txt", "one\n")
    done = run.finish_call(call, "succeeded", paths=["a.txt"])
    ref = layout.ref_name(run.run_id, "head")
    assert str(run.repo.references[ref].target) == done.commit
    undo(run, in_run=True, force=True)
    again = Run.open(run.project, run.run_id)
    assert str(again.repo.references[ref].target) == again.state().head == run.base
