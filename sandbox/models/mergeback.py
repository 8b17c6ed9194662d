"""The merge-back payloads of ledger events: what an apply, undo or redo wrote at each path of the user's tree.

An event's ``data`` is stored as JSON in the event (its ``version`` covers them). Each payload
below is read back through its model: known fields typed, fields it does not know kept as they
are (``extra="allow"``), so a ledger written by an older or newer sandbox still reads.
"""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from typing import Literal

from pydantic import Field
from typing_extensions import Required, TypedDict

from sandbox.models.base import FORMAT_VERSION, Model, Payload, is_empty, new_list

#: What an apply does with one path (:class:`sandbox.merge.mergeback.PlannedPath`).
ApplyAction = Literal["write", "merge", "skip", "conflict"]
#: Where an apply, undo or redo wrote: the user's working tree or the run's worktree.
MoveTarget = Literal["user", "sandbox"]


class HunkTaken(Model):
    """One hunk (or change) a partial apply took: its stable id and ``@@`` header (see sandbox.merge.hunks)."""

    version: int = FORMAT_VERSION
    id: str
    header: str


class PartialApply(Model):
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


class UserPathRecord(Model):
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
    #: Left out when None: stored as before partial applies existed (old readers, fixtures).
    partial: PartialApply | None = Field(default=None, exclude_if=is_empty)


class PathRecordUpdate(Payload):
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

    def to_data(self) -> "PathRecordData":
        """The update as stored in an event: ``{"path", "drop": true}`` or ``{"path", **record}``."""
        if self.drop:
            return {"path": self.path, "drop": True}
        data: PathRecordData = {
            "path": self.path,
            "mode": self.mode,
            "oid": self.oid,
            "target_mode": self.target_mode,
            "target_oid": self.target_oid,
            "calls": list(self.calls),
        }
        if self.partial is not None:  # records of whole paths are stored as before partial applies existed
            data["partial"] = self.partial.model_dump(mode="json")
        return data


class PathRecordData(TypedDict, total=False):
    """A :class:`PathRecordUpdate` as stored in an event's ``data`` (:meth:`PathRecordUpdate.to_data`)."""

    path: Required[str]
    drop: bool
    mode: int | None
    oid: str | None
    target_mode: int | None
    target_oid: str | None
    calls: list[str]
    #: A :class:`PartialApply` as JSON.
    partial: dict[str, object]


class PathMove(Payload):
    """One path an apply or redo wrote into the user's tree: the user's state before and the state
    written (blob ids as ``git add`` stores them; None: absent). What ``sandbox undo`` puts back."""

    path: str
    before_mode: int | None = None
    before_oid: str | None = None
    after_mode: int | None = None
    after_oid: str | None = None


class MergebackData(Payload):
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
