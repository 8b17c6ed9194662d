"""``sandbox log``: the run's calls in order, or one call in full (``--call``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from sandbox.cli.common import dump, emit_json, open_run

if TYPE_CHECKING:
    from sandbox.run.run import Run


@click.command()
@click.argument("run_id", required=False)
@click.option("--call", "call_id", default=None, help="Show this call in full: input, result, the whole error.")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entries as JSON.")
@click.pass_context
def log(ctx: click.Context, run_id: str | None, call_id: str | None, as_json: bool) -> None:
    """List RUN's calls in order: status, tool, commit and changed files."""
    from sandbox.run.names import resolve_call_id

    run = open_run(ctx, run_id)
    if call_id is not None:
        _show_call(run, resolve_call_id(run, call_id), as_json)
        return
    entries = run.entries()
    if as_json:
        emit_json(dump(entries))
        return
    if not entries:
        click.echo(f"Run {run.run_id} has no calls yet.")
        return
    # Calls of which only some hunks are in your tree ('apply --hunks'), from the typed fold (the
    # merge package stays unloaded: log is a fast command).
    partly: dict[str, list[str]] = {}
    for path, record in sorted(run.state().data.user_paths.items()):
        for call_id in record.partial.calls if record.partial is not None else []:
            partly.setdefault(call_id, []).append(path)
    for e in entries:
        flags = "".join(
            [
                " [undone]" if e.undone else "",
                " [applied]" if e.applied else "",
                f" [partly applied: {', '.join(partly[e.call_id])}]" if e.call_id in partly else "",
                f" [denied: {e.denial_reason or 'no reason'}]" if e.approval and e.approval.value == "denied" else "",
            ]
        )
        commit = e.commit[:10] if e.commit else "-"
        click.echo(f"{e.seq:>3}  {e.call_id:<20} {e.status.value:<10} {e.tool_name:<16} {commit:<10}{flags}")
        if e.summary:
            click.echo(f"       {e.summary[:100]}")
        if e.error:
            more = f"  (in full: sandbox log {run.run_id} --call {e.call_id})" if e.error_detail or e.error_ref else ""
            first = e.error.strip().splitlines()[0] if e.error.strip() else e.error  # older entries: multi-line
            click.echo(f"       error: {first[:200]}{more}")
        for f in e.files:
            kind = "A" if f.before_hash is None else "D" if f.after_hash is None else "M"
            if kind == "M" and f.before_hash == f.after_hash:
                kind = "T"
            click.echo(f"       {kind} {f.path}")
    _agent_git(run)


def _agent_git(run: Run) -> None:
    """What the agent did with the run's own git, after the calls (only when it did something)."""
    from sandbox.run.agentgit import activity, describe

    if run.place.legacy or not run.worktree_exists():
        return
    found = activity(run.git_dir, run.run_id, run.base)
    if found is None or not found.changed:
        return
    first, *rest = describe(found.to_json())
    click.echo(f"agent git: {first}")
    for line in rest:
        click.echo(f"           {line}")


def _show_call(run: Run, call_id: str, as_json: bool) -> None:
    entry = run.entry(call_id)
    error = run.error_text(entry)
    if as_json:
        data = dump(entry)
        assert isinstance(data, dict)
        data["error_text"] = error
        emit_json(data)
        return
    click.echo(f"call:    {entry.call_id} (#{entry.seq})")
    click.echo(f"tool:    {entry.tool_name}")
    click.echo(f"status:  {entry.status.value}")
    if entry.approval is not None:
        reason = f" ({entry.denial_reason})" if entry.denial_reason else ""
        click.echo(f"answer:  {entry.approval.value}{reason}")
    for label, when in (("started", entry.started_at), ("ended", entry.finished_at)):
        if when is not None:
            click.echo(f"{label + ':':<9}{when.isoformat()}")
    if entry.summary:
        click.echo(f"summary: {entry.summary}")
    if entry.input is not None:
        click.echo("input:   " + json.dumps(entry.input, ensure_ascii=False)[:2000])
    if entry.commit:
        click.echo(f"commit:  {entry.commit}")
    for f in entry.files:
        click.echo(f"file:    {f.path}")
    if error:
        click.echo("error:")
        for line in error.splitlines() or [error]:
            click.echo(f"  {line}")
