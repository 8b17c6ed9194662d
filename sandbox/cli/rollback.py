"""``sandbox rollback``: files or session back to a checkpoint (not the apply-level undo)."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--files", "files", is_flag=True, help="Put the worktree's files back to the checkpoint.")
@click.option("--session", "session", is_flag=True, help="Put the message history and run state back.")
@click.option("--to", "target", required=True, help="Checkpoint id, name (ckpt_004), label or auto_<event>.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def rollback(ctx: click.Context, run_id: str | None, files: bool, session: bool, target: str, as_json: bool) -> None:
    """Roll RUN back to a checkpoint: --files (worktree) or --session (messages and state)."""
    from sandbox.errors import UsageError
    from sandbox.recovery import actions as recovery

    if files == session:
        raise UsageError("Say what to roll back: --files or --session (one of them).")
    run = open_run(ctx, run_id)
    if files:
        report = recovery.rollback_files(run, target)
        if as_json:
            emit_json(
                {
                    "action": recovery.RecoveryAction.rollback_files.value,
                    "checkpoint": report.checkpoint,
                    "commit": report.commit,
                    "files": dump(report.files),
                    "undone_calls": report.undone_calls,
                    "applied_calls": report.applied_calls,
                    "message": report.message,
                }
            )
        else:
            click.echo(report.message)
        return
    result = recovery.rollback_session(run, target)
    if as_json:
        emit_json(
            {
                "action": recovery.RecoveryAction.rollback_session.value,
                "checkpoint": result.checkpoint,
                "checkpoint_id": result.checkpoint_id,
                "run_state": result.run_state,
                "calls_after": result.calls_after,
                "message": result.message,
            }
        )
    else:
        click.echo(result.message)
