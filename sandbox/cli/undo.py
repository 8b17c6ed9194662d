"""``sandbox undo``: take the run's last change back out (or roll back an interrupted apply)."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.common import open_project, verified


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def undo(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Undo RUN's newest change: in your tree if it was applied there, else in the run.

    Refuses (exit 1, nothing written) where you changed a file since. After an interrupted apply,
    undo or redo, rolls that operation back first.
    """
    from sandbox.cli.apply import finish
    from sandbox.merge.mergeback import ApplyConflict
    from sandbox.merge.undo import undo as do_undo
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.store import journal

    project, workdir, cwd_run = open_project(ctx)
    run_id = run_id or cwd_run or journal.pending_run_id(project, workdir)
    run = verified(Run.open(project, resolve_run(project, run_id, cwd_run)))
    try:
        report = do_undo(run)
    except ApplyConflict as exc:
        finish(exc.report, "Restored", as_json)
        click.echo(f"sandbox: {escape.text(exc.message)}", err=True)
        ctx.exit(1)
    if not as_json and not report.recovered:
        where = "your tree" if report.target == "user" else "the run"
        click.echo(f"Undid call {report.call} in {where}.")
    finish(report, "Restored", as_json)
