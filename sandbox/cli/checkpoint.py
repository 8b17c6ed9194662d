"""``sandbox checkpoint``: save a runtime checkpoint of a run."""

from __future__ import annotations

from typing import Any

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import dump, emit_json


def read_json_file(path: str | None, what: str) -> Any:
    """The JSON document in a file (``-`` for stdin), or a one-line usage error."""
    from sandbox.cli.options import parse_json
    from sandbox.errors import UsageError

    if path is None:
        return None
    try:
        with click.open_file(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}.") from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text.") from None
    return parse_json(text, f"{what} {path}")


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--label", default=None, help="A name for the checkpoint (e.g. before-risky); it is numbered anyway.")
@click.option("--step", "step_id", default=None, help="The runtime's step id.")
@click.option("--messages", "messages_file", default=None, help="JSON file with the message history (- = stdin).")
@click.option("--state", "state_file", default=None, help="JSON file with the runtime's state.")
@click.option("--budget", "budget_file", default=None, help="JSON file: steps/tokens/cost/wall_time_s limits and use.")
@click.option("--json", "as_json", is_flag=True, help="Print the checkpoint as JSON.")
@click.pass_context
def checkpoint(
    ctx: click.Context,
    run_id: str | None,
    label: str | None,
    step_id: str | None,
    messages_file: str | None,
    state_file: str | None,
    budget_file: str | None,
    as_json: bool,
) -> None:
    """Save a checkpoint of RUN: messages, state and budget, with the ledger and files as of now.

    It is named by its number (ckpt_004), its id, or its --label wherever a checkpoint is taken
    ('rollback --to', 'fork --at').
    """
    from sandbox.errors import UsageError

    messages = read_json_file(messages_file, "--messages")
    state = read_json_file(state_file, "--state")
    budget = read_json_file(budget_file, "--budget")
    if budget is not None and not isinstance(budget, dict):
        raise UsageError("--budget must hold a JSON object (steps, tokens, cost, wall_time_s).")
    run = open_run(ctx, run_id)
    try:
        ckpt = run.checkpoint(label, step_id=step_id, messages=messages, run_state=state, budget=budget)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    from sandbox.cli.agenthomes import store_transcripts

    for note in store_transcripts(run, f"checkpoint {ckpt.name}"):  # the agent's conversation, as of now
        click.echo(f"sandbox: note: {escape.text(note)}", err=True)
    if as_json:
        emit_json(dump(ckpt))
    else:
        named = f" ({escape.text(label)})" if label is not None else ""
        click.echo(f"Saved checkpoint {ckpt.name}{named} of run {run.run_id}, id {ckpt.id}.")
