"""``sandbox resume``: continue a run on evidence after a crash or an interruption."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json, open_run


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.pass_context
def resume(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Resume RUN: fence old writers, mark unfinished calls uncertain, verify, and write a note."""
    from sandbox.resume import resume as do_resume

    run = open_run(ctx, run_id, report_problems=False)  # the report carries them
    report = do_resume(run)
    if as_json:
        data = report.model_dump(mode="json", exclude={"messages"})
        if report.checkpoint is not None:
            data["checkpoint"] = report.checkpoint.model_dump(
                mode="json", include={"id", "name", "label", "step_id", "seq", "created_at"}
            )
        emit_json(data)
        return
    for problem in report.problems:
        click.echo(f"sandbox: {problem}", err=True)
    click.echo(report.note)
    click.echo("")
    click.echo(f"Next step: {report.next_step}")
