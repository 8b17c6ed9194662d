"""``sandbox diff``: the agent's patch, for the run or one call."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json, open_run
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@click.option("--call", "call_id", default=None, help="Only this call's changes.")
@click.option("--stat", "stat_", is_flag=True, help="Summarise changed files instead of the full patch.")
@click.option("--no-renames", is_flag=True, help="Show a renamed file as a deletion and an addition.")
@click.option("--conflicts", is_flag=True, help="Show base, agent and yours for each path an apply would refuse.")
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print per-file records as JSON.")
@click.pass_context
def diff(
    ctx: click.Context,
    run_id: str | None,
    call_id: str | None,
    stat_: bool,
    no_renames: bool,
    conflicts: bool,
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """Show the agent's patch against the base snapshot (or one call's patch with --call).

    Paged and coloured as git does it (GIT_PAGER, core.pager, PAGER; --color, color.diff,
    NO_COLOR); renames are detected unless --no-renames.
    """
    if conflicts:
        from sandbox.cli.conflicts import show_conflicts

        show_conflicts(ctx, run_id, (call_id,) if call_id else (), color, no_color, no_pager, as_json)
        return
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
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    text = diff_text(run, rng, stat=stat_, color=out.color, renames=not no_renames)
    out.page()
    click.echo(text if text else "No changes.", nl=not text.endswith("\n") if text else True)
