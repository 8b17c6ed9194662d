"""``sandbox resume RUN [--continue [-- EXTRA...]]``: continue a run on evidence after a crash or an interruption."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.continue_agent import check_continue_args, continue_options
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json, renamed


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.option(
    "--stop-processes",
    is_flag=True,
    help="Stop processes still running from the unfinished calls' agent session (TERM, then KILL) first.",
)
@click.option(
    "--continue",
    "continue_",
    is_flag=True,
    help="Then relaunch the agent 'sandbox run' recorded, on its own conversation, with the note as its next message.",
)
@continue_options
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def resume(
    ctx: click.Context,
    run_id: str | None,
    as_json: bool,
    stop_processes: bool,
    continue_: bool,
    isolate: str | None,
    network: str | None,
    extra: tuple[str, ...],
) -> None:
    """Resume RUN: fence old writers, mark unfinished calls uncertain, verify, and write a note.

    Refuses while processes of an unfinished call's agent session still run (it names them);
    --stop-processes stops them first. With --continue the agent is started again as 'sandbox run'
    started it (same agent and flags, confined), continuing its conversation; uncertain calls stay
    blocked until 'sandbox approve'. Arguments after '--' are added to the agent's command line.
    The agent is confined as its session was (refused, in one line, where that cannot be had here);
    --isolate and --network choose otherwise. A run fetched from elsewhere runs the agent found on
    your PATH with only the options its adapter lists as safe, confined as your settings say.
    """
    from sandbox.recovery.resume import resume as do_resume

    check_continue_args(continue_, as_json, isolate, network, extra, "resume RUN")
    run = open_run(ctx, run_id, report_problems=False)  # the report carries them
    report = do_resume(run, stop_processes=stop_processes)
    if continue_:
        from sandbox.cli.continue_agent import continue_agent
        from sandbox.cli.which import say_which

        say_which(run, run_id)
        continue_agent(ctx, run, report, extra, isolate=isolate, network=network)  # exits with the agent's exit code
        return
    if as_json:
        data = report.model_dump(mode="json", exclude={"messages"})
        if report.checkpoint is not None:
            data["checkpoint"] = report.checkpoint.model_dump(
                mode="json", include={"id", "name", "label", "step_id", "seq", "created_at"}
            )
        emit_json(renamed(data))
        return
    for problem in report.problems:
        click.echo(f"sandbox: {problem}", err=True)
    for proc in report.stopped_processes:
        click.echo(
            f"sandbox: stopped process {proc.pid} ({escape.text(proc.cmd or '?')}) with SIG{proc.state}.", err=True
        )
    if not (
        report.uncertain
        or report.drift
        or report.denied
        or report.problems
        or report.stopped_processes
        or report.worktree_recreated
        or report.session_rollback
    ):
        # The note is written for the model (--continue hands it over); a person needs one line.
        click.echo(
            f"Run {escape.text(run.run_id)} needs nothing to resume: no call was left unfinished and its files are "
            "as the ledger records them."
        )
        return
    click.echo(escape.text(report.note))
    click.echo("")
    click.echo(f"Next step: {escape.text(report.next_step)}")
