"""``sandbox list``: the runs of this repository, with their disk use."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json, human_size, open_project


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.pass_context
def list_runs(ctx: click.Context, as_json: bool) -> None:
    """List the runs of this repository with their calls, changed paths and disk use."""
    from sandbox.run.summary import summarize_runs

    project, _, _ = open_project(ctx)
    rows = summarize_runs(project, disk=True)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No runs. Start one with 'sandbox start'.")
        return
    click.echo(f"{'RUN':<10} {'CREATED':<20} {'CALLS':>5} {'PATHS':>5} {'DISK':>10}  LABEL")
    for r in rows:
        created = (r["created_at"] or "")[:19].replace("T", " ")
        click.echo(
            f"{r['run']:<10} {created:<20} {r['calls']:>5} {r['changed_paths']:>5} "
            f"{human_size(r['disk_bytes']):>10}  {r['label'] or ''}"
            + ("" if r["worktree_exists"] or r.get("damaged") else "  (worktree missing)")
            + (f"  DAMAGED: {r['error']}" if r.get("damaged") else f"  ({r['error']})" if r.get("error") else "")
        )
