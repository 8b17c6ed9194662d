"""``sandbox checkpoints``: list a run's checkpoints, each verified."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.fmt import local_time
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False)
@click.option("--auto", "with_auto", is_flag=True, help="Also list the automatic checkpoints (ledger events).")
@click.option("--json", "as_json", is_flag=True, help="Print checkpoints and problems as JSON.")
@click.pass_context
def checkpoints(ctx: click.Context, run_id: str | None, with_auto: bool, as_json: bool) -> None:
    """List RUN's checkpoints, newest last; damaged ones are reported, never shown as valid."""
    from sandbox.run.checkpoint import CheckpointStore

    run = open_run(ctx, run_id)
    store = CheckpointStore(run)
    listing = store.list(deep=True)
    items = list(listing.checkpoints)
    if with_auto:
        items = sorted(items + store.auto(), key=lambda s: s.checkpoint.created_at)
    if as_json:
        emit_json({"checkpoints": [dump(s.checkpoint) for s in items], "problems": listing.problems})
    else:
        for problem in listing.problems:
            click.echo(f"sandbox: {problem}", err=True)
        if not items:
            click.echo(f"Run {run.run_id} has no checkpoints.")
        else:
            click.echo(f"{'CHECKPOINT':<10} {'SAVED':<25} LABEL")
        for s in items:
            c = s.checkpoint
            # One name per checkpoint (its number; the id is in --json), the time with its zone as log shows it.
            step = f"  (step {c.step_id})" if c.step_id else ""
            click.echo(escape.text(f"{c.name:<10} {local_time(c.created_at):<25} {c.label or ''}{step}".rstrip()))
    if listing.problems:
        ctx.exit(1)
