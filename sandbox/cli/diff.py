"""``sandbox diff``: the agent's patch, for the run, some calls, or some paths."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup
from sandbox.cli.selection import pathspec, run_and_pathspecs, selection_options


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@selection_options
@click.option("--stat", "stat_", is_flag=True, help="Summarise changed files instead of the full patch.")
@click.option("--no-renames", is_flag=True, help="Show a renamed file as a deletion and an addition.")
@click.option("--conflicts", is_flag=True, help="Show base, agent and yours for each path an apply would refuse.")
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print per-file records (with hunk ids) as JSON.")
@click.pass_context
def diff(
    ctx: click.Context,
    run_id: str | None,
    pathspecs: tuple[str, ...],
    calls: tuple[str, ...],
    paths: tuple[str, ...],
    excludes: tuple[str, ...],
    stat_: bool,
    no_renames: bool,
    conflicts: bool,
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """Show the agent's patch against the base snapshot (or the patch of some calls with --call).

    PATHSPEC (git pathspecs, ':!PATH' to leave out) limits it to some paths. With --json every
    file and hunk carries the stable id that 'sandbox apply --hunks-from' takes. Paged and
    coloured as git does it (GIT_PAGER, core.pager, PAGER; --color, color.diff, NO_COLOR);
    renames are detected unless --no-renames.
    """
    if conflicts:
        from sandbox.cli.conflicts import show_conflicts

        show_conflicts(ctx, run_id, calls, color, no_color, no_pager, as_json)
        return
    from sandbox.merge.preview import diff_files, diff_text, preview_range

    run_id, pathspecs = run_and_pathspecs(ctx, run_id, pathspecs)
    run = open_run(ctx, run_id)
    spec = pathspec(ctx, run.user_workdir, pathspecs + paths, excludes, run.worktree)
    rng = preview_range(run, calls=list(calls))
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "call_id": rng.call_id,
                "calls": rng.calls,
                "from": rng.old,
                "to": rng.new,
                "files": diff_files(run, rng, spec),
            }
        )
        return
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    text = diff_text(run, rng, stat=stat_, color=out.color, spec=spec, renames=not no_renames)
    out.page()
    click.echo(out.content(text) if text else "No changes.", nl=not text.endswith("\n") if text else True)
