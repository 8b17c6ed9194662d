"""``sandbox comments RUN``: the run's review comments, and which agent session each was sent to."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--unsent", is_flag=True, help="Only the comments no agent session was given yet.")
@click.option("--json", "as_json", is_flag=True, help="Print the comments as JSON.")
@click.pass_context
def comments(ctx: click.Context, run_id: str | None, unsent: bool, as_json: bool) -> None:
    """List RUN's review comments: where, what, the call they are about, and whether they were sent."""
    from dataclasses import asdict

    from sandbox.run import comments as lib

    run = open_run(ctx, run_id)
    found = lib.unsent(run) if unsent else lib.listed(run)
    if as_json:
        emit_json([asdict(c) for c in found])
        return
    if not found:
        click.echo(f"Run {run.run_id} has no {'unsent ' if unsent else ''}review comments.")
        return
    state = run.state()
    for c in found:
        call = state.calls.get(c.call_id) if c.call_id else None
        on = f" (call #{call.seq})" if call is not None else ""
        if c.sent_at is None:
            went = "not sent yet"
        else:
            session = f"session {escape.text(c.sent_session)}" if c.sent_session else "a new session"
            went = f"sent to {escape.text(c.sent_agent or 'the agent')} {session}"
        click.echo(f"{c.id}  {escape.path(c.where)}{on}  [{went}]")
        for text_line in escape.lines(c.text) or [""]:
            click.echo(f"    {text_line}")
