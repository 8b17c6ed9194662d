"""``sandbox branch``: keep the run's history as an ordinary branch of per-call commits."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", metavar="[RUN]", required=False)
@click.argument("name", required=False)
@click.option("-f", "--force", is_flag=True, help="Replace the branch if it exists (never a checked-out one).")
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
@click.pass_context
def branch(ctx: click.Context, run_id: str | None, name: str | None, force: bool, as_json: bool) -> None:
    """Make branch NAME from RUN: one commit per call that changed files, on your HEAD at start.

    Commits are authored by 'sandbox agent', with the tool, command and call id in each message.
    Your HEAD, index, working tree and other branches are not touched; push the branch or open a
    pull request from it, and it outlives 'sandbox drop'.
    """
    from sandbox.runs.export import export

    if name is None:  # one argument: the branch name, the run being the one whose worktree we are in
        run_id, name = None, run_id
    if not name:
        raise click.UsageError("Missing argument 'NAME'.")
    run = open_run(ctx, run_id)
    made = export(run, name, force=force)
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "branch": made.branch,
                "ref": made.ref,
                "tip": made.tip,
                "base": made.base,
                "commits": made.commits,
                "calls": made.calls,
                "replaced": made.replaced,
                "snapshot_differs": made.snapshot_differs,
            }
        )
        return
    verb = "Replaced" if made.replaced else "Created"
    where = f"on {made.base[:12]} (your HEAD at start)" if made.base else "as a new history"
    click.echo(f"{verb} branch {made.branch} at {made.tip[:12]}: {len(made.commits)} commit(s) {where}.")
    if made.replaced:
        click.echo(f"  it was at {made.replaced[:12]}")
    if made.snapshot_differs:
        click.echo("  note: your uncommitted changes at start are not on it, except inside files the agent changed.")
    click.echo(f"See it with 'git log --stat {made.branch}'; your HEAD, index and files were not touched.")
