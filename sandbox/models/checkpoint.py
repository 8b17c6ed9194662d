"""The checkpoint: the ledger, the workspace and the budget as of one moment of a run."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from sandbox.models.base import FORMAT_VERSION, Model, new_list, utcnow
from sandbox.models.event import FileChange


class BudgetLine(Model):
    """One budget dimension: its limit (None: unlimited), what was used and what remains."""

    limit: float | None = None
    used: float = 0
    remaining: float | None = None

    @model_validator(mode="after")
    def _fill_remaining(self) -> "BudgetLine":
        if self.remaining is None and self.limit is not None:
            self.remaining = max(self.limit - self.used, 0)
        return self


class Budget(Model):
    """The runtime's budget at a checkpoint: steps, tokens, cost and wall time (seconds)."""

    version: int = FORMAT_VERSION
    steps: BudgetLine = Field(default_factory=BudgetLine)
    tokens: BudgetLine = Field(default_factory=BudgetLine)
    cost: BudgetLine = Field(default_factory=BudgetLine)
    wall_time_s: BudgetLine = Field(default_factory=BudgetLine)


class LedgerSnapshot(Model):
    """The tool ledger as of a checkpoint: its tip, a commit id that content-addresses every event
    before it (the entries are materialized from it on demand); ``entries_ref`` optionally a blob."""

    tip: str | None
    count: int
    epoch: int
    entries_ref: str | None = None


class FileSnapshot(Model):
    """The workspace as of a checkpoint: the run's head commit and each path changed since the base."""

    commit: str
    base: str
    files: list[FileChange] = Field(default_factory=new_list)


class Checkpoint(Model):
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
