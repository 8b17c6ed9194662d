"""``sandbox schema``: the JSON Schema of every persisted format."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json


@click.command()
@click.argument("name", required=False)
def schema(name: str | None) -> None:
    """Print the JSON Schema of the persisted formats (or of the one named)."""
    from sandbox import models
    from sandbox.errors import UsageError

    formats = {cls.__name__: cls for cls in models.PERSISTED}
    if name is None:
        emit_json({n: c.model_json_schema() for n, c in formats.items()})
    elif name in formats:
        emit_json(formats[name].model_json_schema())
    else:
        raise UsageError(f"No format {name!r}; known: {', '.join(sorted(formats))}.")
