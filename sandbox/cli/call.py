"""``sandbox call start|finish|plan``: the call protocol for runtimes in any language."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import ensure_worktree, open_call, open_run, run_then
from sandbox.cli.group import SandboxGroup
from sandbox.cli.jsonout import dump, emit_json
from sandbox.cli.options import call_options, parse_json


@click.group(cls=SandboxGroup)
def call() -> None:
    """Record tool calls from any runtime: start before the tool runs, finish after."""


@call.command("start")
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--tool", "tool_name", required=True, help="The tool's name.")
@call_options
@click.option("--compensation", "compensation_json", default=None, help='How to undo it, e.g. {"argv": [...]}.')
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def call_start(
    ctx: click.Context,
    run_id: str | None,
    tool_name: str,
    call_id: str | None,
    step_id: str | None,
    input_json: str | None,
    idempotency: str | None,
    replay: str | None,
    side_effects: tuple[str, ...],
    compensation_json: str | None,
    as_json: bool,
) -> None:
    """Record that a call starts; prints its call id once the event is on disk."""
    run = open_run(ctx, run_id)
    made = ensure_worktree(run)  # a run fetched from elsewhere gets its worktree here first
    if made:
        click.echo(f"sandbox: {made}", err=True)
    value = parse_json(input_json, "--input")
    compensation = _compensation(compensation_json)
    cid = run.start_call(
        tool_name,
        value,
        call_id=call_id,
        step_id=step_id,
        idempotency=idempotency or "conditional",
        replay=replay or "ask",
        side_effects=side_effects,
        compensation=compensation,
    )
    if as_json:
        emit_json(dump(run.entry(cid)))
    else:
        click.echo(cid)


@call.command("finish")
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--status", "status_", required=True, help="succeeded or failed.")
@click.option("--result", "result_json", default=None, help="The call's result, as JSON.")
@click.option("--error", default=None, help="A one-line error summary for a failed call.")
@click.option("--path", "paths", multiple=True, help="A path the call changed (default: scan the worktree).")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def call_finish(
    ctx: click.Context,
    run_id: str | None,
    call_id: str | None,
    status_: str,
    result_json: str | None,
    error: str | None,
    paths: tuple[str, ...],
    as_json: bool,
) -> None:
    """Record that a call ended; its file changes become one commit on the run's head."""
    from sandbox.store.paths import normalize

    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    result = parse_json(result_json, "--result")
    entry = run.finish_call(
        call_id, status_, paths=[normalize(p) for p in paths] if paths else None, result=result, error=error
    )
    if as_json:
        emit_json(dump(entry))
    else:
        files = ", ".join(escape.path(f.path) for f in entry.files) or "no file changes"
        click.echo(f"{escape.text(entry.call_id)} {entry.status.value}: {files}")


@call.command("plan")
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--tool", "tool_name", required=True, help="The tool's name.")
@call_options
@click.option("--compensation", "compensation_json", default=None, help='How to undo it, e.g. {"argv": [...]}.')
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def call_plan(
    ctx: click.Context,
    run_id: str | None,
    tool_name: str,
    call_id: str | None,
    step_id: str | None,
    input_json: str | None,
    idempotency: str | None,
    replay: str | None,
    side_effects: tuple[str, ...],
    compensation_json: str | None,
    as_json: bool,
) -> None:
    """Record a planned call that needs approval before it runs; prints its call id."""
    run = open_run(ctx, run_id)
    value = parse_json(input_json, "--input")
    compensation = _compensation(compensation_json)
    cid = run.plan_call(
        tool_name,
        value,
        call_id=call_id,
        step_id=step_id,
        idempotency=idempotency or "conditional",
        replay=replay or "ask",
        side_effects=side_effects,
        compensation=compensation,
    )
    if as_json:
        emit_json(dump(run.entry(cid)))
    else:
        click.echo(cid)


def _compensation(text: str | None) -> dict[str, object] | None:
    from sandbox.errors import UsageError

    value = parse_json(text, "--compensation")
    if value is not None and not isinstance(value, dict):
        raise UsageError('--compensation must be a JSON object, e.g. {"argv": ["gh", "issue", "close", "12"]}.')
    return value


@call.command("resolve")
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--status", "status_", required=True, help="succeeded or failed: what checking showed.")
@click.option("--reason", default=None, help="How the outcome was established.")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def call_resolve(
    ctx: click.Context, run_id: str | None, call_id: str | None, status_: str, reason: str | None, as_json: bool
) -> None:
    """Record the checked outcome of an uncertain call (after 'sandbox resume')."""
    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    entry = run.resolve_call(call_id, status_, reason)
    if as_json:
        emit_json(dump(entry))
    else:
        click.echo(f"{entry.call_id} resolved as {entry.status.value}")
