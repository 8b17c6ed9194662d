"""``sandbox path``: print a run's worktree path (for ``cd $(sandbox path)``)."""

from __future__ import annotations

import click

from sandbox.cli.common import open_run


@click.command()
@click.argument("run_id", required=False)
@click.pass_context
def path(ctx: click.Context, run_id: str | None) -> None:
    """Print the absolute path of RUN's worktree."""
    click.echo(open_run(ctx, run_id).worktree)
