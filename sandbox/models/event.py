"""The ledger event: one commit on ``refs/sandbox/<run>/ledger``, and what it names (a call, a run, files)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

import enum
from datetime import datetime
from typing import Any

from pydantic import Field, PrivateAttr

from sandbox.models.base import FORMAT_VERSION, Model, new_dict, new_list, utcnow


class CallStatus(str, enum.Enum):
    """Where a tool call stands; the fold of its ledger events."""

    planned = "planned"
    approved = "approved"
    started = "started"
    succeeded = "succeeded"
    failed = "failed"
    uncertain = "uncertain"
    #: The agent refused or skipped the call before running it (its permission check, a hook, the
    #: user, a denial, or its turn ended first): nothing ran; the reason is in ``error``.
    not_run = "not_run"
    #: The call ran and was stopped before it ended (Ctrl-C, Esc, the session ended under it): what
    #: it changed meanwhile is its files. Stored as a ``call_failed`` event marked ``interrupted``
    #: (an older sandbox reads it as failed); never replayed.
    interrupted = "interrupted"
    #: The agent reported the call outside the hook protocol (a finish with no start, a call run
    #: although the sandbox refused it): recorded as evidence, never as succeeded; ``error`` says why.
    #: Stored as a ``call_failed`` event marked ``violation`` (an older sandbox reads it as failed).
    violation = "violation"


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
    call_not_run = "call_not_run"
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


class FileChange(Model):
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


class CallSpec(Model):
    """What a call is: recorded with its first event (planned or started)."""

    version: int = FORMAT_VERSION
    tool_name: str
    step_id: str | None = None
    input_hash: str
    input_ref: str | None = None
    #: The input itself when small (inline saves two fsync'd objects per call); else see input_ref.
    input: Any = None
    idempotency: Idempotency = Idempotency.conditional
    replay_policy: ReplayPolicy = ReplayPolicy.ask
    side_effects: list[str] = Field(default_factory=new_list)
    summary: str | None = None
    compensation: dict[str, object] | None = None
    #: The agent's own session id for the call (e.g. Claude Code's ``session_id``), when known.
    agent_session: str | None = None


class RunInfo(Model):
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
    submodules: list[str] = Field(default_factory=new_list)
    #: The machine the run was started on (where ``worktree`` and ``user_workdir`` were; neither is
    #: used as a path anywhere else: see :func:`sandbox.store.layout.place_of`).
    host: str | None = None
    #: Runs started together (``start --count``) or forked from one another share a group id.
    group: str | None = None
    #: ``<run>`` or ``<run>@<call or checkpoint>`` this run was forked from (``sandbox fork``).
    forked_from: str | None = None


class ProcessScope(Model):
    """How to find an agent session's processes later, from any process (see :mod:`sandbox.agent.procs`).

    ``token`` is in the environment of every process the agent started (``SANDBOX_SESSION``), so it
    finds them even after a pid was reused; ``supervisor_pid`` and ``supervisor_start`` (clock ticks
    since boot) name the process that owned the session's tree, on the boot ``boot_id``.
    """

    version: int = FORMAT_VERSION
    token: str
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    boot_id: str | None = None


class Event(Model):
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
    files: list[FileChange] = Field(default_factory=new_list)
    result_ref: str | None = None
    #: The result itself when small; larger results are a blob named by result_ref.
    result: Any = None
    #: One line (a summary); the full text, when longer, is ``error_detail`` or the blob ``error_ref``.
    error: str | None = None
    error_detail: str | None = None
    error_ref: str | None = None
    reason: str | None = None
    run: RunInfo | None = None
    #: On ``call_started``: the agent session the call ran in, to find its processes later.
    procs: ProcessScope | None = None
    #: The kind's own fields, kept as stored (a newer sandbox's fields too) and read through their
    #: kind's type: :class:`~sandbox.models.MergebackData` (apply, undo, redo), the TypedDicts of
    #: :mod:`sandbox.models.payloads` through :func:`~sandbox.models.payloads.view` (a call's end, a
    #: resume, a rollback, the events the fold keeps), or ``isinstance`` where a note is read.
    #: ``object``, not ``Any``: every reader checks what it reads (pydantic treats both alike).
    data: dict[str, object] = Field(default_factory=new_dict)
    #: The clone (the user's repository on one machine) that wrote the event: an apply, or an undo
    #: or redo in the user's tree, concerns that clone's tree only (see :mod:`sandbox.runs.remote`).
    clone: str | None = None
    #: Whether this clone wrote the event: its MAC verified under this clone's key when the ledger
    #: read it, or this process appended it (:mod:`sandbox.store.provenance`). Never stored.
    _own: bool = PrivateAttr(default=False)

    def own(self) -> bool:
        """True when this clone wrote the event (see :mod:`sandbox.store.provenance`); else it is
        foreign (another clone's, however it arrived): shown, never obeyed."""
        return self._own

    def mark_own(self, own: bool = True) -> None:
        """Set by the ledger as it reads (the MAC verified) or appends the event."""
        self._own = own
