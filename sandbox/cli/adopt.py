"""``sandbox adopt``: count a run's whole record as this clone's own (runs from before signed events)."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def adopt(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Count every event of RUN's ledger as recorded by this clone.

    Only events this clone signed are its own: a run's recorded agent command and confinement, its
    applies, undos and redos, count only then. Runs recorded here before signing existed are adopted
    once, automatically; adopt another (one you moved here by hand, say) only if you trust all of it:
    its recorded command then runs as recorded, unconfined if it says so.
    """
    run = open_run(ctx, run_id)
    added = run.adopt()
    if as_json:
        emit_json({"run": run.run_id, "adopted_events": added})
    else:
        click.echo(f"Run {run.run_id}: {added} more event(s) now count as this clone's own.")
