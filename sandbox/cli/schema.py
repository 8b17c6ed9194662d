"""``sandbox schema``: the JSON Schema of every persisted format and of every command's ``--json``."""

from __future__ import annotations

import click

from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("name", required=False, nargs=-1)
def schema(name: tuple[str, ...]) -> None:
    """Print JSON Schemas: {"formats": persisted formats, "commands": each command's --json output}.

    NAME picks one: a persisted format (LedgerEntry, Checkpoint, ...) or a command (status,
    'call finish', 'log --call', 'rollback --files', ...).
    """
    from sandbox import models
    from sandbox.cli import outputs
    from sandbox.errors import UsageError

    formats = {cls.__name__: cls for cls in models.PERSISTED}
    wanted = " ".join(name)
    if not wanted:
        emit_json(
            {
                "formats": {n: c.model_json_schema() for n, c in formats.items()},
                "commands": {c: outputs.schema_of(c) for c in outputs.COMMANDS},
            }
        )
    elif wanted in formats:
        emit_json(formats[wanted].model_json_schema())
    elif wanted in outputs.COMMANDS:
        emit_json(outputs.schema_of(wanted))
    else:
        from sandbox.run.names import did_you_mean

        hint = did_you_mean(wanted, [*formats, *outputs.COMMANDS])
        raise UsageError(
            f"No format or command {wanted!r}.{hint} Formats: {', '.join(sorted(formats))}; "
            f"commands: {', '.join(outputs.COMMANDS)}."
        )
