"""The base of every persisted model: the format version, the default factories and the JSON codec.

These models are the only things written to disk or into git objects. Each carries a ``version``
field; readers reject versions they do not know instead of guessing. ``sandbox schema`` prints their
JSON Schema.
"""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

import json
from datetime import datetime, timezone
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

FORMAT_VERSION = 1


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (all persisted times use it)."""
    return datetime.now(timezone.utc)


def new_list() -> list[Any]:
    """A fresh empty list: the default factory of list fields.

    Not ``list`` itself: building a model's validator asks each factory for its signature, which
    for a builtin means parsing its text signature with the tokenizer (measured: ~7 ms of ``sandbox
    apply``'s start-up for this module's fields; a Python function's is ~0.01 ms).
    """
    return []


def new_dict() -> dict[Any, Any]:
    """A fresh empty dict: the default factory of dict fields (see :func:`new_list`)."""
    return {}


def new_set() -> set[Any]:
    """A fresh empty set: the default factory of set fields (see :func:`new_list`)."""
    return set()


def is_empty(value: object) -> bool:
    """True for None or an empty container: a field's ``exclude_if`` that leaves it out of the JSON."""
    return not value


class Model(BaseModel):
    """The base of every persisted model: unknown fields refused, validators built on first use."""

    # defer_build: a model's validator is built when first used, not at import (hooks start fast).
    model_config = ConfigDict(extra="forbid", frozen=False, defer_build=True)


M = TypeVar("M", bound=BaseModel)


def to_json(model: BaseModel) -> str:
    """Serialise a model for storage, ASCII-only.

    File names that are not valid UTF-8 are carried as lone surrogate escapes (``\\udce9``), which
    the standard json module writes and reads back exactly, while pydantic's own JSON codec refuses
    them. Every persisted model goes through this function and :func:`from_json`.

    A value that does not fit its declared type (an event's data as another sandbox wrote it, kept in
    the fold as it was read) is written as it is, without a warning: the JSON stays what was read.
    """
    return json.dumps(model.model_dump(mode="json", warnings=False), ensure_ascii=True, separators=(",", ":"))


def from_json(cls: type[M], text: str | bytes) -> M:
    """Parse and validate a stored model written by :func:`to_json` (raises ValueError if malformed)."""
    return cls.model_validate(json.loads(text))


class Payload(BaseModel):
    """The base of an event payload: fields it does not know are kept (a newer sandbox's ledger still reads)."""

    model_config = ConfigDict(extra="allow", defer_build=True)
