"""``--json`` output: one JSON document on stdout, in the vocabulary every command shares."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import click


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """While active, file descriptor 1 is stderr: a child's output stays off stdout, which then
    carries only this command's JSON (``exec --json``, ``run --json``)."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def emit_json(value: Any) -> None:
    """Print a JSON document on stdout."""
    text = json.dumps(value, indent=2, sort_keys=False, default=str, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not UTF-8: keep it exact as \udcXX escapes
        text = json.dumps(value, indent=2, sort_keys=False, default=str, ensure_ascii=True)
    click.echo(text)


#: Names persisted reports use that the CLI's JSON says in its one vocabulary (see sandbox.cli.outputs).
RENAMES = {"run_id": "run", "head": "run_head", "call": "call_id", "returncode": "exit_code"}


def renamed(data: Mapping[str, object]) -> dict[str, object]:
    """``data`` (a persisted report as JSON) with its top-level keys in the CLI's vocabulary."""
    return {RENAMES.get(k, k): v for k, v in data.items()}


def dump(model: Any) -> Any:
    """A pydantic model (or list of them) as plain JSON-able data."""
    if isinstance(model, list):
        return [dump(m) for m in model]
    return model.model_dump(mode="json")
