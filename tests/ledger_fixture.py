"""Restore and observe the ledger fixture written by ``fixtures/ledger-v1/make_fixture.py``.

The fixture is a git bundle of a repository with one run whose ledger was written by the sandbox
as it was before its persisted state became typed (issue 14): apply, undo, redo, an undo in the
sandbox, drift, a compensation, approvals, a denial, checkpoints, a rollback and a resume. The
generator restores the bundle and records what :func:`observe` sees (``expected.json``); the
migration test (tests/store/test_ledger_migration.py) restores it again with today's code and checks that
every observation is identical.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "ledger-v1"
BUNDLE = FIXTURE / "ledger.bundle"
EXPECTED = FIXTURE / "expected.json"
#: The user's working tree when the bundle was made, as a commit (the run's apply/undo state refers to it).
USER_TREE_REF = "refs/fixture/user-tree"


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode()


def restore(dest: Path) -> Path:
    """A fresh repository at ``dest`` with the fixture's refs and the user's tree checked out."""
    dest.mkdir(parents=True)
    _git(dest, "init", "-q")
    _git(dest, "fetch", "-q", "--update-head-ok", str(BUNDLE), "refs/*:refs/*")
    _git(dest, "symbolic-ref", "HEAD", "refs/heads/main")
    _git(dest, "read-tree", "refs/heads/main")
    _git(dest, "checkout-index", "-a", "-f")  # a fresh, empty directory: nothing of the user's is overwritten
    # Then the user's tree as it was (applied changes included), without touching the index.
    for rel in _git(dest, "ls-tree", "-r", "--name-only", "-z", "refs/heads/main").split("\0"):
        if rel:
            (dest / rel).unlink()
    for line in _git(dest, "ls-tree", "-r", "-z", USER_TREE_REF).split("\0"):
        if not line:
            continue
        meta, rel = line.split("\t", 1)
        mode, _kind, oid = meta.split()
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(subprocess.run(["git", "cat-file", "blob", oid], cwd=dest, capture_output=True).stdout)
        if mode == "100755":
            path.chmod(0o755)
    return dest


def _run_id(repo: Path) -> str:
    names = _git(repo, "for-each-ref", "--format=%(refname)", "refs/sandbox/").split()
    ids = sorted({n.split("/")[2] for n in names})
    assert len(ids) == 1, ids
    return ids[0]


def _scrub(value: Any, root: str) -> Any:
    text = json.dumps(value, sort_keys=True, default=str)
    return json.loads(text.replace(root, "<ROOT>"))


def _plain(value: Any) -> Any:
    """A record as JSON data, whether it is a model (typed state) or a dict (as the fixture was made)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if dump is not None else value


def observe(repo: Path) -> dict[str, Any]:
    """What status, log, the fold, the undo stack, the apply plan and the resume decisions say."""
    from click.testing import CliRunner

    from sandbox.cli import cli
    from sandbox.merge import planning
    from sandbox.recovery.resumereport import classify
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    run_id = _run_id(repo)
    run = Run.open(Project(str(repo / ".git")), run_id)
    state = run.state()
    out: dict[str, Any] = {"run_id": run_id}
    out["fold"] = state.model_dump(mode="json", exclude={"event_ids"})
    # The fold's bookkeeping: a kind with no events is an empty list now and was an absent key.
    out["fold"]["data"] = {k: v for k, v in out["fold"]["data"].items() if v not in ({}, [])}
    out["entries"] = [e.model_dump(mode="json") for e in run.entries()]
    out["events"] = [(ev.kind.value, ev.call_id) for _oid, ev in run.events()]
    out["classify"] = {e.call_id: classify(e) for e in run.entries()}
    plan = planning.plan(run)
    out["plan"] = [
        {"path": p.path, "action": p.action, "reason": p.reason, "hint": p.hint, "record": _plain(p.record)}
        for p in sorted(plan.paths, key=lambda p: p.path)
    ]
    runner = CliRunner()
    for name, args in {
        "status": ["status", run_id, "--json"],
        "log": ["log", run_id, "--json"],
        "apply_dry": ["apply", run_id, "--dry-run", "--json"],
        # The fixture's newest call is not applied: an undo in the run (today's explicit spelling).
        "undo": ["undo", run_id, "--in-run", "--force", "--json"],
    }.items():
        res = runner.invoke(cli, ["-C", str(repo), *args])
        text = res.output
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        out[name] = {"exit": res.exit_code, "output": parsed}
    tree = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            p = Path(dirpath) / f
            tree[str(p.relative_to(repo))] = p.read_bytes().decode("utf-8", "replace")
    out["user_tree_after_undo"] = dict(sorted(tree.items()))
    return _scrub(out, str(repo))
