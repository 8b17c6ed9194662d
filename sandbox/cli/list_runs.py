"""``sandbox list``: the runs of this repository, with their disk use."""

from __future__ import annotations

import click

from sandbox.cli.fastshow import NO_RUNS, list_rows, list_table
from sandbox.cli.finding import base_dir, open_project
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup


@click.command("list", cls=OutputCommand)
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option(
    "--disk", "whole_disk", is_flag=True, help="Count the disk use of every file (else at most 10,000 per run)."
)
@click.pass_context
def list_runs(
    ctx: click.Context, color: str | None, no_color: bool, no_pager: bool, as_json: bool, whole_disk: bool
) -> None:
    """List the runs of this repository with their calls, changed paths and disk use."""
    from sandbox.fast.views import STATUS_DISK_ENTRIES

    # A sum over every file of every run grows with runs x repository: by default a bounded count per
    # run, as 'status' counts, which says where it stopped.
    limit = None if whole_disk else STATUS_DISK_ENTRIES
    rows = list_rows(base_dir(ctx), limit)
    if rows is None:
        from sandbox.runs.summary import summarize_runs

        project, _, _ = open_project(ctx)
        rows = summarize_runs(project, disk=True, disk_limit=limit)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo(NO_RUNS)
        return
    out = setup(ctx, color, no_color, no_pager=no_pager)
    out.page()
    list_table(rows, out, limit, click.echo)
