"""The payloads of the other ledger events the fold keeps: compensations, drift, refused connections."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

import types
from collections.abc import Callable, Mapping
from typing import TypeVar, Union, cast, get_args, get_origin, get_type_hints

from pydantic import ConfigDict, Field, with_config
from typing_extensions import Required, TypedDict

from sandbox.models.base import Model, Payload, new_list


class CompensationLink(Payload):
    """A compensation started for a call (the ``compensation`` event, folded with its id and time)."""

    event_id: str = ""
    at: str = ""
    call_id: str
    compensation_call: str
    argv: list[str] = Field(default_factory=new_list)


class DriftPath(Model):
    """A worktree path that differs from the run's head although no recorded call changed it."""

    path: str
    before: str | None
    after: str | None
    before_mode: int | None = None
    after_mode: int | None = None
    attributed_to: str | None = None


class DriftRecord(Payload):
    """Changes found in the worktree that no recorded call made (a ``drift`` event, folded)."""

    event_id: str = ""
    at: str = ""
    paths: list[DriftPath] = Field(default_factory=new_list)
    commit: str | None = None
    #: The call the changes were booked to (all of them attributed to it, a call killed while it wrote):
    #: the commit is that call's change and the run's head (older drift left the head where it was).
    booked_to: str | None = None


class NetworkRefusal(Payload):
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


# --- the ``data`` of the events the fold reads, by kind ---
#
# Typed views of what the writers store (the fold reads through them, with :func:`view`); a field
# missing is a ledger written before the field existed. Stored events keep any other fields as they are.


class CallFinishData(TypedDict, total=False):
    """``call_succeeded``/``call_failed``/``call_resolved``: how the call ended."""

    #: ``call_resolved``: the status the user gave it (a :class:`~sandbox.models.CallStatus` value).
    status: str
    #: ``call_failed``: the call was stopped before it ended (Ctrl-C, Esc, its session ended).
    interrupted: bool
    #: ``call_failed``: the agent reported the call outside the hook protocol.
    violation: bool
    #: How long the tool itself ran, as the agent says (it started after the permission prompt).
    ran_ms: int


class ResumedData(TypedDict, total=False):
    """``resumed``: the epoch a resume began, and the machine it ran on."""

    epoch: int
    host: str


class ApplyFinishData(TypedDict, total=False):
    """``apply_finished``: the calls the apply brought into the user's tree (the rest is
    :class:`~sandbox.models.MergebackData`'s, which the fold validates whole)."""

    calls: list[str]


class RollbackFilesData(TypedDict, total=False):
    """``rollback_files``: the checkpoint the run's files went back to and the calls taken out or kept."""

    checkpoint: str
    name: str
    undone_calls: list[str]
    applied_calls: list[str]
    #: The calls whose changes the checkpoint's files hold (absent: written before rollbacks named them).
    kept_calls: list[str]


class RollbackSessionData(TypedDict, total=False):
    """``rollback_session``: the checkpoint the session went back to, and the calls recorded after it."""

    checkpoint: str
    name: str
    label: str | None
    step_id: str | None
    messages_ref: str | None
    calls_after: list[str]


# --- the events the fold keeps in ledger order (``FoldData.<kind>``): the event's data, its id and time ---


@with_config(ConfigDict(extra="allow"))
class LoggedEvent(TypedDict, total=False):
    """An event kept in the fold: its ``event_id`` and ``at`` (ISO time) beside its data."""

    event_id: Required[str]
    at: Required[str]


@with_config(ConfigDict(extra="allow"))
class CheckpointLogged(LoggedEvent, total=False):
    """A ``checkpoint`` event as the fold keeps it (see :mod:`sandbox.run.checkpoint`)."""

    id: str
    seq: int
    name: str
    label: str | None
    step_id: str | None
    #: The checkpoint's JSON blob and the tree of its store entry.
    blob: str
    tree: str
    head: str | None
    pruned: list[str]


@with_config(ConfigDict(extra="allow"))
class RollbackSessionLogged(LoggedEvent, RollbackSessionData, total=False):
    """A ``rollback_session`` event as the fold keeps it: :class:`RollbackSessionData` with its id and time."""


@with_config(ConfigDict(extra="allow"))
class NoteLogged(LoggedEvent, total=False):
    """A ``note`` event as the fold keeps it; what a note says varies (a refused connection, a stored
    transcript, a resume's finding), so its fields are read where they are used."""


# --- reading an event's data through its kind's view ---

T = TypeVar("T")
_Check = Callable[[object], bool]


def view(data: Mapping[str, object], kind: type[T]) -> T:
    """``data`` (an event's, as stored) read as the TypedDict ``kind``: every key ``kind`` declares is
    checked against its type, and one whose value is of another type is left out (read as missing,
    like a field an older ledger lacks); keys ``kind`` does not declare are kept as they are.

    The checks follow the declared types (``str``, ``int``, ``bool``, ``list[...]``, ``X | None``),
    made once per kind: a dict comprehension per event, no pydantic validation on the fold's path.
    """
    spec = _SPECS.get(kind)
    if spec is None:  # once per kind: its keys' checks and the keys it requires
        checks = {key: _check(hint) for key, hint in get_type_hints(kind).items()}
        spec = _SPECS[kind] = (checks, frozenset(getattr(kind, "__required_keys__", ())))
    checks, required = spec
    out = {key: value for key, value in data.items() if key not in checks or checks[key](value)}
    if not required <= out.keys():
        raise ValueError(f"{getattr(kind, '__name__', kind)} needs {', '.join(sorted(required - out.keys()))}")
    return cast(T, out)  # each declared key was just checked against its type


_SPECS: dict[object, tuple[dict[str, _Check], frozenset[str]]] = {}


def _check(hint: object) -> _Check:
    """A predicate true for the values of type ``hint`` (anything for a type it does not know)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [_check(arg) for arg in get_args(hint)]
        return lambda value: any(part(value) for part in parts)
    if origin is list:
        (item,) = get_args(hint)
        inner = _check(item)
        return lambda value: isinstance(value, list) and all(inner(x) for x in value)
    if hint is type(None):
        return lambda value: value is None
    if hint is int:  # a JSON true is not a number of milliseconds
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        cls = hint
        return lambda value: isinstance(value, cls)
    return lambda value: True
