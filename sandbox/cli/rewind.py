"""``sandbox rewind RUN --to CALL|CHECKPOINT [--continue [-- EXTRA...]]``: files and conversation back before a call."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.continue_agent import check_continue_args, continue_options
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option(
    "--to", "target", required=True, help="The call (any name 'log' accepts) or checkpoint to go back before."
)
@click.option("--continue", "continue_", is_flag=True, help="Then relaunch the agent on the forked conversation.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@continue_options
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def rewind(
    ctx: click.Context,
    run_id: str | None,
    target: str,
    continue_: bool,
    as_json: bool,
    isolate: str | None,
    network: str | None,
    extra: tuple[str, ...],
) -> None:
    """Rewind RUN to just before a call: its files (a forward event) and the agent's conversation (a fork).

    The agent's own transcript is never edited: the conversation up to the call becomes a new
    session. Calls after it that may have acted outside the worktree are listed with their
    compensation. --continue relaunches the agent on the fork, as 'sandbox run' started it.
    """
    from sandbox.cli.agenthomes import homes
    from sandbox.cli.continue_agent import continue_agent, start_subdir
    from sandbox.errors import UnknownCallError, UsageError
    from sandbox.recovery import rewind as rw
    from sandbox.run.checkpoint import CheckpointNotFoundError
    from sandbox.run.names import resolve_call

    check_continue_args(continue_, as_json, isolate, network, extra, "rewind RUN --to CALL")
    run = open_run(ctx, run_id)
    try:
        call_id = resolve_call(run, target).call_id
    except UnknownCallError as exc:
        try:
            call_id = rw.call_after_checkpoint(run, target)
        except CheckpointNotFoundError:
            raise UsageError(f"{exc.message} Nor is {target!r} a checkpoint of run {run.run_id}.") from None
    report = rw.rewind(run, call_id, homes(run), start_subdir(ctx, run))
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "call_id": report.call_id,
                "checkpoint": report.checkpoint,
                "undo_to": report.undo_to,
                "files": [f.path for f in report.files.files] if report.files else [],
                "session": report.session,
                "from_session": report.from_session,
                "side_effects": [vars(s) for s in report.side_effects],
                "messages": report.messages,
            }
        )
        return
    out = click.echo if not continue_ else (lambda text: click.echo(text, err=True))
    for message in report.messages:
        out(escape.text(message))
    for effect in report.side_effects:
        what = escape.text(effect.summary or effect.tool_name)
        out(f"  after the rewind point: {effect.call_id} {what}: {escape.text(effect.hint)}.")
    if report.undo_to:
        out(f"To take the rewind back: sandbox undo {run.run_id}")
    if continue_:
        continue_agent(ctx, run, None, extra, prompt=report.prompt(), isolate=isolate, network=network)
