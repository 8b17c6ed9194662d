"""Every persisted format of the sandbox, as versioned pydantic models.

These models are the only things written to disk or into git objects. Each carries a ``version``
field; readers reject versions they do not know instead of guessing. ``sandbox schema`` prints their
JSON Schema.
"""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

FORMAT_VERSION = 1


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (all persisted times use it)."""
    return datetime.now(timezone.utc)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class CallStatus(str, enum.Enum):
    """Where a tool call stands; the fold of its ledger events."""

    planned = "planned"
    approved = "approved"
    started = "started"
    succeeded = "succeeded"
    failed = "failed"
    uncertain = "uncertain"


TERMINAL_STATUSES = frozenset({CallStatus.succeeded, CallStatus.failed})


class Idempotency(str, enum.Enum):
    """Whether running a call twice has the same effect as running it once."""

    idempotent = "idempotent"
    conditional = "conditional"
    non_idempotent = "non_idempotent"


class ReplayPolicy(str, enum.Enum):
    """What a resume may do with a call whose outcome is unknown."""

    auto = "auto"
    ask = "ask"
    never = "never"


class Approval(str, enum.Enum):
    """A user's answer to a planned call."""

    approved = "approved"
    denied = "denied"


class EventKind(str, enum.Enum):
    """The kinds of ledger events. A call's state is the fold of its events in ledger order."""

    run_started = "run_started"
    call_planned = "call_planned"
    call_approved = "call_approved"
    call_denied = "call_denied"
    call_started = "call_started"
    call_succeeded = "call_succeeded"
    call_failed = "call_failed"
    call_uncertain = "call_uncertain"
    call_resolved = "call_resolved"
    resumed = "resumed"
    head_moved = "head_moved"
    apply_started = "apply_started"
    apply_finished = "apply_finished"
    undo = "undo"
    redo = "redo"
    checkpoint = "checkpoint"
    rollback_files = "rollback_files"
    rollback_session = "rollback_session"
    compensation = "compensation"
    drift = "drift"
    note = "note"
    run_ended = "run_ended"
    run_dropped = "run_dropped"


class FileChange(_Model):
    """One changed path of one call: before and after as git blob ids and modes (None: absent)."""

    version: int = FORMAT_VERSION
    path: str
    before_hash: str | None
    after_hash: str | None
    before_mode: int | None
    after_mode: int | None
    patch_ref: str | None = None
    tool_call_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class CallSpec(_Model):
    """What a call is: recorded with its first event (planned or started)."""

    version: int = FORMAT_VERSION
    tool_name: str
    step_id: str | None = None
    input_hash: str
    input_ref: str | None = None
    idempotency: Idempotency = Idempotency.conditional
    replay_policy: ReplayPolicy = ReplayPolicy.ask
    side_effects: list[str] = Field(default_factory=list)
    summary: str | None = None
    compensation: dict[str, Any] | None = None


class RunInfo(_Model):
    """A run's identity and where it came from; stored in its first ledger event."""

    version: int = FORMAT_VERSION
    run_id: str
    label: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    base: str
    head: str | None
    head_ref: str | None = None
    worktree: str
    user_workdir: str
    submodules: list[str] = Field(default_factory=list)


class Event(_Model):
    """One ledger event. Stored as the message of one commit on ``refs/sandbox/<run>/ledger``."""

    version: int = FORMAT_VERSION
    event_id: str
    kind: EventKind
    run_id: str
    call_id: str | None = None
    at: datetime = Field(default_factory=utcnow)
    pid: int | None = None
    epoch: int = 0
    call: CallSpec | None = None
    commit: str | None = None
    parent_commit: str | None = None
    files: list[FileChange] = Field(default_factory=list)
    result_ref: str | None = None
    error: str | None = None
    reason: str | None = None
    run: RunInfo | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class LedgerEntry(_Model):
    """A tool call as the ledger knows it: the fold of its events."""

    version: int = FORMAT_VERSION
    call_id: str
    step_id: str | None = None
    tool_name: str
    input_hash: str
    input_ref: str | None = None
    status: CallStatus
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    side_effects: list[str] = Field(default_factory=list)
    summary: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result_ref: str | None = None
    error: str | None = None
    commit: str | None = None
    parent_commit: str | None = None
    files: list[FileChange] = Field(default_factory=list)
    approval: Approval | None = None
    denial_reason: str | None = None
    undone: bool = False
    applied: bool = False
    epoch: int = 0
    seq: int = 0
    compensation: dict[str, Any] | None = None
    created_at: datetime = Field(default_factory=utcnow)


class LedgerState(_Model):
    """The fold of a whole ledger up to ``tip``; cached on disk and rebuilt from git when in doubt."""

    version: int = FORMAT_VERSION
    tip: str | None = None
    count: int = 0
    run: RunInfo | None = None
    epoch: int = 0
    head: str | None = None
    calls: dict[str, LedgerEntry] = Field(default_factory=dict)
    order: list[str] = Field(default_factory=list)
    event_ids: set[str] = Field(default_factory=set)
    ended: bool = False
    dropped: bool = False
    data: dict[str, Any] = Field(default_factory=dict)


# --- merge-back models (apply journal, apply/undo reports) ---


# --- checkpoint models (checkpoints, budget, resume report) ---


# --- agent integration models (hook payloads, sandbox config) ---


#: Every model written to disk or into git objects (``sandbox schema`` prints them).
#: Each section above adds its own models to this list just below its definitions' section.
PERSISTED: list[type[BaseModel]] = [Event, LedgerEntry, LedgerState, RunInfo, CallSpec, FileChange]
