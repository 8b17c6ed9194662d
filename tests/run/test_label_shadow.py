"""A label never shadows a run id (issue 33): one that reads as an id is refused at start and at fetch,
and one that is a prefix of another run's id (it arrived by plain git) is refused as ambiguous, naming both."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, sandbox_cmd, two_clones
from tests.ledger_forge import rewrite

REFSPEC = "refs/sandbox/*:refs/sandbox/*"


def _start(where: Path, *args: str) -> str:
    started = sandbox_cmd("start", "--json", *args, cwd=where)
    assert started.returncode == 0, started.stderr
    return str(json.loads(started.stdout)["run"])


def test_an_id_shaped_label_is_refused_at_start(repo: Path) -> None:
    for label in ("c5a4", "0123abcd", "f"):
        done = sandbox_cmd("start", "--label", label, cwd=repo)
        err = done.stderr.decode()
        assert done.returncode == 2 and "must not look like a run id" in err and len(err.splitlines()) == 1, err
    assert sandbox_cmd("start", "--label", "c5a4-retry", cwd=repo).returncode == 0


def _two_clones(tmp_path: Path) -> tuple[Path, Path, Path]:
    return two_clones(tmp_path, {"README.md": "hello\n"})


def test_a_label_that_is_a_prefix_of_your_runs_id_is_ambiguous(tmp_path: Path) -> None:
    a, b, bare = _two_clones(tmp_path)
    mine = _start(b)
    assert sandbox_cmd("exec", mine, "--", "sh", "-c", "echo mine > mine.txt", cwd=b).returncode == 0
    theirs = _start(a, "--label", "placeholder")
    assert sandbox_cmd("exec", theirs, "--", "sh", "-c", "echo theirs > README.md", cwd=a).returncode == 0
    git(a, "push", "-q", "origin", REFSPEC)
    # The label set by hand in the record (as anyone writing the remote can): the prefix of your run's id.
    rewrite(bare, theirs, lambda i, e: {**e, "run": {**e["run"], "label": mine[:4]}} if e.get("run") else e)
    git(b, "fetch", "-q", "origin", REFSPEC)
    applied = sandbox_cmd("apply", mine[:4], cwd=b)
    err = applied.stderr.decode()
    assert applied.returncode != 0 and "ambiguous" in err and mine in err and theirs in err, err
    assert (b / "README.md").read_text() == "hello\n" and not (b / "mine.txt").exists()
    for name in ("status", "path"):  # the fast path too: refused in the same words
        shown = sandbox_cmd(name, mine[:4], cwd=b)
        assert shown.returncode != 0 and "ambiguous" in shown.stderr.decode(), shown.stderr
    assert sandbox_cmd("apply", mine, cwd=b).returncode == 0 and (b / "mine.txt").read_text() == "mine\n"


def test_a_run_with_an_id_shaped_label_is_refused_at_fetch(tmp_path: Path) -> None:
    a, b, bare = _two_clones(tmp_path)
    theirs = _start(a, "--label", "placeholder")
    assert sandbox_cmd("push", theirs, cwd=a).returncode == 0
    rewrite(bare, theirs, lambda i, e: {**e, "run": {**e["run"], "label": "c5a4"}} if e.get("run") else e)
    fetched = sandbox_cmd("fetch", "origin", theirs, cwd=b)
    out = (fetched.stdout + fetched.stderr).decode()
    assert "reads as a run id" in out, out
    assert git(b, "for-each-ref", "refs/sandbox/") == ""


def test_apply_undo_drop_and_continue_name_the_run_they_act_on(tmp_path: Path) -> None:
    a, b, _bare = _two_clones(tmp_path)
    mine = _start(b, "--label", "try-env")
    assert sandbox_cmd("exec", mine, "--", "sh", "-c", "echo mine > mine.txt", cwd=b).returncode == 0
    for args in (("apply", "try-env"), ("undo", mine[:5])):
        done = sandbox_cmd(*args, cwd=b)
        err = done.stderr.decode()
        assert done.returncode == 0 and f"acting on run {mine} (label 'try-env', made here)." in err, err
    quiet = sandbox_cmd("apply", mine, cwd=b)  # the whole id names it already: nothing to add
    assert quiet.returncode == 0 and b"acting on" not in quiet.stderr
    theirs = _start(a)
    assert sandbox_cmd("push", theirs, cwd=a).returncode == 0
    assert sandbox_cmd("fetch", "origin", theirs, cwd=b).returncode == 0
    dropped = sandbox_cmd("drop", theirs[:6], cwd=b)
    err = dropped.stderr.decode()
    assert dropped.returncode == 0 and f"acting on run {theirs} (no label, fetched from origin)." in err, err
