"""``sandbox status`` counts a bounded number of files for the run's disk use (``--disk``: all of them).

The cost is counted, not timed: a child process with an audit hook counts the directories
``status`` reads below the run's worktree (``os.scandir`` events).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import make_repo, sandbox_cmd

from sandbox.fast.views import STATUS_DISK_ENTRIES

DIRS = 1_500
FILES = 10

CHILD = """
import sys
root, argv = sys.argv[1], sys.argv[2:]
reads = [0]
def hook(event, args):
    if event == "os.scandir" and args and isinstance(args[0], str) and args[0].startswith(root):
        reads[0] += 1
sys.addaudithook(hook)
from sandbox.cli import main
sys.argv = ["sandbox", *argv]
try:
    main()
finally:
    sys.stderr.write(f"\\nREADS {reads[0]}\\n")
"""


def status(repo: Path, worktree: str, *args: str) -> tuple[str, int]:
    """``sandbox status ARGS`` in ``repo``: (its output, the directories it read below ``worktree``)."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, worktree, "status", *args],
        cwd=repo,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    reads = int(proc.stderr.decode().rsplit("READS ", 1)[1].split()[0])
    return proc.stdout.decode(), reads


def test_status_counts_at_most_its_bound_and_disk_counts_all(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"README.md": "hello\n", ".gitignore": "build/\n"})
    assert sandbox_cmd("start", cwd=repo).returncode == 0
    proc = sandbox_cmd("exec", "--isolate", "off", "--", "sh", "-c", "echo more >> README.md", cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    worktree = sandbox_cmd("path", cwd=repo).stdout.decode().strip()
    small, reads = status(repo, worktree)
    assert "disk:" in small and "more than" not in small  # a small run: the whole sum, as before
    # The agent's build output: ignored, never recorded, and more files than status counts.
    for i in range(DIRS):
        d = Path(worktree, "build", f"d{i:04}")
        d.mkdir(parents=True)
        for j in range(FILES):
            (d / f"f{j}").write_text("x")
    assert DIRS * (FILES + 1) > STATUS_DISK_ENTRIES

    bounded, reads = status(repo, worktree)
    assert reads <= STATUS_DISK_ENTRIES // (FILES + 1) + 10 < DIRS
    line = next(x for x in bounded.splitlines() if x.strip().startswith("disk:"))
    assert "more than" in line and "sandbox status --disk" in line, line

    whole, reads = status(repo, worktree, "--disk")
    assert reads >= DIRS
    line = next(x for x in whole.splitlines() if x.strip().startswith("disk:"))
    assert "more than" not in line and "worktree and the run's own git dir" in line, line

    bounded_json = json.loads(status(repo, worktree, "--json")[0])
    whole_json = json.loads(status(repo, worktree, "--json", "--disk")[0])
    assert bounded_json["disk_complete"] is False and whole_json["disk_complete"] is True
    assert 0 < bounded_json["disk_bytes"] < whole_json["disk_bytes"]
    # list --disk sums every file of every run (tests/cli/test_list_disk.py: list alone counts as status does).
    listed = json.loads(sandbox_cmd("list", "--json", "--disk", cwd=repo).stdout)[0]
    assert listed["disk_complete"] is True and listed["disk_bytes"] >= whole_json["disk_bytes"] - 64 * 1024
