"""Property: the ledger fold gives one consistent state per call under any interleaving of writers.

Writers append concurrently; the ledger serialises their events in some order that keeps each
writer's own order (and causality: a resume can only mark a call uncertain once it started). For
every such order, :func:`sandbox.run.fold.fold_event` must give each call a status that never moved
backward, let terminal states win, ignore re-appended events (same event id), and, when a call has
at most one terminal event, reach the same final status whatever the order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.models import CallSpec, CallStatus, Event, EventKind, LedgerState, RunInfo
from sandbox.run.fold import STATUS_RANK, TERMINAL_STATUSES, fold_event
from tests.conftest import examples

RUN = "prop0001"
_ids = itertools.count()


def ev(kind: EventKind, call_id: str | None = None, **fields: object) -> Event:
    return Event(event_id=f"e{next(_ids)}", kind=kind, run_id=RUN, call_id=call_id, **fields)  # type: ignore[arg-type]


def start_event() -> Event:
    info = RunInfo(run_id=RUN, base="0" * 40, head=None, worktree="/wt", user_workdir="/u")
    return ev(EventKind.run_started, run=info)


@dataclass
class Scenario:
    """Each writer's events in its own order, and which events depend on which."""

    writers: list[list[Event]]
    after: dict[str, str] = field(default_factory=dict)  # event id -> event id that must come first
    terminals: dict[str, int] = field(default_factory=dict)  # call id -> number of terminal events


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    calls = draw(st.integers(1, 5))
    owners: list[list[Event]] = []
    resumer: list[Event] = []
    sc = Scenario(writers=[])
    for c in range(calls):
        cid = f"call_{c}"
        spec = CallSpec(tool_name=draw(st.sampled_from(["write_file", "send_email"])), input_hash=f"h{c}")
        seq: list[Event] = []
        if draw(st.booleans()):
            seq.append(ev(EventKind.call_planned, cid, call=spec))
            if draw(st.booleans()):
                seq.append(ev(EventKind.call_approved, cid))
        started = ev(EventKind.call_started, cid, call=spec)
        seq.append(started)
        end = draw(st.sampled_from([None, EventKind.call_succeeded, EventKind.call_failed]))
        if end is not None:
            seq.append(ev(end, cid, commit=f"{c:040x}" if end == EventKind.call_succeeded else None))
        terminals = int(end is not None)
        if draw(st.booleans()):  # a resume marks it uncertain (it can only see started calls)
            unc = ev(EventKind.call_uncertain, cid, epoch=1)
            resumer.append(unc)
            sc.after[unc.event_id] = started.event_id
            if draw(st.booleans()):  # ... and later someone resolves it after checking
                status = draw(st.sampled_from(["succeeded", "failed"]))
                res = ev(EventKind.call_resolved, cid, data={"status": status})
                resumer.append(res)
                terminals += 1
        sc.terminals[cid] = terminals
        owners.append(seq)
    sc.writers = owners + ([resumer] if resumer else [])
    return sc


def interleave(data: st.DataObject, sc: Scenario, duplicates: bool) -> list[Event]:
    """One order the ledger could have serialised the writers' appends in."""
    queues = [list(w) for w in sc.writers]
    out: list[Event] = []
    emitted: set[str] = set()
    while any(queues):
        ready = [q for q in queues if q and (q[0].event_id not in sc.after or sc.after[q[0].event_id] in emitted)]
        assert ready, "no writer can go on: the scenario has a cycle"
        q = ready[data.draw(st.integers(0, len(ready) - 1))]
        event = q.pop(0)
        out.append(event)
        emitted.add(event.event_id)
        if duplicates and data.draw(st.integers(0, 4)) == 0:
            out.append(out[data.draw(st.integers(0, len(out) - 1))])  # a retried append
    return out


START = start_event()


def fold_all(events: list[Event]) -> tuple[LedgerState, list[dict[str, CallStatus]]]:
    state = LedgerState()
    fold_event(state, START, "tip0")
    history = []
    for i, event in enumerate(events):
        fold_event(state, event, f"tip{i + 1}")
        history.append({cid: entry.status for cid, entry in state.calls.items()})
    return state, history


def rank(status: CallStatus) -> int:
    return 10 if status in TERMINAL_STATUSES else STATUS_RANK[status]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(), data=st.data())
def test_fold_is_consistent_under_any_interleaving(sc: Scenario, data: st.DataObject) -> None:
    events = interleave(data, sc, duplicates=True)
    state, history = fold_all(events)
    unique = {e.event_id for e in events}
    assert state.count == len(unique) + 1, "a re-appended event was counted twice"
    assert state.event_ids == unique | {state.event_ids.difference(unique).pop()}
    by_call: dict[str, list[Event]] = {}
    for e in events:
        if e.call_id:
            by_call.setdefault(e.call_id, []).append(e)
    assert set(state.calls) == set(by_call)
    for cid, evs in by_call.items():
        # Never backward: each step's status ranks at least the previous one's.
        seen = [h[cid] for h in history if cid in h]
        for a, b in itertools.pairwise(seen):
            assert rank(b) >= rank(a), f"{cid}: {a.value} -> {b.value}"
            if a in TERMINAL_STATUSES:
                assert b == a, f"{cid}: terminal {a.value} changed to {b.value}"
        kinds = {e.kind for e in evs}
        final = state.calls[cid].status
        terminal_kinds = {EventKind.call_succeeded, EventKind.call_failed, EventKind.call_resolved}
        if kinds & terminal_kinds:
            assert final in TERMINAL_STATUSES, f"{cid}: a terminal event was lost ({final.value})"
        elif EventKind.call_uncertain in kinds:
            assert final == CallStatus.uncertain
        else:
            assert final == CallStatus.started
        if final == CallStatus.succeeded and sc.terminals[cid] == 1 and any(e.commit for e in evs):
            assert state.calls[cid].commit is not None


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(), data=st.data())
def test_same_events_same_outcome(sc: Scenario, data: st.DataObject) -> None:
    """Two orders of the same events (at most one terminal event per call) fold to the same statuses."""
    first, _ = fold_all(interleave(data, sc, duplicates=False))
    second, _ = fold_all(interleave(data, sc, duplicates=True))
    for cid, entry in first.calls.items():
        if sc.terminals[cid] <= 1:
            assert second.calls[cid].status == entry.status, cid
            assert second.calls[cid].commit == entry.commit, cid
            assert second.calls[cid].approval == entry.approval, cid
    assert second.count == first.count


def test_replaying_the_fold_from_the_cache_is_the_same() -> None:
    """Folding in two halves (as the incremental cache does) equals folding in one go."""
    spec = CallSpec(tool_name="t", input_hash="h")
    events = [
        ev(EventKind.call_started, "c1", call=spec),
        ev(EventKind.call_started, "c2", call=spec),
        ev(EventKind.call_uncertain, "c1", epoch=1),
        ev(EventKind.call_succeeded, "c2", commit="1" * 40),
        ev(EventKind.call_resolved, "c1", data={"status": "failed"}),
    ]
    whole, _ = fold_all(events)
    half, _ = fold_all(events[:2])
    resumed = LedgerState.model_validate_json(half.model_dump_json())
    for i, event in enumerate(events[2:]):
        fold_event(resumed, event, f"tip{i + 3}")
    assert resumed.model_dump(exclude={"tip"}) == whole.model_dump(exclude={"tip"})
