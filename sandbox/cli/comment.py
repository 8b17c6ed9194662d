"""``sandbox comment RUN PATH[:LINE] TEXT``: a review comment for the agent, on a file (and a line) of a run."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("target", metavar="PATH[:LINE]")
@click.argument("words", nargs=-1, required=True, metavar="TEXT...")
@click.option("--json", "as_json", is_flag=True, help="Print the comment as JSON.")
@click.pass_context
def comment(ctx: click.Context, run_id: str, target: str, words: tuple[str, ...], as_json: bool) -> None:
    """Leave a review comment on PATH (at LINE) of RUN's changes.

    It is recorded in the run's ledger, tied to the call that last changed PATH; 'sandbox resume
    RUN --continue' hands the comments not yet sent to the agent as its next message.
    """
    from dataclasses import asdict

    from sandbox.run import comments

    run = open_run(ctx, run_id)
    path, line = comments.parse_target(target)
    made = comments.add(run, path, line, " ".join(words))
    if as_json:
        emit_json(asdict(made))
        return
    call = run.state().calls.get(made.call_id) if made.call_id else None
    on = f" (on call #{call.seq})" if call is not None else ""
    click.echo(f"Comment {made.id} on {escape.path(made.where)}{on} recorded.")
    click.echo(f"'sandbox resume {run.run_id} --continue' hands it to the agent.")
