"""``sandbox status``: one run in detail."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.fastshow import host_of, status_row, status_text
from sandbox.cli.finding import base_dir, fast_open, open_run
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import OutputCommand, color_option, setup


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@color_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option(
    "--disk", "whole_disk", is_flag=True, help="Count the disk use of every file (else at most the first 10,000)."
)
@click.pass_context
def status(
    ctx: click.Context, run_id: str | None, color: str | None, no_color: bool, as_json: bool, whole_disk: bool
) -> None:
    """Show RUN: where it came from, its calls by status, its changed paths, its disk use.

    Without RUN, outside a run's worktree, in a repository of several runs: one line per run
    ('sandbox list --json' has them as JSON).
    """
    from sandbox.fast.views import STATUS_DISK_ENTRIES

    if run_id is None and not as_json and _every_run(ctx, color, no_color):
        return

    # A sum over every file grows with the repository: by default a bounded count, which says when it stopped.
    limit = None if whole_disk else STATUS_DISK_ENTRIES
    fast = status_row(base_dir(ctx), run_id, limit)
    row, common_dir = fast if fast is not None else (None, "")
    if row is None:
        from sandbox.runs.summary import summarize

        run = open_run(ctx, run_id)
        common_dir = run.project.common_dir
        row = summarize(run, git_activity=True, disk=True, disk_limit=limit)
        row["in_flight"] = [e.call_id for e in run.entries() if e.status.value in ("started", "uncertain")]
        row["host"] = host_of(run.project.common_dir, run.run_id)
        from sandbox.fast import views

        row["network_refused"] = views.network_refusals(run.state().model_dump(mode="json")["data"]["note"])
    if as_json:
        emit_json(row)
        return
    # Not paged by default, like 'git status' ('sandbox --paginate status' pages it).
    out = setup(ctx, color, no_color, slot="status", page=False)
    out.page()
    status_text(row, out, limit, common_dir, click.echo)


def _every_run(ctx: click.Context, color: str | None, no_color: bool) -> bool:
    """``status`` without RUN where no one run is meant: a line per run (False: one run is meant)."""
    from sandbox.cli.finding import open_project

    if fast_open(ctx, None) is not None:
        return False  # the run we are in, or the only one: found on the fast path, no pygit2
    project, _workdir, cwd_run = open_project(ctx)
    if cwd_run is not None or len(project.run_ids()) < 2:
        return False
    from sandbox.runs.summary import summarize_runs

    rows = summarize_runs(project, disk=False)
    out = setup(ctx, color, no_color, slot="status", page=False)
    click.echo(f"{len(rows)} runs in this repository ('sandbox status RUN' shows one):")
    for r in rows:
        if r.get("damaged") or r.get("error"):
            click.echo(f"  {out.style(r['run'], fg='yellow')}  {escape.text(r.get('error', 'damaged'))}")
            continue
        by = ", ".join(f"{v} {k}" for k, v in sorted(r.get("by_status", {}).items()))
        partly = r.get("partly_applied_calls") or []
        facts = [
            f"{r['calls']} call(s)" + (f" ({by})" if by else ""),
            f"{r['changed_paths']} path(s) changed",
            f"{r.get('unapplied_calls', 0)} not applied" + (f", {len(partly)} partly" if partly else ""),
        ]
        markers = r.get("conflict_markers") or []
        if markers:
            facts.append(out.style(f"{len(markers)} file(s) with conflict markers", fg="red"))
        label = f" ({escape.text(r['label'] or '')})" if r.get("label") else ""
        click.echo(f"  {out.style(r['run'], fg='yellow')}{label}: " + "; ".join(facts))
    return True
