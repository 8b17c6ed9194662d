"""``sandbox deny``: deny a planned call, or one the agent did not run (its retries are refused too)."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.approve import refuse_inside_sandbox
from sandbox.cli.finding import open_call, run_then
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--reason", default=None, help="Why (shown to the model after a resume).")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def deny(ctx: click.Context, run_id: str | None, call_id: str | None, reason: str | None, as_json: bool) -> None:
    """Deny CALL of RUN: it never runs, nor does the same tool with the same input.

    CALL is a planned call, or one the agent did not run (status not_run): the agent's hooks
    then refuse every retry with the same tool and input, with REASON. 'sandbox approve' lifts it.
    """
    refuse_inside_sandbox("deny")
    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    entry = run.deny(call_id, reason)
    if as_json:
        emit_json(dump(entry))
    else:
        click.echo(escape.text(f"{entry.call_id} ({entry.tool_name}) denied" + (f": {reason}" if reason else "")))
