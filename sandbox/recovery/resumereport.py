"""What a resume reports: each uncertain call classified, the report, the note for the model and the
next safe step (steps 5 to 8 of :mod:`sandbox.recovery.resume`).

Everything here reads what the resume found (:class:`Findings`) and the run's ledger; nothing here
writes. The note says in plain words what happened since the session's checkpoint, so that a model
without its message history plans from observations, not from memory.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.models import (
    CallStatus,
    Checkpoint,
    Denial,
    DriftPath,
    Event,
    EventKind,
    Idempotency,
    LedgerEntry,
    LedgerState,
    ReplayDecision,
    ReplayPolicy,
    ResumeReport,
    RollbackFilesData,
    UncertainCall,
    payloads,
)
from sandbox.run import approvals
from sandbox.run.fold import TERMINAL_STATUSES
from sandbox.store import objects

if TYPE_CHECKING:
    from sandbox.run.checkpoint import CheckpointStore, StoredCheckpoint
    from sandbox.run.run import Run

MAY_REPLAY: ReplayDecision = "may_replay"
ASK_FIRST: ReplayDecision = "ask_first"
DO_NOT_REPLAY: ReplayDecision = "do_not_replay"
#: How many calls after the checkpoint the note describes one by one.
NOTE_CALLS = 20


def classify(entry: LedgerEntry) -> ReplayDecision:
    """What a resume may do with an uncertain call: may_replay, ask_first or do_not_replay."""
    if entry.idempotency == Idempotency.non_idempotent or entry.replay_policy == ReplayPolicy.never:
        return DO_NOT_REPLAY
    if entry.idempotency == Idempotency.idempotent and entry.replay_policy == ReplayPolicy.auto:
        return MAY_REPLAY
    return ASK_FIRST


@dataclass
class Findings:
    """What the resume found and did on its way to the report (steps 0 to 4)."""

    #: The epoch the resume began.
    epoch: int
    #: The checkpoint the session continues from, and the ``rollback_session`` event's data when a
    #: later ``rollback --session`` chose it.
    session: StoredCheckpoint | None
    rollback: dict[str, object] | None
    drift: list[DriftPath]
    drift_commit: str | None
    #: The worktree was missing (or broken) and was made again.
    recreated: bool
    problems: list[str]
    #: Unfinished calls looked for among live processes: whether their session's processes ran.
    alive: dict[str, bool] = field(default_factory=dict)


def report(
    run: Run, state: LedgerState, events: list[tuple[str, Event]], found: Findings, store: CheckpointStore
) -> ResumeReport:
    """The resume's report: the uncertain calls classified, the note for the model, the next step."""
    ckpt = found.session.checkpoint if found.session else None
    uncertain = []
    for call_id in state.order:
        entry = state.calls[call_id]
        if entry.status == CallStatus.uncertain:
            uncertain.append(
                UncertainCall(
                    call_id=call_id,
                    tool_name=entry.tool_name,
                    step_id=entry.step_id,
                    idempotency=entry.idempotency,
                    replay_policy=entry.replay_policy,
                    decision=classify(entry),
                    summary=entry.summary,
                    input_hash=entry.input_hash,
                    started_at=entry.started_at,
                    processes_alive=found.alive.get(call_id),
                )
            )
    denied = approvals.denials(run, state)
    last_step = _last_completed_step(state, ckpt.step_id if ckpt else None)
    first_seen: dict[str, int] = {}
    for index, (_oid, event) in enumerate(events):
        if event.call_id and event.call_id not in first_seen:
            first_seen[event.call_id] = index
    since = ckpt.tool_ledger.count if ckpt else 0
    after = [state.calls[c] for c in state.order if first_seen.get(c, 0) >= since]
    rolled = [
        payloads.view(ev.data, RollbackFilesData)
        for i, (_oid, ev) in enumerate(events)
        if ev.kind == EventKind.rollback_files and i >= since
    ]
    booked = _booked(state, found.drift)
    note = _note(run, ckpt, found.rollback, last_step, after, uncertain, denied, found.drift, rolled, booked)
    out = ResumeReport(
        run_id=run.run_id,
        epoch=found.epoch,
        checkpoint=ckpt,
        last_completed_step=last_step,
        uncertain=uncertain,
        do_not_replay=[u.call_id for u in uncertain if u.decision == DO_NOT_REPLAY],
        may_replay=[u.call_id for u in uncertain if u.decision == MAY_REPLAY],
        ask_first=[u.call_id for u in uncertain if u.decision == ASK_FIRST],
        denied=denied,
        drift=found.drift,
        drift_commit=found.drift_commit,
        note=note,
        next_step="",
        messages_ref=ckpt.messages_ref if ckpt else None,
        run_state=ckpt.run_state if ckpt else None,
        messages=store.messages(ckpt) if ckpt else None,
        session_rollback=found.rollback,
        head=state.head,
        worktree_recreated=found.recreated,
        problems=found.problems,
    )
    out.next_step = _next_step(run, out, booked)
    return out


