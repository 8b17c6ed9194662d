"""``sandbox path``: print a run's worktree path (for ``cd $(sandbox path)``)."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json, open_run


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the run, its worktree and git dir as JSON.")
@click.pass_context
def path(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Print the absolute path of RUN's worktree."""
    run = open_run(ctx, run_id)
    if as_json:
        emit_json({"run": run.run_id, "worktree": run.worktree, "git_dir": run.git_dir})
    else:
        click.echo(run.worktree)
