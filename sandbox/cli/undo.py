"""``sandbox undo``: take back your last apply (or one call, or the agent's last call in the run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_project, verified
from sandbox.cli.which import say_which

if TYPE_CHECKING:
    from sandbox.models import UndoReport
    from sandbox.run.run import Run


@click.command()
@click.argument("run_id", required=False)
@click.option("--call", "call_id", default=None, help="Take back this one call (with --in-run: from the run).")
@click.option("--in-run", is_flag=True, help="Take the agent's newest call (or --call) out of the run itself.")
@click.option("--force", is_flag=True, help="With --in-run: also when the call's work is not in your tree.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def undo(ctx: click.Context, run_id: str | None, call_id: str | None, in_run: bool, force: bool, as_json: bool) -> None:
    """Take back your last apply or redo of RUN in your tree, exactly as your files were before it.

    --call CALL takes back one call from your tree; --in-run takes the agent's newest call (or
    --call) out of the run itself, which needs --force when that work is not in your tree ('sandbox
    redo' brings it back). Refuses (exit 1, nothing written) where you changed a file since. After
    an interrupted apply, undo or redo, rolls that operation back first. Right after 'sandbox rewind',
    takes the rewind back (the run's files as they were before it; your tree is not touched).
    """
    from sandbox.cli.apply import finish
    from sandbox.merge.mergeback import ApplyConflict
    from sandbox.merge.undo import undo as do_undo
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.store import journal

    if force and not in_run:
        raise click.UsageError("--force goes with --in-run (an undo in your tree never needs it).")
    project, workdir, cwd_run = open_project(ctx)
    run_id = run_id or cwd_run or journal.pending_run_id(project, workdir)
    run = verified(Run.open(project, resolve_run(project, run_id, cwd_run)))
    say_which(run, run_id)
    if call_id is None and not in_run and rewind_moved(run, "undo", as_json):
        return
    try:
        report = do_undo(run, call=call_id, in_run=in_run, force=force)
    except ApplyConflict as exc:
        finish(exc.report, "Restored", as_json)
        click.echo(f"sandbox: {escape.text(exc.message)}", err=True)
        ctx.exit(1)
    if not as_json and not report.recovered:
        click.echo(describe("Undid", report, run))
    finish(report, "Restored", as_json)


def describe(verb: str, report: UndoReport, run: Run) -> str:
    """One line naming what an undo or redo took back or brought back, and where; calls as ``log``
    numbers them (``#3``; their ids are in ``--json``)."""
    from sandbox.cli.fmt import call_numbers

    where = "your tree" if report.target == "user" else "the run"
    state = run.state()
    seqs = {c: e.seq for c, e in state.calls.items()}
    if report.call:
        entry = state.calls.get(report.call)
        tool = f" ({escape.text(entry.tool_name)})" if entry is not None else ""
        return f"{verb} call {call_numbers(seqs, [report.call])}{tool} in {where}."
    # The calls whose changes the operation moved (a selection may name calls that changed nothing there).
    moved = set(report.applied or report.restored or [])
    calls = [
        c for c in report.calls if c not in state.calls or not moved or {f.path for f in state.calls[c].files} & moved
    ]
    what = f"{'call' if len(calls) == 1 else 'calls'} {call_numbers(seqs, calls)}" if calls else "the run"
    return f"{verb} the apply of {what} in {where}."


def rewind_moved(run: Run, op: str, as_json: bool) -> bool:
    """Undo (or redo) the run's newest rewind when it is the newest thing done to the run's files."""
    from sandbox.cli.apply import finish
    from sandbox.recovery import rewind_undo

    moved = rewind_undo.undo_report(run, op)
    if moved is None:
        return False
    report, message = moved
    if not as_json:
        click.echo(escape.text(message))
    finish(report, "Restored" if op == "undo" else "Wrote", as_json)
    return True
