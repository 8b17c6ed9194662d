"""``sandbox redo``: bring back the change the last undo took out."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_project, verified


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def redo(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Redo RUN's newest undo: an apply taken back from your tree, or one call (in your tree or the run)."""
    from sandbox.cli.apply import finish
    from sandbox.merge.mergeback import ApplyConflict
    from sandbox.merge.undo import redo as do_redo
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run

    project, _workdir, cwd_run = open_project(ctx)
    run = verified(Run.open(project, resolve_run(project, run_id, cwd_run)))
    from sandbox.cli.undo import rewind_moved

    if rewind_moved(run, "redo", as_json):
        return
    try:
        report = do_redo(run)
    except ApplyConflict as exc:
        finish(exc.report, "Wrote", as_json)
        click.echo(f"sandbox: {escape.text(exc.message)}", err=True)
        ctx.exit(1)
    if not as_json:
        from sandbox.cli.undo import describe

        click.echo(describe("Redid", report))
    finish(report, "Wrote", as_json)
