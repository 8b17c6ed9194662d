"""``sandbox status``: one run in detail."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import fast_open, open_run
from sandbox.cli.fmt import call_numbers, local_time
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import STATUS_COLORS, Output, OutputCommand, color_option, setup
from sandbox.store.fsutil import human_size

if TYPE_CHECKING:
    from sandbox.fast.views import RunRowJson, StatusHostJson


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
    fast = _fast_row(ctx, run_id, limit)
    row, common_dir = fast if fast is not None else (None, "")
    if row is None:
        from sandbox.runs.summary import summarize

        run = open_run(ctx, run_id)
        common_dir = run.project.common_dir
        row = summarize(run, git_activity=True, disk=True, disk_limit=limit)
        row["in_flight"] = [e.call_id for e in run.entries() if e.status.value in ("started", "uncertain")]
        row["host"] = _host(run.project.common_dir, run.run_id)
        from sandbox.fast import views

        row["network_refused"] = views.network_refusals(run.state().model_dump(mode="json")["data"]["note"])
    in_flight = row["in_flight"]
    if as_json:
        emit_json(row)
        return
    # Not paged by default, like 'git status' ('sandbox --paginate status' pages it).
    out = setup(ctx, color, no_color, slot="status", page=False)
    out.page()
    click.echo(out.style(f"Run {row['run']}", fg="yellow") + (f" ({row['label']})" if row["label"] else ""))
    click.echo(f"  created:   {local_time(row['created_at'])}")
    missing = out.style("  (MISSING)", fg="red")
    if row["worktree"] is None:
        click.echo("  worktree:  none in this repository yet (exec, run, path or resume makes one at the run's head)")
    else:
        click.echo(f"  worktree:  {row['worktree']}" + ("" if row["worktree_exists"] else missing))
        click.echo(f"  git dir:   {row['git_dir']} (the run's own)")
    click.echo(f"  base:      {row['base'][:12]}   your HEAD at start: {(row['user_head'] or 'none')[:12]}")
    click.echo(f"  head:      {(row['run_head'] or 'none')[:12]}")
    by = ", ".join(f"{v} {out.style(k, fg=STATUS_COLORS.get(k))}" for k, v in sorted(row["by_status"].items()))
    click.echo(f"  calls:     {row['calls']} ({by or 'none'})")
    partly = row.get("partly_applied_calls") or []
    numbers = row.get("call_numbers") or {}
    more = f" ({len(partly)} partly applied: {call_numbers(numbers, partly)})" if partly else ""
    renamed = f" ({row['renamed_paths']} renamed)" if row.get("renamed_paths") else ""
    click.echo(
        f"  changed:   {row['changed_paths']} path(s){renamed}; {row['unapplied_calls']} call(s) not applied{more}"
    )
    _disk_line(row, limit)
    markers = row.get("conflict_markers") or []
    if markers:
        shown = ", ".join(escape.path(p) for p in markers)
        click.echo(f"  attention: {out.style(shown, fg='red')} (conflict markers from apply --3way to resolve)")
    uncertain = set(row.get("uncertain_calls") or [])
    running = [c for c in in_flight if c not in uncertain]
    if running:
        flight = out.style(call_numbers(numbers, running), fg="yellow")
        click.echo(f"  in flight: {flight} (run 'sandbox resume' after a crash)")
    if uncertain:
        shown = out.style(call_numbers(numbers, [c for c in in_flight if c in uncertain]), fg="yellow")
        click.echo(
            f"  uncertain: {shown} (started, end never recorded: check, then "
            f"'sandbox call resolve {row['run']} ID --status succeeded|failed')"
        )
    click.echo(f"  host:      {_host_line(row['host'])}")
    refused = row.get("network_refused") or []
    if refused:
        shown = ", ".join(escape.text(f"{r['host']}:{r['port']}") for r in refused[-5:])
        more = f" (the last 5 of {len(refused)}; all in 'sandbox log')" if len(refused) > 5 else ""
        click.echo(f"  network:   {len(refused)} connection(s) refused by the allowlist: {shown}{more}")
    agent_git = row.get("agent_git")
    if agent_git:
        from sandbox.fast.views import describe_agent_git

        first, *rest = describe_agent_git(agent_git)
        click.echo(f"  agent git: {escape.text(first)}")  # branch names and commit subjects are the agent's
        for line in rest:
            click.echo(f"             {escape.text(line)}")
    if row["worktree_exists"] and row.get("worktree") and row.get("git_dir"):
        _warn_git(out, str(row["worktree"]), str(row["git_dir"]), common_dir)


def _disk_line(row: RunRowJson, limit: int | None) -> None:
    """The disk use of the run's worktree and git dir, or a lower bound and why."""
    if not row["worktree_exists"]:
        return
    if row.get("disk_complete", True):
        click.echo(f"  disk:      {human_size(row['disk_bytes'])} (worktree and the run's own git dir)")
        return
    click.echo(
        f"  disk:      more than {human_size(row['disk_bytes'])} ("
        + (
            f"the first {limit} files counted; 'sandbox status --disk' counts them all)"
            if limit is not None
            else "some directories could not be read: nested deeper than a path can name, or not readable)"
        )
    )


def _warn_git(out: Output, worktree: str, git_dir: str, common_dir: str) -> None:
    """A warning for each setting, hook or pointer of the run's git that would run a program for
    your own git in the worktree and that the sandbox did not put there (sandbox.store.gitguard)."""
    from sandbox.store import gitguard

    found = gitguard.findings(worktree, git_dir, common_dir)
    if not found:
        return
    click.echo(
        out.style("  warning:   ", fg="red")
        + "the run's git has what your own git in its worktree would run or read; do not run git there"
        " before you have looked (or drop the run):"
    )
    for item in found:
        click.echo(f"             {escape.text(item)}")


def _fast_row(ctx: click.Context, run_id: str | None, disk_limit: int | None) -> tuple[RunRowJson, str] | None:
    """The status row from the run's sealed fold cache, and the common dir (None: take the full path)."""
    from sandbox.fast import foldcache, views

    fast = fast_open(ctx, run_id)
    if fast is None:
        return None
    repo, found = fast
    try:
        row = repo.summary(found, disk=True, disk_limit=disk_limit)
        row["agent_git"] = repo.agent_git(found, row["base"])
    except foldcache.Miss:
        return None
    row["in_flight"] = views.in_flight(repo.state(found))
    row["host"] = _host(repo.common_dir, found)
    row["network_refused"] = views.network_refusals(repo.state(found)["data"]["note"])
    return row, repo.common_dir


def _host(common_dir: str, run_id: str) -> StatusHostJson | None:
    """The repository's host as far as this run goes (None: no host runs)."""
    from sandbox.agent import wire  # standard library only: status stays a fast command

    status = wire.status(common_dir)
    if status is None:
        return None
    mine = status["runs"].get(run_id)
    return {
        "pid": status["pid"],
        "serves_run": mine is not None,
        "watched": bool(mine and mine["watched"]),
        "note": mine["note"] if mine else None,
    }


def _host_line(info: StatusHostJson | None) -> str:
    if info is None:
        return "none running (the next hook, exec or run starts one)"
    if not info["serves_run"]:
        return f"pid {info['pid']}; it has not served this run yet"
    if info["watched"]:
        return f"pid {info['pid']}; this run's changes come from its watcher"
    return f"pid {info['pid']}; this run's changes are found by scanning ({info['note']})"


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
