"""``sandbox list`` counts a bounded number of files per run for its disk column (``--disk``: all of
them), as ``status`` does; so does ``sandbox ui``'s runs page.

The cost is counted, not timed: a child process with an audit hook counts the directories ``list``
reads below the runs' homes (``os.scandir`` events).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import make_repo, sandbox_cmd

from sandbox.fast.foldjson import RunRowJson
from sandbox.fast.views import STATUS_DISK_ENTRIES
from sandbox.runs.summary import summarize_runs
from sandbox.store.project import Project
from sandbox.ui.pages import runs_page
from tests.cli.test_status_disk import CHILD

DIRS = 1_500
FILES = 10


def listing(repo: Path, root: str, *args: str) -> tuple[str, int]:
    """``sandbox list ARGS`` in ``repo``: (its output, the directories it read below ``root``)."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, root, "list", *args],
        cwd=repo,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    reads = int(proc.stderr.decode().rsplit("READS ", 1)[1].split()[0])
    return proc.stdout.decode(), reads


def test_list_counts_at_most_its_bound_per_run_and_disk_counts_all(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"README.md": "hello\n", ".gitignore": "build/\n"})
    for label in ("big", "small"):
        assert sandbox_cmd("start", "--label", label, cwd=repo).returncode == 0
    worktree = sandbox_cmd("path", "big", cwd=repo).stdout.decode().strip()
    # The agent's build output in one run: ignored, never recorded, more files than list counts.
    for i in range(DIRS):
        d = Path(worktree, "build", f"d{i:04}")
        d.mkdir(parents=True)
        for j in range(FILES):
            (d / f"f{j}").write_text("x")
    assert DIRS * (FILES + 1) > STATUS_DISK_ENTRIES

    bounded, reads = listing(repo, worktree)
    assert reads <= STATUS_DISK_ENTRIES // (FILES + 1) + 10 < DIRS
    big = next(x for x in bounded.splitlines() if x.rstrip().endswith("big"))
    small = next(x for x in bounded.splitlines() if x.rstrip().endswith("small"))
    assert " >" in big and " >" not in small, bounded
    assert "'sandbox list --disk' counts them all" in bounded.splitlines()[-1]

    whole, reads = listing(repo, worktree, "--disk")
    assert reads >= DIRS
    assert " >" not in whole and "--disk" not in whole

    rows = {r["label"]: r for r in json.loads(listing(repo, worktree, "--json")[0])}
    whole_rows = {r["label"]: r for r in json.loads(listing(repo, worktree, "--json", "--disk")[0])}
    assert rows["big"]["disk_complete"] is False and whole_rows["big"]["disk_complete"] is True
    assert rows["small"]["disk_complete"] is True and whole_rows["small"]["disk_complete"] is True
    assert 0 < rows["big"]["disk_bytes"] < whole_rows["big"]["disk_bytes"]

    # The full path (no fold cache read) and the runs page count the same way.
    project, _, _ = Project.discover(str(repo))
    full = {r["label"]: r for r in summarize_runs(project, disk=True, disk_limit=STATUS_DISK_ENTRIES)}
    assert full["big"]["disk_complete"] is False and full["small"]["disk_complete"] is True
    page = runs_page(list(full.values()), {})
    assert page.count("more than ") == 1


def test_runs_page_says_more_than_past_the_bound() -> None:
    row = RunRowJson(
        run="r1", label=None, created_at=None, worktree_exists=True, calls=0, changed_paths=0, disk_bytes=2048
    )
    row["disk_complete"] = False
    assert "more than 2.0 KiB" in runs_page([row], {})
    row["disk_complete"] = True
    assert "more than" not in runs_page([row], {}) and "2.0 KiB" in runs_page([row], {})
