"""The report of an apply, undo or redo: what it wrote, merged, skipped or refused, path by path."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, new_dict, new_list


class ConflictReport(Model):
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


class ApplyReport(Model):
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
