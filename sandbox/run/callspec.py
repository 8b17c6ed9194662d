"""What a caller says about one tool call, in one place.

``plan_call``, ``start_call``, ``tool_call`` and ``refuse_call`` (and :class:`~sandbox.run.recording.ToolCall`)
take the same parameters: a tool name, its input, and the :class:`CallOptions` below. :func:`prepare`
checks them once and turns them into the persisted :class:`~sandbox.models.CallSpec` and the blobs the
event carries beside it (an input too large to live in the event itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict

import pygit2

from sandbox.errors import UsageError
from sandbox.models import CallSpec, Idempotency, ReplayPolicy
from sandbox.run.ids import input_hash, new_call_id
from sandbox.store import layout

#: Inputs and results up to this many bytes of JSON live in the event itself, not in a blob.
INLINE_LIMIT = 4096


class CallOptions(TypedDict, total=False):
    """The optional parameters of a call (keyword arguments of ``plan_call``, ``start_call``,
    ``tool_call`` and ``refuse_call``); missing ones take the defaults :func:`prepare` gives."""

    #: The call's id (default: a new one); a planned call's id continues it.
    call_id: str | None
    #: The runtime's own step this call belongs to.
    step_id: str | None
    #: Whether running the call again is safe (default ``conditional``).
    idempotency: Idempotency | str
    #: What a resume may do with the call (default ``ask``).
    replay: ReplayPolicy | str
    #: Effects outside the worktree the call has (a deploy, a message sent).
    side_effects: Iterable[str]
    #: One line for humans.
    summary: str | None
    #: How to undo the call's external effect.
    compensation: dict[str, object] | None
    #: The agent's own session id (its end settles the calls it never ran).
    agent_session: str | None


def prepare(tool_name: str, input: Any, options: CallOptions) -> tuple[str, CallSpec, dict[str, bytes]]:
    """Check a call's parameters: its id (a new one when none was given), its persisted spec, and the
    attachments of the event that carries it; :class:`UsageError` for a bad name or policy."""
    call_id = options.get("call_id") or new_call_id()
    if not tool_name or len(tool_name) > 200:
        raise UsageError("A tool name must be 1 to 200 characters.")
    try:
        idem = Idempotency(options.get("idempotency", Idempotency.conditional))
        rep = ReplayPolicy(options.get("replay", ReplayPolicy.ask))
    except ValueError as exc:
        raise UsageError(f"{exc}; see 'sandbox call start --help' for the allowed values.") from exc
    data = layout.canonical_json(input)
    inline = input is not None and len(data) <= INLINE_LIMIT
    attachments = {"input.json": data} if input is not None and not inline else {}
    spec = CallSpec(
        tool_name=tool_name,
        step_id=options.get("step_id"),
        input_hash=input_hash(tool_name, input),
        input_ref=str(pygit2.hash(data)) if attachments else None,
        input=input if inline else None,
        idempotency=idem,
        replay_policy=rep,
        side_effects=list(options.get("side_effects", ())),
        summary=options.get("summary"),
        compensation=options.get("compensation"),
        agent_session=options.get("agent_session"),
    )
    return call_id, spec, attachments
