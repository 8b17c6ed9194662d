"""``sandbox approve``: approve a planned call, or lift a denial."""

from __future__ import annotations

import click

from sandbox.cli.common import dump, emit_json, open_run


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def approve(ctx: click.Context, run_id: str, call_id: str, as_json: bool) -> None:
    """Approve CALL_ID of RUN; 'sandbox call start --call-id CALL_ID' then runs it.

    For a denied call this lifts the denial: the same tool and input may run again.
    """
    run = open_run(ctx, run_id)
    was_denied = _denied(run.entry(call_id).approval)
    entry = run.approve(call_id)
    if as_json:
        emit_json(dump(entry))
    else:
        lifted = "; its denial is lifted: the same tool and input may run again" if was_denied else ""
        click.echo(f"{entry.call_id} ({entry.tool_name}) approved{lifted}")


def _denied(approval: object) -> bool:
    return getattr(approval, "value", None) == "denied"
