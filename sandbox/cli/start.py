"""``sandbox start``: snapshot the working tree into a new run with its own worktree."""

from __future__ import annotations

import click

from sandbox.cli.common import base_dir, data_root, emit_json, main_workdir


@click.command()
@click.option("-C", "directory", type=click.Path(file_okay=False), default=None, help="The repository to use.")
@click.option("--label", default=None, help="A label to recognise the run by.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show progress on stderr (default: when stderr is a terminal and not --json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def start(ctx: click.Context, directory: str | None, label: str | None, progress: bool | None, as_json: bool) -> None:
    """Snapshot your working tree (with uncommitted and untracked files) into a new run.

    Your index, HEAD, branches, stash and files are not touched. The run gets its own worktree and
    git directory (under $XDG_DATA_HOME/sandbox, or data_dir in .sandbox.toml) and hidden refs
    under refs/sandbox/<run>/ in your repository.
    """
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, cwd_run = Project.discover(directory or base_dir(ctx))
    project.data_root = data_root(workdir or main_workdir(project.common_dir))
    if workdir is None:
        raise SandboxError(f"You are inside the worktree of run {cwd_run}; start runs from your own repository.")
    from sandbox.cli.output import Progress

    shown = Progress.choose(progress, as_json)
    try:
        run = Run.start(project, workdir, label=label, progress=shown.callback)
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
                "head": info.head,
                "label": info.label,
                "submodules": info.submodules,
                "copied": report.copied if report is not None else [],
                "linked": report.linked if report is not None else [],
            }
        )
        return
    click.echo(f"Started run {run.run_id}" + (f" ({label})" if label else ""))
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
    click.echo(f"Next: cd {run.worktree}  or  sandbox exec {run.run_id} -- CMD")
