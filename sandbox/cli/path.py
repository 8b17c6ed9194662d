"""``sandbox path``: print a run's worktree path (for ``cd $(sandbox path)``)."""

from __future__ import annotations

import click

from sandbox.cli.finding import ensure_worktree, fast_open, open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the run, its worktree and git dir as JSON.")
@click.pass_context
def path(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Print the absolute path of RUN's worktree (made first for a run fetched from elsewhere)."""
    fast = fast_open(ctx, run_id)
    if fast is not None:
        from sandbox.fast import views

        repo, found = fast
        place = repo.place(found)
        if views.worktree_exists(place):
            _show(found, place.worktree, place.git_dir, as_json)
            return
    run = open_run(ctx, run_id)
    made = ensure_worktree(run)
    if made:
        click.echo(f"sandbox: {made}", err=True)
    _show(run.run_id, run.worktree, run.git_dir, as_json)


def _show(run_id: str, worktree: str, git_dir: str, as_json: bool) -> None:
    if as_json:
        emit_json({"run": run_id, "worktree": worktree, "git_dir": git_dir})
    else:
        click.echo(worktree)
