"""Options shared by the commands that record calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

MAX_JSON_BYTES = 16 * 1024 * 1024
IDEMPOTENCY = click.Choice(["idempotent", "conditional", "non_idempotent"])
REPLAY = click.Choice(["auto", "ask", "never"])


def parse_json(text: str | None, what: str) -> Any:
    """Parse a JSON argument, or raise a one-line usage error."""
    from sandbox.errors import UsageError

    if text is None:
        return None
    if len(text.encode(errors="surrogateescape")) > MAX_JSON_BYTES:
        raise UsageError(f"{what} is larger than {MAX_JSON_BYTES // (1024 * 1024)} MiB; store it in a file instead.")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise UsageError(f"{what} is not valid JSON ({msg}).") from None


def call_options(func: F) -> F:
    """--tool, --call-id, --step, --input, --idempotency, --replay, --side-effect."""
    for decorator in reversed(
        [
            click.option("--call-id", default=None, help="Use this call id (default: a new one)."),
            click.option("--step", "step_id", default=None, help="The runtime's step id."),
            click.option("--input", "input_json", default=None, help="The call's input, as JSON."),
            click.option("--idempotency", type=IDEMPOTENCY, default=None, help="Is running it twice safe?"),
            click.option("--replay", type=REPLAY, default=None, help="May a resume replay it?"),
            click.option("--side-effect", "side_effects", multiple=True, help="An external effect it has."),
        ]
    ):
        func = decorator(func)
    return func
