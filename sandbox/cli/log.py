"""``sandbox log``: the run's calls in order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli.common import dump, emit_json, open_run

if TYPE_CHECKING:
    from sandbox.run import Run


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entries as JSON.")
@click.pass_context
def log(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """List RUN's calls in order: status, tool, commit and changed files."""
    run = open_run(ctx, run_id)
    entries = run.entries()
    if as_json:
        emit_json(dump(entries))
        return
    if not entries:
        click.echo(f"Run {run.run_id} has no calls yet.")
        return
    for e in entries:
        flags = "".join(
            [
                " [undone]" if e.undone else "",
                " [applied]" if e.applied else "",
                f" [denied: {e.denial_reason or 'no reason'}]" if e.approval and e.approval.value == "denied" else "",
            ]
        )
        commit = e.commit[:10] if e.commit else "-"
        click.echo(f"{e.seq:>3}  {e.call_id:<20} {e.status.value:<10} {e.tool_name:<16} {commit:<10}{flags}")
        if e.summary:
            click.echo(f"       {e.summary[:100]}")
        if e.error:
            click.echo(f"       error: {e.error[:200]}")
        for f in e.files:
            kind = "A" if f.before_hash is None else "D" if f.after_hash is None else "M"
            if kind == "M" and f.before_hash == f.after_hash:
                kind = "T"
            click.echo(f"       {kind} {f.path}")
    _agent_git(run)


def _agent_git(run: Run) -> None:
    """What the agent did with the run's own git, after the calls (only when it did something)."""
    from sandbox.agentgit import activity, describe

    if run.place.legacy or not run.worktree_exists():
        return
    found = activity(run.git_dir, run.run_id, run.base)
    if found is None or not found.changed:
        return
    first, *rest = describe(found.to_json())
    click.echo(f"agent git: {first}")
    for line in rest:
        click.echo(f"           {line}")
