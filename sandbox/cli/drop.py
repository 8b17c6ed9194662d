"""``sandbox drop``: remove a run's worktree and refs."""

from __future__ import annotations

import click

from sandbox.cli.common import emit_json, human_size, open_run


@click.command()
@click.argument("run_id", required=False)
@click.option("--force", is_flag=True, help="Drop even though the run has changes not applied to your tree.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def drop(ctx: click.Context, run_id: str | None, force: bool, as_json: bool) -> None:
    """Remove RUN: its worktree, its refs and its ledger.

    Refuses while the run has recorded changes that are not applied to your tree, unless --force.
    """
    from sandbox.agent.service import stop_service

    run = open_run(ctx, run_id)
    # A background `sandbox serve` would keep watching the worktree while it is removed.
    freed = run.drop(force=force, before_remove=lambda r: stop_service(r.dir))
    if as_json:
        emit_json({"run": run.run_id, "dropped": True, "bytes_freed": freed})
    else:
        click.echo(f"Dropped run {run.run_id}; freed {human_size(freed)} of worktree files.")
