"""Event data typed at write (issue 33): a key the kind's model does not declare, or a value of another type,
is refused before anything is appended; what every writer records passes (the suites that write each kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.models import EventKind
from sandbox.models.eventdata import EventDataError
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
