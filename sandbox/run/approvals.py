"""Approvals: a user's answer to a planned call, kept in the ledger so it outlives crashes.

A runtime that asks before acting records the call with ``plan_call`` (status ``planned``), then
the user approves (status ``approved``; ``start_call`` with the same call id continues it) or
denies it. A call the agent did not run (status ``not_run``) may be denied as well. A denial is
remembered by tool name and input hash: after a resume the runtime asks :func:`is_denied` before
asking the user again, ``start_call`` refuses the denied call id, and the hooks refuse the same tool
and input under any new call id (:class:`sandbox.agent.recorder.Recorder`).
"""

from __future__ import annotations

from typing import Any

from sandbox.errors import SandboxError, UnknownCallError
from sandbox.models import Approval, CallStatus, Denial, EventKind, LedgerEntry, LedgerState
from sandbox.run.core import RunCore


class ApprovalError(SandboxError):
    """The call is not in a state where it can be approved or denied."""


def _entry(run: RunCore, state: LedgerState, call_id: str) -> LedgerEntry:
    entry = state.calls.get(call_id)
    if entry is None:
        raise UnknownCallError(f"Run {run.run_id} has no call {call_id!r}; see 'sandbox log {run.run_id}'.")
    return entry


class _AlreadyDecided(Exception):
    """The same answer is already recorded: appending it again would add nothing."""


def approve(run: RunCore, call_id: str) -> LedgerEntry:
    """Approve a planned call (status ``approved``), or lift a denial; approving twice is a no-op.

    Lifting a denial lets the same tool and input run again under a new call id (a denied call
    that never ran stays ``not_run``; a denied planned call becomes ``approved``).
    """

    def check(state: LedgerState) -> None:
        entry = _entry(run, state, call_id)
        if entry.approval == Approval.denied:
            return  # lifting the denial
        if entry.status == CallStatus.approved:
            raise _AlreadyDecided
        if entry.status != CallStatus.planned:
            raise ApprovalError(
                f"Call {call_id} ({entry.tool_name}) is already {entry.status.value}; only planned calls are approved."
            )

    try:
        run.record(EventKind.call_approved, call_id, epoch=run.state().epoch, check=check)
    except _AlreadyDecided:
        pass
    return run.entry(call_id)


def deny(run: RunCore, call_id: str, reason: str | None = None) -> LedgerEntry:
    """Deny a planned, approved or not-run call: it never starts, nor does the same tool with the same
    input under another call id (see :func:`is_denied`); denying twice is a no-op."""
    if reason is not None and (len(reason) > 2000 or "\0" in reason):
        raise SandboxError("A denial reason must be text of at most 2000 characters.")

    def check(state: LedgerState) -> None:
        entry = _entry(run, state, call_id)
        if entry.approval == Approval.denied:
            raise _AlreadyDecided
        # A call that did not run (the agent refused or skipped it) may be denied too: its retries,
        # under new call ids, are then refused at the hook with the same reason.
        if entry.status not in (CallStatus.planned, CallStatus.approved, CallStatus.not_run):
            raise ApprovalError(
                f"Call {call_id} ({entry.tool_name}) is already {entry.status.value}; it can no longer be denied "
                f"(see 'sandbox compensate {run.run_id} {call_id}' for undoing an external effect)."
            )

    event = run.new_event(EventKind.call_denied, call_id, reason=reason, epoch=run.state().epoch)
    try:
        run.record_event(event, check=check)
    except _AlreadyDecided:
        pass
    return run.entry(call_id)


def denials(run: RunCore, state: LedgerState | None = None) -> list[Denial]:
    """Every denied call of the run, in ledger order."""
    state = state if state is not None else run.state()
    out = []
    for call_id in state.order:
        entry = state.calls[call_id]
        if entry.approval == Approval.denied:
            out.append(
                Denial(
                    call_id=call_id,
                    tool_name=entry.tool_name,
                    input_hash=entry.input_hash,
                    step_id=entry.step_id,
                    reason=entry.denial_reason,
                )
            )
    return out


def is_denied(run: RunCore, tool_name: str, input: Any = None) -> Denial | None:
    """The denial of an earlier call with this tool and the same input, or None: do not ask again."""
    from sandbox.run.ids import input_hash

    wanted = input_hash(tool_name, input)
    for denial in denials(run):
        if denial.tool_name == tool_name and denial.input_hash == wanted:
            return denial
    return None


def is_approved(run: RunCore, tool_name: str, input: Any = None) -> LedgerEntry | None:
    """An approved call with this tool and input that has not started yet, or None."""
    from sandbox.run.ids import input_hash

    wanted = input_hash(tool_name, input)
    for entry in run.entries():
        if (
            entry.tool_name == tool_name
            and entry.input_hash == wanted
            and entry.approval == Approval.approved
            and entry.status == CallStatus.approved
        ):
            return entry
    return None
