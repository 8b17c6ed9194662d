"""``sandbox compensate``: run the compensation a call registered, as its own recorded call."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_call, run_then
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--json", "as_json", is_flag=True, help="Print the compensation call as JSON.")
@click.pass_context
def compensate(ctx: click.Context, run_id: str | None, call_id: str | None, as_json: bool) -> None:
    """Undo CALL's external effect with the compensation it registered, if it registered one."""
    from sandbox.recovery.actions import compensate as do_compensate

    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    report = do_compensate(run, call_id)
    if as_json:
        emit_json(
            {
                "action": "compensate",
                "call_id": report.call_id,
                "compensation_call": report.compensation_call,
                "exit_code": report.returncode,
                "entry": dump(report.entry),
                "message": report.message,
            }
        )
    else:
        click.echo(report.message)
    if report.returncode != 0:
        ctx.exit(1)
