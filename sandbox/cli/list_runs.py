"""``sandbox list``: the runs of this repository, with their disk use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import base_dir, open_project
from sandbox.cli.fmt import local_time
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup
from sandbox.store.fsutil import human_size

if TYPE_CHECKING:
    from sandbox.fast.views import RunRowJson


@click.command("list", cls=OutputCommand)
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option(
    "--disk", "whole_disk", is_flag=True, help="Count the disk use of every file (else at most 10,000 per run)."
)
@click.pass_context
def list_runs(
    ctx: click.Context, color: str | None, no_color: bool, no_pager: bool, as_json: bool, whole_disk: bool
) -> None:
    """List the runs of this repository with their calls, changed paths and disk use."""
    from sandbox.fast.views import STATUS_DISK_ENTRIES

    # A sum over every file of every run grows with runs x repository: by default a bounded count per
    # run, as 'status' counts, which says where it stopped.
    limit = None if whole_disk else STATUS_DISK_ENTRIES
    rows = _fast_rows(ctx, limit)
    if rows is None:
        from sandbox.runs.summary import summarize_runs

        project, _, _ = open_project(ctx)
        rows = summarize_runs(project, disk=True, disk_limit=limit)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No runs. Start one with 'sandbox start'.")
        return
    out = setup(ctx, color, no_color, no_pager=no_pager)
    out.page()
    click.echo(out.style(f"{'RUN':<10} {'CREATED':<25} {'CALLS':>5} {'PATHS':>5} {'DISK':>10}  LABEL", bold=True))
    for r in rows:
        created = local_time(r["created_at"])
        run_col = out.style(f"{r['run']:<10}", fg="yellow")
        click.echo(
            f"{run_col} {created:<25} {r['calls']:>5} {r['changed_paths']:>5} "
            f"{_disk(r):>10}  {escape.text(r['label'] or '')}"
            + _came_from(r)
            + ("" if r["worktree_exists"] or r.get("damaged") or _not_here(r) else "  (worktree missing)")
            + (
                out.style(f"  DAMAGED: {r['error']}", fg="red")
                if r.get("damaged")
                else f"  ({r['error']})"
                if r.get("error")
                else ""
            )
        )
    if not all(r.get("disk_complete", True) for r in rows):
        click.echo(
            ">SIZE: more than SIZE ("
            + (
                f"the first {limit} files of that run counted; 'sandbox list --disk' counts them all)"
                if limit is not None
                else "not every directory of that run could be read: nested past what a path names, or unreadable)"
            )
        )


def _disk(row: RunRowJson) -> str:
    """The DISK column: the size, or ``>SIZE`` (more than that) when the count stopped at its bound."""
    size = human_size(row["disk_bytes"])
    return size if row.get("disk_complete", True) else ">" + size


def _fast_rows(ctx: click.Context, disk_limit: int | None) -> list[RunRowJson] | None:
    """Every run's row from the sealed fold caches (None: one of them needs the full path)."""
    from sandbox.fast import foldcache

    try:
        repo, _, _ = foldcache.discover(base_dir(ctx))
        rows = [repo.summary(run_id, disk=True, disk_limit=disk_limit) for run_id in repo.run_ids()]
    except foldcache.Miss:
        return None
    rows.sort(key=lambda r: r["created_at"] or "")
    return rows


def _came_from(row: Mapping[str, object]) -> str:
    """Where a run came from: the remote it was fetched from and the machine it was started on."""
    fetched = row.get("fetched_from")
    host = row.get("made_on")
    if isinstance(fetched, dict):
        return f"  (from {fetched['remote']}" + (f", made on {host})" if host else ")")
    return ""


def _not_here(row: Mapping[str, object]) -> bool:
    """A run fetched from elsewhere that has no worktree here yet (nothing is missing)."""
    return "worktree" in row and row["worktree"] is None
