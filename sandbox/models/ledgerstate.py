"""The fold of a ledger as it is cached beside the run: each call's entry and the bookkeeping besides.

How events become this state is :mod:`sandbox.run.fold`'s; these are only its shapes.
"""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime
from typing import Any

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, is_empty, new_dict, new_list, new_set, utcnow
from sandbox.models.event import Approval, CallStatus, FileChange, Idempotency, ReplayPolicy, RunInfo
from sandbox.models.mergeback import MoveTarget, PathRecordUpdate, UserPathRecord
from sandbox.models.payloads import CheckpointLogged, CompensationLink, DriftRecord, NoteLogged, RollbackSessionLogged


class LedgerEntry(Model):
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
    #: The ``sandbox run`` session the call was started in (its token; None: outside any, or folded
    #: before this was kept): only that session, or ``sandbox resume``, ends it (sandbox.agent.recorder).
    session: str | None = None
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
    compensation: dict[str, object] | None = None
    created_at: datetime = Field(default_factory=utcnow)


class UndoItem(Model):
    """One undone call on the run's undo stack (newest last); a redo takes it off.

    ``partial``: the partly applied paths (``apply --hunks``) the undo took back, for the redo."""

    call_id: str
    target: MoveTarget | None = None
    event_id: str
    changed: list[str] = Field(default_factory=new_list)
    #: Left out when empty: stored as before partial applies existed (old readers, fixtures).
    partial: list[PathRecordUpdate] = Field(default_factory=new_list, exclude_if=is_empty)


class FoldData(Model):
    """The bookkeeping a ledger's fold keeps besides its calls.

    ``user_paths``: per path of the user's tree, what the sandbox last wrote there
    (:class:`UserPathRecord`); ``undo_stack``: the undone calls; then, per event kind, the events
    of that kind in ledger order, each with its ``event_id`` and ``at``.
    """

    user_paths: dict[str, UserPathRecord] = Field(default_factory=new_dict)
    undo_stack: list[UndoItem] = Field(default_factory=new_list)
    checkpoint: list[CheckpointLogged] = Field(default_factory=new_list)
    rollback_session: list[RollbackSessionLogged] = Field(default_factory=new_list)
    drift: list[DriftRecord] = Field(default_factory=new_list)
    note: list[NoteLogged] = Field(default_factory=new_list)
    compensation: list[CompensationLink] = Field(default_factory=new_list)
    #: Agent session id (e.g. Claude Code's ``session_id``) -> the token of the ``sandbox run``
    #: session its first call was started from: a hook payload naming that agent session is
    #: recorded only when it comes from the same sandbox session (see sandbox.agent.recorder).
    sessions: dict[str, str] = Field(default_factory=new_dict)


class LedgerState(Model):
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
    #: How many of the folded events are not this clone's (their MAC does not verify: see
    #: :mod:`sandbox.store.provenance`): a run holding any is launched as one from elsewhere. None: a
    #: fold cached before they were counted (the ledger folds it again).
    foreign: int | None = None

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
