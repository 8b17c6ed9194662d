"""Each event kind's ``data``, typed when written as when read (issue 33).

Every :class:`~sandbox.models.EventKind` is in exactly one of three places (a test holds it):

* :data:`MODELS`: the model of its data. The kinds whose events carry none (a run's start, a call's
  plan, approval, denial, start, uncertainty, refusal: what they say is in the event's own typed
  fields, ``run``, ``call``, ``procs``, ``reason``) have :class:`NoData`, which declares no key.
* :data:`RESERVED`: kinds declared since the first version and never written by any sandbox
  (``head_moved``, ``apply_started``, ``run_ended``, ``run_dropped``). One in a ledger was forged or
  damaged: refused when read as when written.
* :data:`FREE`: ``note``, whose data varies (see :class:`~sandbox.models.payloads.NoteLogged`).

Writing (:func:`check`) refuses, before the event is appended, a key its kind does not declare and a
declared key of another type, so what this clone records is what its readers expect, and a typo in
a writer fails its tests instead of being folded as missing. Reading (:func:`refusal`, which the
store's ledger asks of every event it reads) refuses the same mistyped values, a key in a kind that
carries no data, a reserved kind and a kind without the field it is about (a ``run_started``
without its ``run``): such an event is reported as damaged, with the ledger past it, never folded as
if it were fine. Only keys an open model does not declare are kept when read (the fold's views keep
them: what a newer sandbox of the same format added). The data is part of the event's format, so
the event's ``version`` covers it (readers refuse versions they do not know).
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, get_type_hints

from pydantic import BaseModel, ValidationError
from typing_extensions import TypedDict

from sandbox.models.mergeback import MergebackData
from sandbox.models.payloads import (
    CallFinishData,
    CheckpointLogged,
    CompensationLink,
    DriftRecord,
    ResumedData,
    RollbackFilesData,
    RollbackSessionData,
    _check,
)

if TYPE_CHECKING:
    from sandbox.models.event import Event


class NoData(TypedDict, total=False):
    """The ``data`` of a kind that carries none: what its event says is in the event's own typed fields."""


#: The model of each kind's data (a TypedDict, or a payload model whose fields are the keys).
MODELS: dict[str, object] = {
    "run_started": NoData,
    "call_planned": NoData,
    "call_approved": NoData,
    "call_denied": NoData,
    "call_started": NoData,
    "call_uncertain": NoData,
    "call_not_run": NoData,
    "call_succeeded": CallFinishData,
    "call_failed": CallFinishData,
    "call_resolved": CallFinishData,
    "resumed": ResumedData,
    "apply_finished": MergebackData,
    "undo": MergebackData,
    "redo": MergebackData,
    "checkpoint": CheckpointLogged,
    "rollback_files": RollbackFilesData,
    "rollback_session": RollbackSessionData,
    "compensation": CompensationLink,
    "drift": DriftRecord,
}
#: Kinds no sandbox has ever written: one in a ledger is forged or damaged.
RESERVED = frozenset({"head_moved", "apply_started", "run_ended", "run_dropped"})
#: Kinds whose data is not checked: what a note says varies.
FREE = frozenset({"note"})
#: The event fields a kind is about (None there: the event says nothing the fold could read).
REQUIRED: dict[str, tuple[str, ...]] = {"run_started": ("run",)}
#: Keys the fold adds beside a kept event's data, never written in it.
_LOGGED = frozenset({"event_id", "at"})


_HINTS: dict[str, dict[str, object]] = {}


class EventDataError(ValueError):
    """An event's data does not match its kind's model (a writer's bug: nothing is recorded)."""


def check(kind: str, data: Mapping[str, object]) -> None:
    """Refuse ``data`` for an event of ``kind`` with a key its model does not declare, or a value of
    another type, or a kind no sandbox writes (:class:`EventDataError`); ``note`` is not checked."""
    if kind in RESERVED:
        raise EventDataError(f"A {kind} event is never written (the kind is reserved); nothing was recorded.")
    fault = _fault(kind, data, keep_unknown=False)
    if fault is not None:
        raise EventDataError(f"A {kind} event's data {fault}.")


def check_event(event: "Event") -> None:
    """:func:`check` of the event's data, and the fields its kind is about (:class:`EventDataError`)."""
    kind = event.kind.value
    check(kind, event.data)
    missing = next((name for name in REQUIRED.get(kind, ()) if getattr(event, name) is None), None)
    if missing is not None:
        raise EventDataError(f"A {kind} event needs its {missing}; nothing was recorded.")


def refusal(event: "Event") -> str | None:
    """Why ``event``, as read from a ledger, is not what its kind says (a phrase completing "Ledger
    event X of run R ..."), or None when it reads as typed. Keys an open model does not declare pass."""
    kind = event.kind.value
    if kind in RESERVED:
        return f"is a {kind} event, a kind no sandbox writes"
    missing = next((name for name in REQUIRED.get(kind, ()) if getattr(event, name) is None), None)
    if missing is not None:
        return f"is a {kind} event without its {missing}"
    fault = _fault(kind, event.data, keep_unknown=True)
    return None if fault is None else f"has {kind} data that {fault}"


def _fault(kind: str, data: Mapping[str, object], keep_unknown: bool) -> str | None:
    """What is wrong with ``data`` for ``kind`` (completing "the data ..."), or None. ``keep_unknown``:
    keys the model does not declare pass, unless the kind carries no data at all."""
    model = MODELS.get(kind)
    if model is None or not data:
        return None
    unknown: list[str] = []
    if isinstance(model, type) and issubclass(model, BaseModel):
        if not keep_unknown:
            unknown = sorted(set(data) - (set(model.model_fields) - _LOGGED))
        if not unknown:
            try:
                model.model_validate(dict(data))
            except ValidationError as exc:
                why = "; ".join(line.strip() for line in str(exc).splitlines()[1:3])
                return f"does not match {model.__name__} ({why})"
    else:
        hints = _HINTS.get(kind)
        if hints is None:  # once per kind
            hints = _HINTS[kind] = {k: v for k, v in get_type_hints(model).items() if k not in _LOGGED}
        if not keep_unknown or not hints:  # a kind that carries no data has no key to keep
            unknown = sorted(set(data) - set(hints))
        wrong = sorted(k for k, v in data.items() if k in hints and not _check(hints[k])(v))
        if wrong:
            return f"has {', '.join(wrong)} of another type than declared"
    if unknown:
        return f"has {', '.join(unknown)}, which {getattr(model, '__name__', str(model))} does not declare"
    return None
