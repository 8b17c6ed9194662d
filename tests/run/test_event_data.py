"""Event data typed at write (issue 33): a key the kind's model does not declare, or a value of another type,
is refused before anything is appended; what every writer records passes (the suites that write each kind)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pygit2
import pytest

from sandbox.errors import CorruptionError
from sandbox.models import EventKind, eventdata
from sandbox.models.eventdata import EventDataError
from sandbox.run.run import Run
from tests.hook_fixtures import reopen, start_run


def test_unknown_or_mistyped_event_data_is_refused_at_write(repo: Path) -> None:
    run = start_run(repo)
    before = reopen(run).state().count
    forged = run.new_event(EventKind.apply_finished, data={"target": "user", "workdir": None, "clone_of": "x"})
    with pytest.raises(EventDataError, match="clone_of, which MergebackData does not declare"):
        run.record_event(forged)
    with pytest.raises(EventDataError, match="does not match MergebackData"):
        run.record_event(run.new_event(EventKind.undo, data={"paths": "README.md"}))
    call = run.start_call("Bash", {"command": "true"}, call_id="c1")
    with pytest.raises(EventDataError, match="ran_ms of another type"):
        run.record_event(run.new_event(EventKind.call_failed, call, data={"ran_ms": True}))
    with pytest.raises(EventDataError, match="interupted, which CallFinishData"):
        run.record_event(run.new_event(EventKind.call_failed, call, data={"interupted": True}))
    assert reopen(run).state().count == before + 1  # only the call's start
    # What the writers record passes; a note says what it needs.
    run.finish_call(call, "failed", paths=[], mark="interrupted", ran_ms=12)
    run.note({"anything": {"a note": "varies"}})
    assert reopen(run).entry("c1").status.value == "interrupted"


def test_every_kind_has_a_model_or_is_reserved_or_free() -> None:
    kinds = {k.value for k in EventKind}
    places = [set(eventdata.MODELS), set(eventdata.RESERVED), set(eventdata.FREE)]
    assert set().union(*places) == kinds
    assert sum(len(p) for p in places) == len(kinds)  # each in one place only


def test_kinds_that_carry_no_data_or_are_never_written_are_refused_at_write(repo: Path) -> None:
    run = start_run(repo)
    before = reopen(run).state().count
    call = run.start_call("Bash", {"command": "true"}, call_id="c1")
    for kind, data in ((EventKind.call_started, {"x": 1}), (EventKind.call_uncertain, {"reason": "r"})):
        with pytest.raises(EventDataError, match="which NoData does not declare"):
            run.record_event(run.new_event(kind, call, data=data))
    for kind in (EventKind.head_moved, EventKind.apply_started, EventKind.run_ended, EventKind.run_dropped):
        with pytest.raises(EventDataError, match="reserved"):
            run.record_event(run.new_event(kind))
    with pytest.raises(EventDataError, match="run_started event needs its run"):
        run.record_event(run.new_event(EventKind.run_started))
    assert reopen(run).state().count == before + 1


def _append_by_git(run: Run, event: dict[str, object]) -> None:
    """Append ``event`` to the run's ledger as a plain git writer would (no check, no MAC)."""
    repo = pygit2.Repository(run.project.common_dir)
    ref = repo.references[f"refs/sandbox/{run.run_id}/ledger"]
    tip = repo[ref.target]
    sig = pygit2.Signature("forger", "forger@example.com", 1_700_000_000, 0)
    message = f"sandbox-event {event['kind']}\n\n{json.dumps(event)}\n"
    new = repo.create_commit(None, sig, sig, message, tip.tree_id, [ref.target])
    ref.set_target(new)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"kind": "call_started", "data": {"files": ["x"]}}, "call_started data that has files, which NoData"),
        ({"kind": "head_moved"}, "is a head_moved event, a kind no sandbox writes"),
        ({"kind": "apply_started"}, "is a apply_started event, a kind no sandbox writes"),
        ({"kind": "run_started", "run": None}, "is a run_started event without its run"),
        ({"kind": "call_succeeded", "data": {"ran_ms": "12"}}, "call_succeeded data that has ran_ms of another type"),
        ({"kind": "undo", "data": {"target": "elsewhere"}}, "undo data that does not match MergebackData"),
    ],
)
def test_an_event_whose_data_is_not_its_kinds_is_reported_when_read(
    repo: Path, change: dict[str, object], said: str
) -> None:
    run = start_run(repo)
    call = run.start_call("Bash", {"command": "true"}, call_id="c1")
    first = reopen(run).events()[1][1]
    forged = json.loads(first.model_dump_json())
    forged.update({"event_id": "f" * 32, "call": None, "procs": None, **change})
    _append_by_git(run, forged)
    with pytest.raises(CorruptionError, match=re.escape(said)) as caught:
        reopen(run).state()
    assert "cannot be trusted past this point" in str(caught.value)
    assert call == "c1" and len(reopen(run).events(first_tip(run))) == 2  # the events before it still read


def first_tip(run: Run) -> str:
    """The ledger's tip before the forged event."""
    tip = pygit2.Repository(run.project.common_dir).references[f"refs/sandbox/{run.run_id}/ledger"].peel(pygit2.Commit)
    return str(tip.parent_ids[0])


def test_a_key_an_open_model_does_not_declare_is_kept_when_read(repo: Path) -> None:
    # What a newer sandbox of the same format added: the fold's views keep it (a closed kind has none).
    run = start_run(repo)
    run.start_call("Bash", {"command": "true"}, call_id="c1")
    first = reopen(run).events()[1][1]
    finish = json.loads(first.model_dump_json())
    finish.update({"event_id": "e" * 32, "kind": "call_succeeded", "call": None, "procs": None})
    finish["data"] = {"ran_ms": 3, "later": {"a": 1}}
    _append_by_git(run, finish)
    assert reopen(run).entry("c1").status.value == "succeeded"
