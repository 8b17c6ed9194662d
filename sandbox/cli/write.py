"""``sandbox write``: one recorded write_file call, content on stdin."""

from __future__ import annotations

import sys

import click

from sandbox.cli import escape
from sandbox.cli.finding import ensure_worktree, open_run, run_then
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("path", required=False, metavar="PATH")
@click.option("--executable/--not-executable", default=None, help="Set or clear the executable bit.")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def write(ctx: click.Context, run_id: str | None, path: str | None, executable: bool | None, as_json: bool) -> None:
    """Write stdin to PATH in RUN's worktree as one recorded write_file call."""
    from sandbox.store.paths import normalize

    run_id, path = run_then(run_id, path, "PATH")
    run = open_run(ctx, run_id)
    made = ensure_worktree(run)  # a run fetched from elsewhere gets its worktree here first
    if made:
        click.echo(f"sandbox: {made}", err=True)
    rel = normalize(path)
    data = sys.stdin.buffer.read()
    with run.tool_call(
        "write_file", {"path": rel, "bytes": len(data)}, idempotency="idempotent", replay="auto"
    ) as call:
        call.write(rel, data, executable=executable)
    assert call.entry is not None
    if as_json:
        emit_json(dump(call.entry))
    else:
        click.echo(f"{call.entry.call_id} wrote {escape.path(rel)}" + ("" if call.entry.files else " (unchanged)"))