def _booked(state: LedgerState, drift: list[DriftPath]) -> dict[str, int]:
    """The drifted paths booked to the killed call that wrote them: path -> the call's number in ``log``."""
    out: dict[str, int] = {}
    for d in drift:
        entry = state.calls.get(d.attributed_to or "")
        if entry is not None and entry.commit and any((f.path, f.after_hash) == (d.path, d.after) for f in entry.files):
            out[d.path] = entry.seq
    return out


def _last_completed_step(state: LedgerState, checkpoint_step: str | None) -> str | None:
    """The last step (in ledger order) whose calls all ended; the checkpoint's step without calls."""
    steps: dict[str, bool] = {}
    for call_id in state.order:
        entry = state.calls[call_id]
        if entry.step_id is None:
            continue
        open_call = entry.status in (CallStatus.started, CallStatus.uncertain)
        steps[entry.step_id] = steps.get(entry.step_id, True) and not open_call
    done = [s for s, complete in steps.items() if complete]
    if done:
        return done[-1]
    return checkpoint_step


def _command(run: Run, entry: LedgerEntry) -> str | None:
    value: object = entry.input
    if value is None and entry.input_ref:
        try:
            value = json.loads(objects.read_blob(run.repo, entry.input_ref))
        except (KeyError, ValueError, OSError):
            value = None
    if isinstance(value, dict):
        argv = value.get("argv")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return shlex.join(argv)
        for key in ("command", "cmd"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return None


def _paths(items: list[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _error(text: str | None) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "no error was recorded"
    return line[:200]


def _describe(run: Run, entry: LedgerEntry) -> str:
    name = f"{entry.tool_name} ({entry.call_id})"
    command = _command(run, entry)
    if entry.status == CallStatus.not_run:
        what = f"{name} (`{command}`)" if command else name
        return f"{what} did not run: {_error(entry.error)}"
    verbs = {CallStatus.succeeded: "succeeded", CallStatus.interrupted: "was interrupted (do not repeat it blindly)"}
    verb = verbs.get(entry.status, "failed")
    text = f"{name} ran `{command}` and {verb}" if command else f"{name} {verb}"
    if entry.files:
        written = all(f.after_hash is not None for f in entry.files)
        text += f" and {'wrote' if written else 'changed'} {_paths([f.path for f in entry.files])}"
    if entry.status in (CallStatus.failed, CallStatus.interrupted, CallStatus.violation):
        text += f": {_error(entry.error)}"
    if entry.undone:
        text += " (its changes were undone since)"
    return text + "."


def _note(
    run: Run,
    ckpt: Checkpoint | None,
    rollback: dict[str, object] | None,
    last_step: str | None,
    after: list[LedgerEntry],
    uncertain: list[UncertainCall],
    denied: list[Denial],
    drift: list[DriftPath],
    rolled: list[RollbackFilesData],
    booked: dict[str, int],
) -> str:
    parts: list[str] = []
    if ckpt is not None:
        label = f" ({ckpt.label})" if ckpt.label else ""
        parts.append(f"Resumed from checkpoint {ckpt.name}{label}.")
    else:
        parts.append("Resumed without a checkpoint: no message history was saved; rely on these observations.")
    if rollback:
        parts.append(
            f"The session was rolled back to {rollback.get('name')} on request; the ledger still records "
            "everything that happened after it, as listed here."
        )
    if last_step:
        parts.append(f"Step {last_step} completed.")
    ended = [e for e in after if e.status in TERMINAL_STATUSES]
    for entry in ended[:NOTE_CALLS]:
        parts.append(_describe(run, entry))
    if len(ended) > NOTE_CALLS:
        parts.append(f"{len(ended) - NOTE_CALLS} more calls ended after the checkpoint (see 'sandbox log').")
    for data in rolled:
        undone = ", ".join(data.get("undone_calls") or []) or "no call"
        parts.append(f"The worktree's files were rolled back to {data.get('name')}, undoing the changes of {undone}.")
    drifted: dict[str | None, list[str]] = {}
    for d in drift:
        drifted.setdefault(d.attributed_to, []).append(d.path)
    advice = {
        DO_NOT_REPLAY: "do not repeat it without checking.",
        ASK_FIRST: "check the current state (or ask the user) before repeating it.",
        MAY_REPLAY: "it is idempotent and may be replayed.",
    }
    for u in uncertain:
        text = f"{u.tool_name} ({u.call_id}) is uncertain: it started but its result was not recorded; "
        text += advice[u.decision]
        if u.processes_alive is False:
            text += " None of its session's processes is still running."
        elif u.processes_alive:
            text += " Its session's processes were still running; they were stopped before this resume."
        mine = [p for p in drifted.get(u.call_id, []) if p in booked]
        if mine:
            text += (
                f" It had changed {_paths(mine)}; those changes are booked to it in the run, "
                f"as call #{booked[mine[0]]} in 'sandbox log'."
            )
        parts.append(text)
    for denial in denied:
        reason = f" ({denial.reason})" if denial.reason else ""
        parts.append(f"The user denied {denial.tool_name} ({denial.call_id}){reason}; do not ask for it again.")
    # What no killed call was booked (a path nobody can attribute, or written after a call's own change).
    loose = [d.path for d in drift if d.path not in booked]
    if loose:
        parts.append(f"Files changed outside any recorded call: {_paths(loose)}; they were kept; check them.")
    repeatable = [e for e in ended if e.status == CallStatus.succeeded]
    if repeatable:
        names = ", ".join(f"{e.tool_name} ({e.call_id})" for e in repeatable[:NOTE_CALLS])
        parts.append(f"Do not repeat {names}.")
    parts.append("Plan the next step from these observations.")
    return " ".join(parts)


def _next_step(run: Run, report: ResumeReport, booked: dict[str, int]) -> str:
    """The next safe step: the first uncertain call to check, drift to review, or go on."""
    by_id = {u.call_id: u for u in report.uncertain}
    if report.do_not_replay:
        u = by_id[report.do_not_replay[0]]
        return (
            f"Check whether {u.tool_name} ({u.call_id}) took effect, without running it again; then record the "
            f"outcome with 'sandbox call resolve {run.run_id} {u.call_id} --status succeeded|failed'."
        )
    if report.ask_first:
        u = by_id[report.ask_first[0]]
        return (
            f"Check the state (or ask the user) before repeating {u.tool_name} ({u.call_id}); then record the outcome "
            f"with 'sandbox call resolve {run.run_id} {u.call_id} --status succeeded|failed'."
        )
    loose = [d.path for d in report.drift if d.path not in booked]
    if loose:
        return (
            f"Review the files changed outside any recorded call ({_paths(loose)}): keep them "
            f"by recording a call, or restore them with 'sandbox rollback {run.run_id} --files --to <checkpoint>'."
        )
    if report.may_replay:
        u = by_id[report.may_replay[0]]
        return f"Replay {u.tool_name} ({u.call_id}) as a new call (it is idempotent), then continue."
    if report.last_completed_step:
        return f"Continue after step {report.last_completed_step}: plan the next step."
    return "Continue the run: plan the next step."
