"""``sandbox start``: snapshot the working tree into a new run with its own worktree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import base_dir, data_root, main_workdir, seal_when_done
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.store.project import Project


@click.command()
@click.option("--label", default=None, help="A label to recognise the run by.")
@click.option(
    "--count",
    type=click.IntRange(1),
    default=None,
    help="Make N runs from one snapshot (best-of-N; labels L-1..L-N).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show progress on stderr (default: when stderr is a terminal and not --json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def start(ctx: click.Context, label: str | None, count: int | None, progress: bool | None, as_json: bool) -> None:
    """Snapshot your working tree (with uncommitted and untracked files) into a new run.

    Your index, HEAD, branches, stash and files are not touched. The run gets its own worktree and
    git directory (under $XDG_DATA_HOME/sandbox, or data_dir in .sandbox.toml) and hidden refs
    under refs/sandbox/<run>/ in your repository.
    """
    from sandbox.cli import earlystart
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, cwd_run = Project.discover(base_dir(ctx))
    project.data_root = data_root(workdir or main_workdir(project.common_dir))
    if workdir is None:
        raise SandboxError(f"You are inside the worktree of run {cwd_run}; start runs from your own repository.")
    if count is not None:
        _start_many(project, workdir, count, label, as_json)
        return
    from sandbox.cli.output import Progress

    shown = Progress.choose(progress, as_json)
    # What the console script began before click was imported (the checkout running); an error before
    # this line leaves it to the script, which undoes it (earlystart.abandon_unused).
    begun, relay = earlystart.take()
    if relay is not None:
        relay.attach(shown.callback)
    try:
        run = Run.start(project, workdir, label=label, progress=shown.callback, begun=begun)
        seal_when_done(run)
    finally:
        shown.done()
    info = run.info
    report = run.include_report
    for warning in report.warnings if report is not None else []:
        click.echo(f"sandbox: warning: {warning}", err=True)
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "worktree": run.worktree,
                "git_dir": run.git_dir,
                "base": info.base,
                "user_head": info.head,
                "run_head": info.base,
                "label": info.label,
                "submodules": info.submodules,
                "copied": report.copied if report is not None else [],
                "linked": report.linked if report is not None else [],
            }
        )
        return
    click.echo(f"Started run {run.run_id}" + (f" ({escape.text(label)})" if label else ""))
    click.echo(f"  worktree: {run.worktree}")
    click.echo(f"  base:     {info.base[:12]} (snapshot of your tree on {(info.head or 'no commit')[:12]})")
    if info.submodules:
        click.echo(
            f"  note: {len(info.submodules)} submodule(s) kept as gitlinks, not checked out: "
            + ", ".join(info.submodules[:5])
        )
    if report is not None and report.copied:
        click.echo(f"  copied ignored files you listed: {', '.join(report.copied[:8])}")
    if report is not None and report.linked:
        click.echo(f"  linked (shared with your tree!): {', '.join(report.linked[:8])}")
    click.echo(_next(run.run_id, run.worktree, workdir))


def _next(run_id: str, worktree: str, workdir: str) -> str:
    """What to do next. ``cd`` into the worktree only when the agent runs confined: then the run's
    git config and hooks are not the agent's to write (sandbox.store.gitguard), and your own git
    there runs nothing it planted. Unconfined, the agent could plant them."""
    from sandbox.run import config

    try:
        confined = config.load(workdir).isolate
    except config.ConfigError:
        confined = False  # exec and run say what is wrong with the settings
    if confined:
        return f"Next: cd {worktree}  or  sandbox exec {run_id} -- CMD"
    return (
        f"Next: sandbox exec {run_id} -- CMD (confinement is off in .sandbox.toml: an agent there can set what "
        f"your own git runs in {worktree}; 'sandbox status {run_id}' says whether it did)"
    )


def _start_many(project: Project, workdir: str, count: int, label: str | None, as_json: bool) -> None:
    """``start --count N``: N runs on one snapshot; their checkouts run in parallel."""
    from sandbox.runs.many import start_many

    runs = start_many(project, workdir, count, label)
    for run in runs:
        seal_when_done(run)
    for run in runs:
        report = run.include_report
        for warning in report.warnings if report is not None else []:
            click.echo(f"sandbox: warning: {run.run_id}: {warning}", err=True)
    first = runs[0].info
    if as_json:
        rows = [{"run": r.run_id, "worktree": r.worktree, "git_dir": r.git_dir, "label": r.info.label} for r in runs]
        emit_json({"group": first.group, "base": first.base, "user_head": first.head, "runs": rows})
        return
    click.echo(f"Started {len(runs)} runs from one snapshot {first.base[:12]} of your tree:")
    for run in runs:
        click.echo(f"  {run.run_id}  {run.worktree}" + (f"  ({escape.text(run.info.label)})" if run.info.label else ""))
    ids = " ".join(r.run_id for r in runs)
    click.echo(f"Next: an agent in each (sandbox run RUN -- AGENT), then: sandbox compare {ids}")
