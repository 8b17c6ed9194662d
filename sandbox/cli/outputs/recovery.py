"""The ``--json`` outputs of checkpoints and the recovery commands: checkpoints, resume, rollback,
rewind, compensate."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sandbox import models
from sandbox.cli.outputs.base import Output, renamed_model


class CheckpointsOutput(Output):
    """``sandbox checkpoints --json``."""

    checkpoints: list[models.Checkpoint]
    problems: list[str]


class ResumeCheckpoint(Output):
    """The checkpoint a resume starts from, in brief."""

    id: str
    name: str
    label: str | None
    step_id: str | None
    seq: int
    created_at: str


_ResumeBase = renamed_model(models.ResumeReport, "_ResumeBase", drop=("messages", "checkpoint"))


class ResumeOutput(_ResumeBase):  # type: ignore[misc,valid-type]
    """``sandbox resume --json`` (the message history is left out: see ``messages_ref``)."""

    checkpoint: ResumeCheckpoint | None = None


class RollbackFilesOutput(Output):
    """``sandbox rollback --files --json``."""

    action: str
    checkpoint: str
    commit: str | None
    files: list[models.FileChange]
    undone_calls: list[str]
    applied_calls: list[str]
    message: str


class RewindSideEffect(Output):
    """A call after the rewind point that may have acted outside the worktree."""

    call_id: str
    tool_name: str
    summary: str | None
    hint: str


class RewindOutput(Output):
    """``sandbox rewind --json``."""

    run: str
    call_id: str = Field(description="The call the run was rewound to just before.")
    checkpoint: str = Field(description="The automatic checkpoint at that call's start (the files now).")
    undo_to: str | None = Field(description="The checkpoint 'rollback --files --to' takes the rewind back to.")
    files: list[str]
    session: str | None = Field(description="The agent session forked from the conversation (None: none stored).")
    from_session: str | None
    side_effects: list[RewindSideEffect]
    messages: list[str]


class RollbackSessionOutput(Output):
    """``sandbox rollback --session --json``."""

    action: str
    checkpoint: str
    checkpoint_id: str
    run_state: Any
    calls_after: list[str]
    message: str


class CompensateOutput(Output):
    """``sandbox compensate --json``."""

    action: str
    call_id: str
    compensation_call: str | None
    exit_code: int
    entry: models.LedgerEntry | None
    message: str
