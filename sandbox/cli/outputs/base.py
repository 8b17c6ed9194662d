"""The base of every ``--json`` output model, and a persisted report's model in the CLI's vocabulary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo

from sandbox.cli.jsonout import RENAMES


class Output(BaseModel):
    """A command's JSON output; unknown keys are refused so the schema and the output cannot drift."""

    model_config = ConfigDict(extra="forbid")


def renamed_model(model: type[BaseModel], name: str, drop: tuple[str, ...] = ()) -> type[BaseModel]:
    """An output model with ``model``'s fields under their :data:`RENAMES` names (follows the model)."""
    fields: dict[str, tuple[Any, FieldInfo]] = {
        RENAMES.get(field, field): (info.annotation, info)
        for field, info in model.model_fields.items()
        if field not in drop
    }
    # create_model's overloads type its keywords one by one, which a ** of field definitions cannot
    # match; called through a plain callable, the fields keep their own type above.
    create: Callable[..., type[BaseModel]] = create_model
    return create(name, __base__=Output, __doc__=f"{model.__name__} in the CLI's vocabulary.", **fields)
