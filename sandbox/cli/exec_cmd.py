"""``sandbox exec``: run a command in the worktree as one recorded call."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from sandbox.cli.finding import ensure_worktree, open_run
from sandbox.cli.isolation import isolation_options, resolve, resolver
from sandbox.cli.options import IDEMPOTENCY, REPLAY
from sandbox.cli.quickexec import exit_code, report_lines

if TYPE_CHECKING:
    from sandbox.agent.execute import ExecOutcome
    from sandbox.agent.hosted import HostedOutcome


class _ExecCommand(click.Command):
    """Splits ``[RUN] -- COMMAND...`` itself: click alone cannot tell RUN from the command's first word."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            before, after = args[:cut], args[cut + 1 :]
        else:
            before, after = args, []
        super().parse_args(ctx, before)
        if ctx.resilient_parsing:  # shell completion: RUN is completed while no '--' was typed
            ctx.meta["sandbox.command_started"] = "--" in args
            return []
        rest = list(ctx.params.pop("rest", ()))
        if len(rest) > 1:
            raise click.UsageError("Put '--' before the command: sandbox exec [RUN] -- COMMAND ARGS...")
        if rest and not rest[0].strip():
            from sandbox.run.names import empty_run_name

            raise empty_run_name(rest[0])  # "$RUN" unset: not a new run, nor the only one
        ctx.params["run_id"] = rest[0] if rest else None
        ctx.params["command"] = tuple(after)
        if not after:
            raise click.UsageError("No command given: sandbox exec [RUN] -- COMMAND ARGS...")
        return []


@click.command("exec", cls=_ExecCommand)
@click.option("--tool", "tool_name", default="run_command", help="Tool name to record (default run_command).")
@click.option("--idempotency", type=IDEMPOTENCY, default="conditional", help="Is running it twice safe?")
@click.option("--replay", type=REPLAY, default="ask", help="May a resume replay it?")
@click.option("--step", "step_id", default=None, help="The runtime's step id.")
@click.option("--call-id", default=None, help="Use this call id (default: a new one).")
@isolation_options(network_default="off")
@click.argument("rest", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def exec_cmd(
    ctx: click.Context,
    run_id: str | None,
    tool_name: str,
    idempotency: str,
    replay: str,
    step_id: str | None,
    call_id: str | None,
    isolate: str | None,
    network: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND in RUN's worktree as one recorded call; its exit code is passed through.

    Every file the command creates, changes, deletes, renames or chmods is captured in one commit.
    The command runs confined (only the worktree is writable) and without network unless
    --network on. It runs in the subdirectory you are in: of the worktree, or the same one as in
    your tree. On a run from another clone the worktree's .claude/, .mcp.json, .gemini/, .codex/ and
    .env are empty inside (--isolate off refused). Use '--' before the command: sandbox exec RUN -- make test

    With --json the command's output goes to stderr and stdout carries only the call as JSON.
    """
    from sandbox.cli.finding import base_dir
    from sandbox.cli.group import wants_json
    from sandbox.cli.jsonout import stdout_to_stderr

    here = base_dir(ctx)
    as_json = wants_json(ctx)
    if step_id is None:
        # The fast path: the run's host (sandbox serve / sandbox run) records the call.
        with stdout_to_stderr(as_json):
            hosted = _run_hosted(here, run_id, command, tool_name, idempotency, replay, call_id, isolate, network)
        if hosted is not None:
            _report(
                as_json,
                hosted.call_id,
                hosted.status,
                hosted.returncode,
                hosted.files,
                hosted.cannot_start,
                hosted.unrecorded,
                hosted.masked,
            )
            sys.exit(exit_code(hosted.returncode, hosted.unrecorded))
    from sandbox.agent.execute import execute
    from sandbox.confine import spawn
    from sandbox.store.paths import subdir_in_run

    run = open_run(ctx, run_id)
    made = ensure_worktree(run)  # a run fetched from elsewhere gets its worktree here first
    if made:
        click.echo(f"sandbox: {made}", err=True)
    isolation = resolve(run.user_workdir, "exec", isolate, network)
    spawn.check(isolation)  # refused before a service is started or anything recorded
    from sandbox.cli.hooks_cmd import HOST_STARTED, autostart_host

    if autostart_host(run):
        click.echo(f"sandbox: {HOST_STARTED}", err=True)
    with stdout_to_stderr(as_json):
        outcome = execute(
            run,
            list(command),
            tool_name=tool_name,
            idempotency=idempotency,
            replay=replay,
            step_id=step_id,
            call_id=call_id,
            isolation=isolation,
            subdir=subdir_in_run(here, run.worktree, run.user_workdir),
        )
    _report_local(as_json, outcome)
    sys.exit(exit_code(outcome.returncode, outcome.unrecorded))


def _report_local(as_json: bool, outcome: ExecOutcome) -> None:
    """:func:`_report` of a call recorded in this process."""
    entry = outcome.entry
    _report(
        as_json,
        entry.call_id,
        entry.status.value,
        outcome.returncode,
        len(entry.files),
        outcome.cannot_start,
        outcome.unrecorded,
        outcome.masked,
    )


def _report(
    as_json: bool,
    call_id: str,
    status: str,
    returncode: int,
    files: int | None,
    why: str | None,
    unrecorded: str | None = None,
    masked: str | None = None,
) -> None:
    """The call as JSON on stdout, or one line on stderr (the command's own output is the user's).

    ``unrecorded``: why the call's changes could not be recorded (one line on stderr, JSON or not);
    ``masked``: what the command did not see (a run from elsewhere: its agent settings; on stderr too)."""
    if not as_json:
        for line in report_lines(call_id, status, returncode, files, why, unrecorded, masked):
            click.echo(line, err=True)
        return
    if masked is not None:
        from sandbox.cli import escape

        click.echo(f"sandbox: {escape.text(masked)}", err=True)
    if unrecorded is not None:
        click.echo(f"sandbox: {unrecorded}", err=True)
    from sandbox.cli.jsonout import emit_json

    emit_json({"call_id": call_id, "status": status, "exit_code": returncode, "files": files, "cannot_start": why})


def _run_hosted(
    here: str,
    run_id: str | None,
    command: tuple[str, ...],
    tool_name: str,
    idempotency: str,
    replay: str,
    call_id: str | None,
    isolate: str | None,
    network: str | None,
) -> HostedOutcome | None:
    """The call recorded by the run's host, if one serves it (None: record it here)."""
    from sandbox.agent.hosted import run_hosted
    from sandbox.store.paths import subdir_in_run

    return run_hosted(
        here,
        run_id,
        list(command),
        tool_name=tool_name,
        idempotency=idempotency,
        replay=replay,
        call_id=call_id,
        isolation=resolver("exec", isolate, network),
        subdir=lambda worktree, user_workdir: subdir_in_run(here, worktree, user_workdir),
    )
