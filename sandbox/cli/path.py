"""``sandbox path``: print a run's worktree path (for ``cd $(sandbox path)``)."""

from __future__ import annotations

import click

from sandbox.cli.common import ensure_worktree, open_run


@click.command()
@click.argument("run_id", required=False)
@click.pass_context
def path(ctx: click.Context, run_id: str | None) -> None:
    """Print the absolute path of RUN's worktree (made first for a run fetched from elsewhere)."""
    run = open_run(ctx, run_id)
    made = ensure_worktree(run)
    if made:
        click.echo(f"sandbox: {made}", err=True)
    click.echo(run.worktree)
