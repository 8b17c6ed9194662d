"""The ``--json`` outputs of the commands on calls and their changes: log --call, exec, diff, apply,
undo and redo."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from sandbox import models
from sandbox.cli.outputs.base import Output, renamed_model


class StreamText(Output):
    """The kept tail of one stream of a command call (``sandbox.run.output``), with its text."""

    bytes: int = Field(description="How many bytes the stream carried in all.")
    kept: int = Field(description="How many of its last bytes are kept (at most 65536).")
    blob: str = Field(description="The git blob holding the kept bytes.")
    text: str = Field(description="The kept bytes as UTF-8 (invalid bytes as \\xNN).")


class CallDetail(models.LedgerEntry):
    """``sandbox log --call CALL --json``: the ledger entry with its whole error text and its output's
    tails (``stdout``, ``stderr``, or ``output`` where one pipe got both; empty: none kept)."""

    error_text: str | None
    output: dict[str, StreamText] = Field(default_factory=dict)


class CommentOutput(Output):
    """``sandbox comment --json`` (one comment) and ``sandbox comments --json`` (a list of them)."""

    id: str
    path: str
    line: int | None
    text: str
    at: str = Field(description="When it was made (the ledger note's time).")
    call_id: str | None = Field(description="The call that last changed the path (None: no call did).")
    sent_session: str | None = Field(description="The agent session it was sent to (None: a new one, or unsent).")
    sent_at: str | None = Field(description="When 'resume --continue' sent it (None: not sent yet).")
    sent_agent: str | None = Field(description="The agent it was sent to.")
    own: bool = Field(
        description="Made in this clone (signed with its key); a fetched run's comments are shown, "
        "never handed to an agent."
    )


class ExecOutput(Output):
    """``sandbox exec --json`` (the command's own output goes to stderr)."""

    call_id: str
    status: str
    exit_code: int
    files: int | None = Field(description="Files the call changed (None: the host did not say).")
    cannot_start: str | None = Field(description="Why the command could not start (it is recorded failed).")


class DiffChange(Output):
    """One change of a hunk (a run of removed and added lines): its stable id and its header."""

    id: str
    header: str


class DiffHunk(Output):
    """One hunk of a file in ``sandbox diff --json``, with its stable id (see sandbox.merge.hunks)."""

    id: str
    header: str
    text: str
    changes: list[DiffChange]


class DiffFile(Output):
    """One file of ``sandbox diff --json``."""

    path: str
    status: str
    before_hash: str | None
    after_hash: str | None
    before_mode: str | None
    after_mode: str | None
    binary: bool
    patch: str
    #: The whole file's stable id, and its hunks (``id``, ``header``, ``text``, ``changes``) with
    #: theirs: what ``apply --hunks-from`` takes (see sandbox.merge.hunks).
    id: str
    hunks: list[DiffHunk] = Field(default_factory=list)
    #: A rename as ``diff`` shows it: on the added path the old one, on the deleted path the new one.
    renamed_from: str | None = None
    renamed_to: str | None = None


class DiffOutput(Output):
    """``sandbox diff --json``: the range shown and its files."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    run: str
    call_id: str | None
    #: The selected calls (several ``--call``, ranges), in ledger order; None for the whole run.
    calls: list[str] | None = None
    from_: str = Field(alias="from")
    to: str
    files: list[DiffFile]
    #: ``--unapplied``: only what is not in the user's tree yet (a partly applied file: the hunks left).
    unapplied: bool = False


ApplyOutput = renamed_model(models.ApplyReport, "ApplyOutput")
UndoOutput = renamed_model(models.UndoReport, "UndoOutput")
