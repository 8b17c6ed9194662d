"""Each event kind's ``data``, typed when written as when read (issue 33).

The fold reads an event's data through its kind's view (:func:`sandbox.models.payloads.view`,
:class:`~sandbox.models.MergebackData`), which keeps keys it does not know: a newer sandbox's ledger
still reads. Writing is stricter: :func:`check` refuses, before the event is appended, a key its kind
does not declare and a declared key of another type, so what this clone records is what its readers
expect, and a typo in a writer fails its tests instead of being folded as missing.

A kind not named in :data:`MODELS` is not checked here (``note``: what a note says varies, see
:class:`~sandbox.models.payloads.NoteLogged`; the kinds that carry no data).
"""

from collections.abc import Mapping
from typing import get_type_hints

from pydantic import BaseModel, ValidationError

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

#: The model of each kind's data (a TypedDict, or a payload model whose fields are the keys).
MODELS: dict[str, object] = {
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
#: Keys the fold adds beside a kept event's data, never written in it.
_LOGGED = frozenset({"event_id", "at"})


_HINTS: dict[str, dict[str, object]] = {}


class EventDataError(ValueError):
    """An event's data does not match its kind's model (a writer's bug: nothing is recorded)."""


def check(kind: str, data: Mapping[str, object]) -> None:
    """Refuse ``data`` for an event of ``kind`` with a key its model does not declare, or a value of
    another type (:class:`EventDataError`); a kind without a model is not checked."""
    model = MODELS.get(kind)
    if model is None or not data:
        return
    if isinstance(model, type) and issubclass(model, BaseModel):
        unknown = sorted(set(data) - (set(model.model_fields) - _LOGGED))
        if not unknown:
            try:
                model.model_validate(dict(data))
            except ValidationError as exc:
                raise EventDataError(f"A {kind} event's data does not match {model.__name__}: {exc}") from None
    else:
        hints = _HINTS.get(kind)
        if hints is None:  # once per kind
            hints = _HINTS[kind] = {k: v for k, v in get_type_hints(model).items() if k not in _LOGGED}
        unknown = sorted(set(data) - set(hints))
        wrong = sorted(k for k, v in data.items() if k in hints and not _check(hints[k])(v))
        if wrong:
            raise EventDataError(f"A {kind} event's data has {', '.join(wrong)} of another type than declared.")
    if unknown:
        name = getattr(model, "__name__", str(model))
        raise EventDataError(f"A {kind} event's data has {', '.join(unknown)}, which {name} does not declare.")
