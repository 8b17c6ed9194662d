"""``sandbox compensate``: run the compensation a call registered, as its own recorded call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli.finding import ensure_worktree, open_call, run_then
from sandbox.cli.jsonout import dump, emit_json

if TYPE_CHECKING:
    from sandbox.confine.spawn import Isolation
    from sandbox.run.run import Run


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--yes", is_flag=True, help="Run a compensation another clone registered without asking (confined).")
@click.option("--json", "as_json", is_flag=True, help="Print the compensation call as JSON.")
@click.pass_context
def compensate(ctx: click.Context, run_id: str | None, call_id: str | None, yes: bool, as_json: bool) -> None:
    """Undo CALL's external effect with the compensation it registered, if it registered one.

    A compensation registered in another clone (a fetched run, or one that came by plain git) is
    someone else's command line: it is shown, run only after you confirm (--yes for scripts), and
    confined as 'sandbox exec' is, whatever your settings say.
    """
    from sandbox.recovery.actions import compensate as do_compensate
    from sandbox.recovery.actions import compensation_argv, compensation_origin

    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    isolation = None
    where = compensation_origin(run, call_id)
    if where is not None:
        isolation = _confirmed(run, call_id, compensation_argv(run, call_id), where, yes)
    made = ensure_worktree(run)  # a run fetched from elsewhere gets its worktree here first
    if made:
        click.echo(f"sandbox: {made}", err=True)
    report = do_compensate(run, call_id, isolation=isolation)
    if as_json:
        emit_json(
            {
                "action": "compensate",
                "call_id": report.call_id,
                "compensation_call": report.compensation_call,
                "exit_code": report.returncode,
                "entry": dump(report.entry),
                "message": report.message,
            }
        )
    else:
        click.echo(report.message)
    if report.returncode != 0:
        ctx.exit(1)


def _confirmed(run: Run, call_id: str, argv: list[str], where: str, yes: bool) -> Isolation:
    """Show a foreign compensation's exact command, ask (unless ``yes``), and give the confinement it runs in."""
    import shlex

    from sandbox.cli.isolation import resolve
    from sandbox.confine import spawn
    from sandbox.errors import SandboxError

    click.echo(
        f"sandbox: the compensation of call {call_id} comes from a record {where}; "
        f"it runs confined: {shlex.join(argv)}",
        err=True,
    )
    if not yes:
        try:
            agreed = click.confirm("Run it?", default=False, err=True)
        except click.Abort:
            agreed = False
        if not agreed:
            raise SandboxError(
                f"The compensation of call {call_id} was not run (not confirmed); "
                "run 'sandbox compensate' again and answer yes, or pass --yes to run it confined without asking."
            )
    isolation = resolve(run.user_workdir, "exec", "on", None)
    spawn.check(isolation)
    return isolation
