"""``sandbox diff``: the agent's patch, for the run or one call."""

from __future__ import annotations

import sys

import click

from sandbox.cli.common import emit_json, open_run


@click.command()
@click.argument("run_id", required=False)
@click.option("--call", "call_id", default=None, help="Only this call's changes.")
@click.option("--stat", "stat_", is_flag=True, help="Summarise changed files instead of the full patch.")
@click.option("--color/--no-color", default=None, help="Color the diff (default: when on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print per-file records as JSON.")
@click.pass_context
def diff(
    ctx: click.Context,
    run_id: str | None,
    call_id: str | None,
    stat_: bool,
    color: bool | None,
    as_json: bool,
) -> None:
    """Show the agent's patch against the base snapshot (or one call's patch with --call)."""
    from sandbox.merge.preview import diff_files, diff_text, preview_range
    from sandbox.run.names import resolve_call_id

    run = open_run(ctx, run_id)
    call_id = resolve_call_id(run, call_id) if call_id is not None else None
    rng = preview_range(run, call_id)
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "call": call_id,
                "from": rng.old,
                "to": rng.new,
                "files": diff_files(run, rng),
            }
        )
        return
    use_color = sys.stdout.isatty() if color is None else color
    text = diff_text(run, rng, stat=stat_, color=use_color)
    click.echo(text if text else "No changes.", nl=not text.endswith("\n") if text else True)
