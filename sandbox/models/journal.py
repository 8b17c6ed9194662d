"""The apply journal: what an apply, undo or redo is about to write into one working tree."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, new_list, utcnow
from sandbox.models.event import Event


class JournalEntry(Model):
    """One path an apply/undo/redo is about to change: its state before and after (None: absent)."""

    version: int = FORMAT_VERSION
    path: str
    before_mode: int | None
    before_oid: str | None
    after_mode: int | None
    after_oid: str | None


class ApplyJournal(Model):
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
