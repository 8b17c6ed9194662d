"""Every persisted format of the sandbox, as versioned pydantic models.

These models are the only things written to disk or into git objects. Each carries a ``version``
field; readers reject versions they do not know instead of guessing. ``sandbox schema`` prints their
JSON Schema.
"""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

import enum
import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

FORMAT_VERSION = 1


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (all persisted times use it)."""
    return datetime.now(timezone.utc)


def new_list() -> list[Any]:
    """A fresh empty list: the default factory of list fields.

    Not ``list`` itself: building a model's validator asks each factory for its signature, which
    for a builtin means parsing its text signature with the tokenizer (measured: ~7 ms of ``sandbox
    apply``'s start-up for this module's fields; a Python function's is ~0.01 ms).
    """
    return []


def new_dict() -> dict[Any, Any]:
    """A fresh empty dict: the default factory of dict fields (see :func:`new_list`)."""
    return {}


def new_set() -> set[Any]:
    """A fresh empty set: the default factory of set fields (see :func:`new_list`)."""
    return set()


class _Model(BaseModel):
    # defer_build: a model's validator is built when first used, not at import (hooks start fast).
    model_config = ConfigDict(extra="forbid", frozen=False, defer_build=True)


M = TypeVar("M", bound=BaseModel)


def to_json(model: BaseModel) -> str:
    """Serialise a model for storage, ASCII-only.

    File names that are not valid UTF-8 are carried as lone surrogate escapes (``\\udce9``), which
    the standard json module writes and reads back exactly, while pydantic's own JSON codec refuses
    them. Every persisted model goes through this function and :func:`from_json`.
    """
    return json.dumps(model.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))


def from_json(cls: type[M], text: str | bytes) -> M:
    """Parse and validate a stored model written by :func:`to_json` (raises ValueError if malformed)."""
    return cls.model_validate(json.loads(text))


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


TERMINAL_STATUSES = frozenset(
    {CallStatus.succeeded, CallStatus.failed, CallStatus.not_run, CallStatus.interrupted, CallStatus.violation}
)
#: The ``data`` keys of a ``call_failed`` event that make the call interrupted or a violation.
FAILED_MARKS = {"interrupted": CallStatus.interrupted, "violation": CallStatus.violation}


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
    #: The input itself when small (inline saves two fsync'd objects per call); else see input_ref.
    input: Any = None
    idempotency: Idempotency = Idempotency.conditional
    replay_policy: ReplayPolicy = ReplayPolicy.ask
    side_effects: list[str] = Field(default_factory=new_list)
    summary: str | None = None
    compensation: dict[str, Any] | None = None
    #: The agent's own session id for the call (e.g. Claude Code's ``session_id``), when known.
    agent_session: str | None = None


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
    submodules: list[str] = Field(default_factory=new_list)
    #: The machine the run was started on (where ``worktree`` and ``user_workdir`` were; neither is
    #: used as a path anywhere else: see :func:`sandbox.store.layout.place_of`).
    host: str | None = None
    #: Runs started together (``start --count``) or forked from one another share a group id.
    group: str | None = None
    #: ``<run>`` or ``<run>@<call or checkpoint>`` this run was forked from (``sandbox fork``).
    forked_from: str | None = None


class ProcessScope(_Model):
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
    data: dict[str, Any] = Field(default_factory=new_dict)
    #: The clone (the user's repository on one machine) that wrote the event: an apply, or an undo
    #: or redo in the user's tree, concerns that clone's tree only (see :mod:`sandbox.runs.remote`).
    clone: str | None = None


class LedgerEntry(_Model):
    """A tool call as the ledger knows it: the fold of its events."""

    version: int = FORMAT_VERSION
    call_id: str
    step_id: str | None = None
    tool_name: str
    input_hash: str
    input_ref: str | None = None
    #: The input itself when small (inline saves two fsync'd objects per call); else see input_ref.
    input: Any = None
    status: CallStatus
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    side_effects: list[str] = Field(default_factory=new_list)
    summary: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result_ref: str | None = None
    #: The result itself when small; larger results are a blob named by result_ref.
    result: Any = None
    #: One line (a summary); the full text, when longer, is ``error_detail`` or the blob ``error_ref``.
    error: str | None = None
    error_detail: str | None = None
    error_ref: str | None = None
    agent_session: str | None = None
    commit: str | None = None
    parent_commit: str | None = None
    files: list[FileChange] = Field(default_factory=new_list)
    approval: Approval | None = None
    denial_reason: str | None = None
    undone: bool = False
    applied: bool = False
    #: Taken out of the run's head by ``rollback --files`` (its change is no longer in the run's files).
    rolled_back: bool = False
    epoch: int = 0
    seq: int = 0
    compensation: dict[str, Any] | None = None
    created_at: datetime = Field(default_factory=utcnow)


# --- typed payloads of ledger events, and the bookkeeping their fold keeps ---
#
# An event's ``data`` is stored as JSON in the event (its ``version`` covers them). Each payload
# below is read back through its model: known fields typed, fields it does not know kept as they
# are (``extra="allow"``), so a ledger written by an older or newer sandbox still reads.

#: What an apply does with one path (:class:`sandbox.merge.mergeback.PlannedPath`).
ApplyAction = Literal["write", "merge", "skip", "conflict"]
#: What a resume may do with an uncertain call (:func:`sandbox.recovery.resume.classify`).
ReplayDecision = Literal["may_replay", "ask_first", "do_not_replay"]
#: Where an apply, undo or redo wrote: the user's working tree or the run's worktree.
MoveTarget = Literal["user", "sandbox"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)


class HunkTaken(_Model):
    """One hunk (or change) a partial apply took: its stable id and ``@@`` header (see sandbox.merge.hunks)."""

    version: int = FORMAT_VERSION
    id: str
    header: str


class PartialApply(_Model):
    """A path the sandbox wrote only part of the agent's change to (``apply --hunks``).

    Kept in the ``apply_finished`` event's path record (and so in ``user_paths``): the state the
    hunks were taken from (``base``), the agent state they were taken out of, the calls whose change
    it is, and the hunks taken. ``edited``: a hunk was edited by hand, so the file holds text the
    agent never wrote. ``undo`` puts ``base`` back; a later apply takes the rest.
    """

    version: int = FORMAT_VERSION
    base_mode: int | None
    base_oid: str | None
    agent_mode: int | None
    agent_oid: str | None
    calls: list[str] = Field(default_factory=new_list)
    hunks: list[HunkTaken] = Field(default_factory=new_list)
    edited: bool = False


class UserPathRecord(_Model):
    """What the sandbox last wrote (or confirmed) at one path of the user's tree.

    ``mode``/``oid``: the state written there (None: absent); ``target_mode``/``target_oid``: the
    agent's state it stands for (differs after a 3-way merge); ``calls``: the calls it carries. An
    undo may overwrite the user's file only while it still is what this record says was written.
    ``partial``: only some hunks were written there (``apply --hunks``).
    """

    mode: int | None = None
    oid: str | None = None
    target_mode: int | None = None
    target_oid: str | None = None
    calls: list[str] = Field(default_factory=new_list)
    partial: PartialApply | None = None

    @model_serializer(mode="wrap")
    def _without_empty_partial(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Stored as before partial applies existed when there is none (old readers, fixtures).
        data: dict[str, Any] = handler(self)
        if not data.get("partial"):
            data.pop("partial", None)
        return data


class PathRecordUpdate(_Payload):
    """One path's new :class:`UserPathRecord` in an apply/undo/redo event; ``drop``: it has none any more."""

    path: str
    drop: bool = False
    mode: int | None = None
    oid: str | None = None
    target_mode: int | None = None
    target_oid: str | None = None
    calls: list[str] = Field(default_factory=new_list)
    partial: PartialApply | None = None

    @classmethod
    def of(cls, path: str, record: UserPathRecord | None) -> "PathRecordUpdate":
        """The update that sets ``path`` to ``record`` (None: drops the path's record)."""
        if record is None:
            return cls(path=path, drop=True)
        return cls(path=path, **record.model_dump())

    def record(self) -> UserPathRecord | None:
        """The record this update sets (None when it drops the path's record)."""
        if self.drop:
            return None
        return UserPathRecord(
            mode=self.mode,
            oid=self.oid,
            target_mode=self.target_mode,
            target_oid=self.target_oid,
            calls=self.calls,
            partial=self.partial,
        )

    def to_data(self) -> dict[str, Any]:
        """The update as stored in an event: ``{"path", "drop": true}`` or ``{"path", **record}``."""
        if self.drop:
            return {"path": self.path, "drop": True}
        record = self.record()
        assert record is not None
        data = record.model_dump(mode="json")
        if data.get("partial") is None:
            data.pop("partial", None)  # records of whole paths are stored as before partial applies existed
        return {"path": self.path, **data}


class PathMove(_Payload):
    """One path an apply or redo wrote into the user's tree: the user's state before and the state
    written (blob ids as ``git add`` stores them; None: absent). What ``sandbox undo`` puts back."""

    path: str
    before_mode: int | None = None
    before_oid: str | None = None
    after_mode: int | None = None
    after_oid: str | None = None


class MergebackData(_Payload):
    """The ``data`` of an ``apply_finished``, ``undo`` or ``redo`` event.

    ``paths``: the new records of the paths it wrote; ``prior``: their records before (what rolling
    it back restores); ``calls``/``newly``: applied calls (``newly``: for the first time);
    ``unapplied``: calls no longer applied (a rolled-back apply); ``changed``: the paths it moved;
    ``reverts``: the event a roll-back reverses; ``old_head``: the run's head before an undo in the
    sandbox.
    """

    target: MoveTarget | None = None
    workdir: str | None = None
    selected: list[str] = Field(default_factory=new_list)
    calls: list[str] = Field(default_factory=new_list)
    newly: list[str] = Field(default_factory=new_list)
    paths: list[PathRecordUpdate] = Field(default_factory=new_list)
    prior: list[PathRecordUpdate] = Field(default_factory=new_list)
    merged: list[str] = Field(default_factory=new_list)
    changed: list[str] = Field(default_factory=new_list)
    unapplied: list[str] = Field(default_factory=new_list)
    reverts: str | None = None
    old_head: str | None = None
    #: An undo: the partly applied paths it took back, as they were (what a redo writes again).
    partial: list[PathRecordUpdate] = Field(default_factory=new_list)
    #: A redo that wrote partly applied paths again: its call is not (wholly) applied.
    partly: bool = False
    #: An apply or redo of the user's tree: each path written, from the user's state to the new one.
    moves: list[PathMove] = Field(default_factory=new_list)


class UndoItem(_Model):
    """One undone call on the run's undo stack (newest last); a redo takes it off.

    ``partial``: the partly applied paths (``apply --hunks``) the undo took back, for the redo."""

    call_id: str
    target: MoveTarget | None = None
    event_id: str
    changed: list[str] = Field(default_factory=new_list)
    partial: list[PathRecordUpdate] = Field(default_factory=new_list)

    @model_serializer(mode="wrap")
    def _without_empty_partial(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Stored as before partial applies existed when there is none (old readers, fixtures).
        data: dict[str, Any] = handler(self)
        if not data.get("partial"):
            data.pop("partial", None)
        return data


class CompensationLink(_Payload):
    """A compensation started for a call (the ``compensation`` event, folded with its id and time)."""

    event_id: str = ""
    at: str = ""
    call_id: str
    compensation_call: str
    argv: list[str] = Field(default_factory=new_list)


class DriftRecord(_Payload):
    """Changes found in the worktree that no recorded call made (a ``drift`` event, folded)."""

    event_id: str = ""
    at: str = ""
    paths: list["DriftPath"] = Field(default_factory=new_list)
    commit: str | None = None


class NetworkRefusal(_Payload):
    """A connection the run's allowlist proxy refused (``--network allow``): a ``note`` event whose
    ``data`` is ``{"network_refused": {...}}``, so older readers fold it as any note.

    ``call_id``: the call that was running then (the newest started one), None between calls;
    ``session``: the token of the ``sandbox run`` session it happened in.
    """

    host: str
    port: int
    at: str
    method: str = "CONNECT"
    call_id: str | None = None
    session: str | None = None


class FoldData(_Model):
    """The bookkeeping a ledger's fold keeps besides its calls.

    ``user_paths``: per path of the user's tree, what the sandbox last wrote there
    (:class:`UserPathRecord`); ``undo_stack``: the undone calls; then, per event kind, the events
    of that kind in ledger order, each with its ``event_id`` and ``at``.
    """

    user_paths: dict[str, UserPathRecord] = Field(default_factory=new_dict)
    undo_stack: list[UndoItem] = Field(default_factory=new_list)
    checkpoint: list[dict[str, Any]] = Field(default_factory=new_list)
    rollback_session: list[dict[str, Any]] = Field(default_factory=new_list)
    drift: list[DriftRecord] = Field(default_factory=new_list)
    note: list[dict[str, Any]] = Field(default_factory=new_list)
    compensation: list[CompensationLink] = Field(default_factory=new_list)
    #: Agent session id (e.g. Claude Code's ``session_id``) -> the token of the ``sandbox run``
    #: session its first call was started from: a hook payload naming that agent session is
    #: recorded only when it comes from the same sandbox session (see sandbox.agent.recorder).
    sessions: dict[str, str] = Field(default_factory=new_dict)


def fold_mergeback(state: "LedgerState", event: Event, writable: Callable[[str], LedgerEntry | None]) -> None:
    """Fold an ``apply_finished``/``undo``/``redo`` event's merge-back bookkeeping into ``state.data``.

    Each event names its paths' new :class:`UserPathRecord` (or drops them); ``unapplied`` calls are
    no longer applied; an undo pushes its call on the undo stack and a redo takes it off.
    ``writable(call_id)`` is the call's entry, copied so older states sharing it stay unchanged.

    Kept with the payload types, not in the storage module and not in :mod:`sandbox.merge`: every
    process that reads a ledger (a hook, ``status``, ``drop``) must fold it completely, and the
    run layer reads ledgers without importing the merge package (issue 14).
    """
    data = MergebackData.model_validate(event.data)
    if event.call_id and event.kind in (EventKind.undo, EventKind.redo) and data.target == "user":
        undone = writable(event.call_id)
        if undone is not None:  # an undo in the user's tree takes the call out of it, a redo puts it back
            undone.applied = event.kind == EventKind.redo and not data.partly
    user_paths = state.data.user_paths
    for item in data.paths:
        record = item.record()
        if record is None:
            user_paths.pop(item.path, None)
        else:
            user_paths[item.path] = record
    for call_id in data.unapplied:
        entry = writable(call_id)
        if entry is not None:
            entry.applied = False
    if event.kind == EventKind.redo and not event.call_id and data.target == "user":
        for call_id in data.calls:  # a redo of a whole apply: its calls are applied again
            entry = writable(call_id)
            if entry is not None:
                entry.applied = True
    if event.call_id and event.kind in (EventKind.undo, EventKind.redo):
        stack = state.data.undo_stack
        if event.kind == EventKind.undo:
            stack.append(
                UndoItem(
                    call_id=event.call_id,
                    target=data.target,
                    event_id=event.event_id,
                    changed=data.changed,
                    partial=data.partial,
                )
            )
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].call_id == event.call_id:
                    del stack[i]
                    break


#: Event kinds whose events are also kept in the fold, in ledger order (``FoldData.<kind>``).
LOGGED_KINDS = frozenset(
    {EventKind.checkpoint, EventKind.rollback_session, EventKind.drift, EventKind.note, EventKind.compensation}
)


def log_event(state: "LedgerState", event: Event) -> None:
    """Append an event of a :data:`LOGGED_KINDS` kind to its list in ``state.data``."""
    item = {"event_id": event.event_id, "at": event.at.isoformat(), **event.data}
    if event.kind == EventKind.drift:
        state.data.drift.append(DriftRecord.model_validate(item))
    elif event.kind == EventKind.compensation:
        state.data.compensation.append(CompensationLink.model_validate(item))
    else:
        getattr(state.data, event.kind.value).append(item)


class LedgerState(_Model):
    """The fold of a whole ledger up to ``tip``; cached on disk and rebuilt from git when in doubt."""

    version: int = FORMAT_VERSION
    tip: str | None = None
    count: int = 0
    run: RunInfo | None = None
    epoch: int = 0
    head: str | None = None
    calls: dict[str, LedgerEntry] = Field(default_factory=new_dict)
    order: list[str] = Field(default_factory=new_list)
    event_ids: set[str] = Field(default_factory=new_set)
    ended: bool = False
    dropped: bool = False
    data: FoldData = Field(default_factory=FoldData)
    #: The clone this fold is for: merge-back events of other clones (their trees) are not folded.
    clone: str | None = None

    def undone_in_run(self) -> set[str]:
        """The calls an undo took out of the run itself (``undo --in-run``) and no redo brought back.

        An undo in the user's tree leaves the run as it was: such a call is still what the run brings.
        """
        return {i.call_id for i in self.data.undo_stack if (i.target or "sandbox") == "sandbox"}

    def live_calls(self) -> list[LedgerEntry]:
        """The calls whose changes make up the run's head (a commit, not undone in the run, not rolled
        back), in ledger order: what ``diff``, ``apply`` and ``branch`` read."""
        out = self.undone_in_run()
        return [
            self.calls[c] for c in self.order if self.calls[c].commit and not self.calls[c].rolled_back and c not in out
        ]


# --- merge-back models (apply journal, apply/undo reports) ---


class JournalEntry(_Model):
    """One path an apply/undo/redo is about to change: its state before and after (None: absent)."""

    version: int = FORMAT_VERSION
    path: str
    before_mode: int | None
    before_oid: str | None
    after_mode: int | None
    after_oid: str | None


class ApplyJournal(_Model):
    """What an apply, undo or redo is about to write into one working tree.

    Written and fsync'd before the first file changes and removed after the ledger event is
    recorded, so a crash at any instant leaves it behind: ``sandbox apply --continue`` finishes
    the operation from it, ``sandbox undo`` rolls it back.
    """

    version: int = FORMAT_VERSION
    op: str
    run_id: str
    target: str
    target_dir: str
    calls: list[str] = Field(default_factory=new_list)
    entries: list[JournalEntry] = Field(default_factory=new_list)
    event: Event
    old_head: str | None = None
    new_head: str | None = None
    pid: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    #: Names every temporary file of the operation before any exists (see ``sandbox.store.journal.Temps``).
    token: str | None = None


class ConflictReport(_Model):
    """A path an apply or undo refused to write: the base, agent and user blob ids and why."""

    version: int = FORMAT_VERSION
    path: str
    base: str | None
    agent: str | None
    user: str | None
    reason: str
    hint: str
    #: Unselected calls the path needs first (their changes come before the selected ones), oldest first.
    needs: list[str] = Field(default_factory=new_list)


class ApplyReport(_Model):
    """What an apply, undo or redo did (or, on a dry run or a conflict, would do)."""

    version: int = FORMAT_VERSION
    op: str = "apply"
    run: str
    target: str = "user"
    target_dir: str
    calls: list[str] = Field(default_factory=new_list)
    applied: list[str] = Field(default_factory=new_list)
    skipped: list[str] = Field(default_factory=new_list)
    conflicts: list[ConflictReport] = Field(default_factory=new_list)
    merged: list[str] = Field(default_factory=new_list)
    attention: list[str] = Field(default_factory=new_list)
    reasons: dict[str, str] = Field(default_factory=new_dict)
    dry_run: bool = False
    head_moved: bool = False
    recovered: str | None = None
    head: str | None = None
    #: Paths an undo (or the roll-back of an interrupted operation) put back; ``applied`` lists
    #: only paths an apply or redo wrote, and both are empty when the operation was refused.
    restored: list[str] = Field(default_factory=new_list)
    #: True when the operation was refused (a conflict or an obstacle): nothing was written.
    refused: bool = False
    #: Paths of which only some hunks were written (``apply --hunks``), with the ids taken.
    partial: dict[str, list[str]] = Field(default_factory=new_dict)
    #: On a dry run: the paths the apply would write (``applied`` stays empty: nothing was written).
    would_apply: list[str] = Field(default_factory=new_list)


class UndoReport(ApplyReport):
    """What an undo or redo did: the call it reversed and where (``user`` tree or ``sandbox``)."""

    op: str = "undo"
    call: str | None = None


# --- checkpoint models (checkpoints, budget, resume report) ---


class BudgetLine(_Model):
    """One budget dimension: its limit (None: unlimited), what was used and what remains."""

    limit: float | None = None
    used: float = 0
    remaining: float | None = None

    @model_validator(mode="after")
    def _fill_remaining(self) -> "BudgetLine":
        if self.remaining is None and self.limit is not None:
            self.remaining = max(self.limit - self.used, 0)
        return self


class Budget(_Model):
    """The runtime's budget at a checkpoint: steps, tokens, cost and wall time (seconds)."""

    version: int = FORMAT_VERSION
    steps: BudgetLine = Field(default_factory=BudgetLine)
    tokens: BudgetLine = Field(default_factory=BudgetLine)
    cost: BudgetLine = Field(default_factory=BudgetLine)
    wall_time_s: BudgetLine = Field(default_factory=BudgetLine)


class LedgerSnapshot(_Model):
    """The tool ledger as of a checkpoint: its tip, a commit id that content-addresses every event
    before it (the entries are materialized from it on demand); ``entries_ref`` optionally a blob."""

    tip: str | None
    count: int
    epoch: int
    entries_ref: str | None = None


class FileSnapshot(_Model):
    """The workspace as of a checkpoint: the run's head commit and each path changed since the base."""

    commit: str
    base: str
    files: list[FileChange] = Field(default_factory=new_list)


class Checkpoint(_Model):
    """One immutable checkpoint. ``id`` is ``ckpt_`` + 12 hex of the SHA-256 of its canonical JSON
    with ``id`` empty, so anyone can re-hash it; ``name`` (``ckpt_004``) numbers it for humans."""

    version: int = FORMAT_VERSION
    id: str = ""
    seq: int
    name: str
    run_id: str
    step_id: str | None = None
    label: str | None = None
    kind: str = "runtime"
    created_at: datetime = Field(default_factory=utcnow)
    messages_ref: str | None = None
    run_state: Any = None
    tool_ledger: LedgerSnapshot
    file_snapshot: FileSnapshot
    approvals_ref: str | None = None
    budget: Budget | None = None
    trace_ref: str | None = None


class LiveProcess(_Model):
    """A process of an agent session found alive (or stopped) by ``sandbox resume``."""

    pid: int
    cmd: str
    call_ids: list[str] = Field(default_factory=new_list)
    #: ``alive``, or how resume stopped it: ``TERM`` or ``KILL``.
    state: str = "alive"


class UncertainCall(_Model):
    """A call whose outcome is unknown after a resume, and what may be done with it."""

    call_id: str
    tool_name: str
    step_id: str | None = None
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    decision: ReplayDecision
    summary: str | None = None
    input_hash: str
    started_at: datetime | None = None
    #: Whether processes of the agent session the call ran in were still running at the resume
    #: (None: the call's start recorded no session to look for).
    processes_alive: bool | None = None


class Denial(_Model):
    """A refused call: the same tool with the same input hash is known denied."""

    call_id: str
    tool_name: str
    input_hash: str
    step_id: str | None = None
    reason: str | None = None


class DriftPath(_Model):
    """A worktree path that differs from the run's head although no recorded call changed it."""

    path: str
    before: str | None
    after: str | None
    before_mode: int | None = None
    after_mode: int | None = None
    attributed_to: str | None = None


class ResumeReport(_Model):
    """What ``sandbox resume`` found and decided; ``note`` is the text for the model."""

    version: int = FORMAT_VERSION
    run_id: str
    epoch: int
    checkpoint: Checkpoint | None = None
    last_completed_step: str | None = None
    uncertain: list[UncertainCall] = Field(default_factory=new_list)
    do_not_replay: list[str] = Field(default_factory=new_list)
    may_replay: list[str] = Field(default_factory=new_list)
    ask_first: list[str] = Field(default_factory=new_list)
    denied: list[Denial] = Field(default_factory=new_list)
    drift: list[DriftPath] = Field(default_factory=new_list)
    drift_commit: str | None = None
    note: str
    next_step: str
    messages_ref: str | None = None
    run_state: Any = None
    messages: Any = None
    session_rollback: dict[str, Any] | None = None
    head: str | None = None
    worktree_recreated: bool = False
    problems: list[str] = Field(default_factory=new_list)
    #: Processes of the run's agent sessions that resume stopped (--stop-processes).
    stopped_processes: list[LiveProcess] = Field(default_factory=new_list)


# --- agent integration models (hook payloads, sandbox config) ---


# --- the repository's host (sandbox.agent.host) ---


class HostInfo(_Model):
    """``<common>/sandbox/host/host.json``: the live host of a repository (its liveness record).

    Valid only while a process holds ``host.lock`` (see :func:`sandbox.agent.wire.host_alive`).
    """

    version: int = FORMAT_VERSION
    pid: int
    socket: str  #: the host's socket path (a filesystem path, never an abstract name)
    started_at: datetime = Field(default_factory=utcnow)


#: Every model written to disk or into git objects (``sandbox schema`` prints them).
#: Each section above adds its own models to this list just below its definitions' section.
PERSISTED: list[type[BaseModel]] = [Event, LedgerEntry, LedgerState, RunInfo, CallSpec, FileChange, ProcessScope]
PERSISTED += [JournalEntry, ApplyJournal, ConflictReport, ApplyReport, UndoReport, HunkTaken, PartialApply]
# checkpoint models
PERSISTED += [Checkpoint, Budget, ResumeReport]
# the repository's host
PERSISTED += [HostInfo]


# --- integrity of derived state (sandbox.store.integrity) ---


class LedgerCacheFile(_Model):
    """The on-disk fold cache: the fold's JSON and a MAC over exactly those bytes.

    The MAC is an HMAC-SHA256 keyed by a random key that lives only in the ledger (a blob in every
    event commit's tree), so a cache edited by hand or by an agent no longer verifies and is
    rebuilt from the ledger instead of being trusted.
    """

    version: int = FORMAT_VERSION
    mac: str
    state: str


class AckedTip(_Model):
    """The ledger tip a run last acknowledged, kept in the run's directory beside the ref.

    Written after every append (under the run's lock, after the ref moved), so a ledger ref that was
    deleted, rewound or rewritten behind the sandbox's back is detected and can be restored.
    """

    version: int = FORMAT_VERSION
    run_id: str
    tip: str
    count: int


PERSISTED += [LedgerCacheFile, AckedTip]


class FetchedFrom(_Model):
    """Where a run in this repository came from (``<common>/sandbox/runs/<run>/fetched.json``).

    Written by ``sandbox fetch`` each time it brings events of the run; local to this clone.
    """

    version: int = FORMAT_VERSION
    remote: str
    url: str | None = None
    fetched_at: datetime = Field(default_factory=utcnow)
    #: The ledger tip the fetch installed, and how many events arrived with it.
    tip: str
    events: int = 0


PERSISTED += [FetchedFrom]


class TranscriptIndex(_Model):
    """One stored copy of an agent's conversation (``index.json`` of a transcript commit).

    The transcript's bytes are split at line ends into chunks, each a blob (so a later copy of a
    transcript that only grew stores only its new chunks: see :mod:`sandbox.agent.transcripts`).
    ``calls`` maps each tool-use id (= the call id in the ledger) to the line where the agent's
    message asking for it begins: a rewind cuts the conversation there.
    """

    version: int = FORMAT_VERSION
    #: Which agent wrote it: ``claude-code``, ``gemini`` or ``codex``.
    agent: str
    #: The agent's own session id.
    session: str
    size: int
    sha256: str
    lines: int
    #: Blob ids of the chunks, in order.
    chunks: list[str] = Field(default_factory=new_list)
    calls: dict[str, int] = Field(default_factory=new_dict)
    #: Why it was stored: ``session end``, ``checkpoint ckpt_003``, ``resume``, ``rewind``.
    reason: str = ""
    stored_at: datetime = Field(default_factory=utcnow)


PERSISTED += [TranscriptIndex]
