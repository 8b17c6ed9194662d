"""The fold's typed bookkeeping (sandbox.run.fold, sandbox.models.ledgerstate): what it keeps of the
events it logs, and that the cached fold reads back and is written as the formats before it were."""

from __future__ import annotations

import datetime
import itertools
import json
import warnings

import pytest

from sandbox.models import (
    CallSpec,
    Event,
    EventKind,
    LedgerState,
    PartialApply,
    PathRecordUpdate,
    RunInfo,
    UndoItem,
    UserPathRecord,
    from_json,
    to_json,
)
from sandbox.models.payloads import (
    ApplyFinishData,
    CallFinishData,
    CheckpointLogged,
    ResumedData,
    RollbackFilesData,
    RollbackSessionData,
    view,
)
from sandbox.run.fold import FOLD, fold_event

RUN = "fold0001"
_ids = itertools.count()


def ev(kind: EventKind, **fields: object) -> Event:
    return Event(event_id=f"e{next(_ids)}", kind=kind, run_id=RUN, **fields)  # type: ignore[arg-type]


def folded(*events: Event) -> LedgerState:
    state = LedgerState()
    info = RunInfo(run_id=RUN, base="0" * 40, head=None, worktree="/wt", user_workdir="/u")
    for i, event in enumerate([ev(EventKind.run_started, run=info), *events]):
        fold_event(state, event, f"tip{i}")
    return state


def test_logged_events_keep_their_data_id_and_time_and_read_back_from_the_cache() -> None:
    checkpoint = {"id": "ckpt_1", "seq": 1, "name": "ckpt_001", "label": None, "tree": "t" * 40, "later": [1]}
    rollback = {"checkpoint": "ckpt_1", "name": "ckpt_001", "calls_after": ["c2"]}
    note = {"network_refused": {"host": "example.com", "port": 443, "at": "now"}, "session": "s1"}
    state = folded(
        ev(EventKind.checkpoint, data=checkpoint),
        ev(EventKind.rollback_session, data=rollback),
        ev(EventKind.note, data=note),
    )
    kept = state.data.checkpoint[0]
    assert kept["event_id"] and kept["at"] and kept["tree"] == "t" * 40 and kept["later"] == [1]  # type: ignore[typeddict-item]
    assert state.data.rollback_session[0]["calls_after"] == ["c2"]
    assert state.data.note[0]["network_refused"] == note["network_refused"]  # type: ignore[typeddict-item]
    again = from_json(LedgerState, to_json(state))
    assert again.model_dump() == state.model_dump()


def test_a_logged_value_of_another_type_is_cached_as_read_without_a_warning() -> None:
    # A ledger another sandbox wrote (or an older one): the fold keeps what it read; caching it
    # must neither change it nor print pydantic's serializer warnings on the user's terminal.
    state = folded(ev(EventKind.checkpoint, data={"id": "ckpt_1", "seq": "one", "tree": 7}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = to_json(state)
        FOLD.fork(state).model_dump(warnings=False)
    assert json.loads(text)["data"]["checkpoint"][0]["seq"] == "one"


def test_path_records_without_a_partial_apply_are_stored_as_before_partial_applies() -> None:
    whole = UserPathRecord(mode=0o100644, oid="a" * 40, calls=["c1"])
    assert "partial" not in json.loads(to_json(whole))
    assert "partial" not in json.loads(to_json(UndoItem(call_id="c1", event_id="e1")))
    assert PathRecordUpdate.of("f.txt", whole).to_data() == {
        "path": "f.txt",
        "mode": 0o100644,
        "oid": "a" * 40,
        "target_mode": None,
        "target_oid": None,
        "calls": ["c1"],
    }
    assert PathRecordUpdate.of("f.txt", None).to_data() == {"path": "f.txt", "drop": True}
    part = PartialApply(base_mode=None, base_oid=None, agent_mode=0o100644, agent_oid="b" * 40, calls=["c1"])
    record = UserPathRecord(mode=0o100644, oid="a" * 40, calls=["c1"], partial=part)
    assert json.loads(to_json(record))["partial"]["agent_oid"] == "b" * 40
    data = PathRecordUpdate.of("f.txt", record).to_data()
    assert data["partial"] == part.model_dump(mode="json")
    assert PathRecordUpdate.model_validate(data).record() == record


def test_an_events_data_is_read_through_its_kinds_checked_view() -> None:
    # Event.data is dict[str, object]: each kind's TypedDict view checks the keys it declares (a value
    # of another type reads as missing, as in a ledger written before the field existed) and keeps the rest.
    finish = {"status": "succeeded", "ran_ms": True, "interrupted": "yes", "later": [1]}
    assert view(finish, CallFinishData) == {"status": "succeeded", "later": [1]}
    assert view({"ran_ms": 5, "violation": False}, CallFinishData) == {"ran_ms": 5, "violation": False}
    rollback = {"undone_calls": ["c1", 2], "kept_calls": ["c3"], "checkpoint": None}
    assert view(rollback, RollbackFilesData) == {"kept_calls": ["c3"]}
    assert view({"label": None, "step_id": 3}, RollbackSessionData) == {"label": None}
    assert view({"epoch": 4, "host": 7}, ResumedData) == {"epoch": 4}
    assert view({"calls": ["c1"], "paths": []}, ApplyFinishData) == {"calls": ["c1"], "paths": []}
    with pytest.raises(ValueError, match="event_id"):
        view({"at": "now"}, CheckpointLogged)  # a required key missing is no view at all


def test_the_fold_reads_a_finish_and_a_rollback_through_their_views() -> None:
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    state = folded(
        ev(EventKind.call_started, call_id="c1", at=t0, call=CallSpec(tool_name="Bash", input_hash="h1")),
        ev(
            EventKind.call_failed,
            call_id="c1",
            at=t0 + datetime.timedelta(seconds=10),
            data={"interrupted": True, "ran_ms": 2000},
        ),
        ev(EventKind.call_started, call_id="c2", call=CallSpec(tool_name="Bash", input_hash="h2")),
        ev(EventKind.call_succeeded, call_id="c2", commit="a" * 40, data={"ran_ms": True}),
        ev(EventKind.rollback_files, commit="b" * 40, data={"undone_calls": ["c2"], "kept_calls": []}),
        ev(EventKind.resumed, data={"epoch": 3}),
    )
    first, second = state.calls["c1"], state.calls["c2"]
    assert first.status.value == "interrupted" and first.started_at is not None
    assert first.finished_at is not None and (first.finished_at - first.started_at).total_seconds() == 2
    assert second.status.value == "succeeded" and second.rolled_back  # ran_ms True is no duration
    assert state.epoch == 3 and state.head == "b" * 40
