"""The stack of operations in the user's tree (:func:`sandbox.merge.treeops.stack`): read once per ledger tip."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.errors import SandboxError
from sandbox.merge import mergeback
from sandbox.merge.undo import redo, undo
from sandbox.models import Event
from tests.conftest import tree_digest
from tests.merge.test_apply import agent_changes, start


def test_undo_and_redo_walk_the_ledger_once(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """undo chose the operation and then checked it under the locks, walking every event twice."""
    run = start(repo)
    agent_changes(run)
    original = tree_digest(repo)
    mergeback.apply(run)
    applied = tree_digest(repo)
    walks: list[str | None] = []
    real = run.events

    def counted(tip: str | None = None) -> list[tuple[str, Event]]:
        walks.append(tip)
        return real(tip)

    monkeypatch.setattr(run, "events", counted)
    assert undo(run).restored and tree_digest(repo) == original
    assert len(walks) == 1
    walks.clear()
    assert redo(run).applied and tree_digest(repo) == applied
    assert len(walks) == 1
    # A new event (the redo) is a new tip: the stack is read again, and says the apply stands.
    walks.clear()
    assert undo(run).restored and tree_digest(repo) == original
    assert len(walks) == 1


def test_redo_of_a_call_past_an_undone_operation_walks_the_ledger_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redo compared the newest undone call with the newest undone operation by walking the ledger
    again to find the call's undo (a second walk per redo, after the stack's)."""
    run = start(repo)
    agent_changes(run)
    mergeback.apply(run)
    assert undo(run).restored  # an undone operation in the user's tree
    with run.tool_call("three") as call:
        call.write("later.txt", "later\n")
    later = call.call_id
    assert undo(run, in_run=True, force=True).call == later  # then, newer, an undone call in the run
    walks: list[str | None] = []
    real = run.events

    def counted(tip: str | None = None) -> list[tuple[str, Event]]:
        walks.append(tip)
        return real(tip)

    monkeypatch.setattr(run, "events", counted)
    assert redo(run).call == later and (Path(run.worktree) / "later.txt").read_text() == "later\n"
    assert len(walks) == 1
    # The operation is next, and its redo reads the stack of the new tip once.
    walks.clear()
    assert redo(run).applied
    assert len(walks) == 1


def test_an_undo_chosen_before_another_process_applied_takes_back_nothing(repo: Path) -> None:
    """undo chooses the newest operation, then checks it under the locks: another process's apply in
    between made the chosen one no longer the newest, and the check only asked that it still stood."""
    import subprocess
    import sys

    from sandbox.merge import treeops

    run = start(repo)
    agent_changes(run)
    mergeback.apply(run)  # the operation undo will choose
    with run.tool_call("later") as call:
        call.write("later.txt", "later\n")
    chosen = treeops.stack(run, run.verified_state()).done[-1]
    # Another process applies the newer call meanwhile (before this one takes the locks).
    sandbox = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.run([sandbox, "apply", run.run_id], cwd=repo, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    both = tree_digest(repo)
    with pytest.raises(SandboxError, match="changed meanwhile"):
        treeops.move(run, chosen, "undo")
    assert tree_digest(repo) == both  # neither apply taken back out of order
    assert undo(run).restored and not (repo / "later.txt").exists()  # asked again: the newest goes
