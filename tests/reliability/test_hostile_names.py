"""Path names the agent chooses never make the user's listings lie.

A file name may hold a newline (or any byte but NUL and ``/``). Printed raw, ``z\\n  README.md``
reads as two lines of a listing, so ``apply`` would seem to have written (or skipped) the user's
``README.md`` too. Listings quote such names as git does (``"z\\n  README.md"``), and the
paths themselves are applied exactly as named.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import sandbox_cmd

EVIL = "z\n  README.md"


def lines(proc_out: bytes) -> list[str]:
    return proc_out.decode(errors="replace").splitlines()


def test_a_newline_in_a_name_is_quoted_in_every_listing(repo: Path) -> None:
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    # By the library's write helper: the same name from any tool.
    proc = sandbox_cmd("write", run_id, EVIL, cwd=repo, input=b"evil\n")
    assert proc.returncode == 0, proc.stderr.decode()
    for args in (["log", run_id], ["log", run_id, "--call", "@"], ["apply", run_id, "--dry-run"], ["apply", run_id]):
        proc = sandbox_cmd(*args, cwd=repo)
        assert proc.returncode == 0, proc.stderr.decode()
        out = lines(proc.stdout)
        assert not any(line.strip() == "README.md" for line in out), (args, out)
        assert any('"z\\n  README.md"' in line for line in out), (args, out)
    assert (repo / EVIL).read_text() == "evil\n"
    assert (repo / "README.md").read_text() == "hello\nuser edit\n"
    proc = sandbox_cmd("undo", run_id, cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    assert not any(line.strip() == "README.md" for line in lines(proc.stdout)), proc.stdout
    assert not (repo / EVIL).exists()


def test_compare_quotes_the_paths_where_runs_disagree(repo: Path) -> None:
    runs = [r["run"] for r in json.loads(sandbox_cmd("start", "--count", "2", "--json", cwd=repo).stdout)["runs"]]
    for run_id, data in zip(runs, (b"one\n", b"two\n"), strict=True):
        proc = sandbox_cmd("write", run_id, EVIL, cwd=repo, input=data)
        assert proc.returncode == 0, proc.stderr.decode()
    proc = sandbox_cmd("compare", runs[0], cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    out = lines(proc.stdout)
    assert not any(line.strip().startswith("README.md") for line in out), out
    assert any(line.startswith('  "z\\n  README.md": ') for line in out), out
