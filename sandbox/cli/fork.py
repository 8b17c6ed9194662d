"""``sandbox fork RUN [--at CALL|CHECKPOINT]``: a new run from another run's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.run.run import Run


@click.command()
@click.argument("run_id", required=False)
@click.option("--at", default=None, help="Fork from the state after this call, or at this checkpoint (default: head).")
@click.option("--label", default=None, help="A label for the new run (default: the source's, with -fork).")
@click.option("--json", "as_json", is_flag=True, help="Print the new run as JSON.")
@click.pass_context
def fork(ctx: click.Context, run_id: str | None, at: str | None, label: str | None, as_json: bool) -> None:
    """Start a new run from RUN's state: same snapshot of your tree, a worktree of its own.

    The new run's first call, 'fork', holds RUN's changes up to that state, so its diff and apply
    cover everything it holds. RUN is not changed.
    """
    from sandbox.runs.many import fork as do_fork

    source = open_run(ctx, run_id)
    run = do_fork(source, at, label)
    info = run.info
    session, problem = _fork_conversation(source, run, info.forked_from)
    if problem is not None:
        click.echo(f"sandbox: {escape.text(problem)}", err=True)
    if as_json:
        emit_json({"run": run.run_id, "worktree": run.worktree, "forked_from": info.forked_from, "label": info.label})
        return
    if session is not None:
        click.echo(f"  conversation: forked as agent session {session} ('sandbox resume {run.run_id} --continue')")
    click.echo(f"Forked run {run.run_id} from {info.forked_from}" + (f" ({info.label})" if info.label else ""))
    click.echo(f"  worktree: {run.worktree}")
    click.echo(f"  changes:  {len(run.changed_paths())} path(s) from the source")


def _fork_conversation(source: Run, run: Run, forked_from: str | None) -> tuple[str | None, str | None]:
    """The agent's conversation forked with the run, up to the call it was forked at (or all of it):
    (the new session, or None; why it was not forked, when that is worth saying)."""
    from sandbox.agent.transcripts import fork_conversation
    from sandbox.cli.agenthomes import homes
    from sandbox.errors import SandboxError

    at = (forked_from or "").partition("@")[2] or None
    if at is not None and at not in source.state().calls:
        return None, None  # forked at a checkpoint: its conversation is the runtime's (rollback --session)
    try:
        return fork_conversation(source, run, at, homes(source)), None
    except (SandboxError, OSError) as exc:
        # The files are forked; a conversation that cannot be copied does not undo that.
        return None, exc.message if isinstance(exc, SandboxError) else f"the conversation was not forked ({exc})."
