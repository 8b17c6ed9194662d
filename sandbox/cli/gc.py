"""``sandbox gc``: reclaim dropped runs and stale worktree metadata."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_project
from sandbox.cli.jsonout import emit_json
from sandbox.store.fsutil import human_size


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--force", is_flag=True, help="Also reclaim runs whose ledger ref vanished although they recorded work.")
@click.option(
    "--orphans", is_flag=True, help="Also remove run homes whose repository no longer exists (a deleted clone)."
)
@click.pass_context
def gc(ctx: click.Context, as_json: bool, force: bool, orphans: bool) -> None:
    """Remove what dropped or interrupted runs left behind; live runs are never touched.

    Run homes in the data directory whose repository was deleted are listed; --orphans removes them.
    """
    from dataclasses import asdict

    from sandbox.agent import host
    from sandbox.cli.finding import data_root
    from sandbox.cli.output import Progress
    from sandbox.runs.gc import collect, orphan_homes, remove_orphan_homes

    project, workdir, _ = open_project(ctx)
    shown = Progress.choose(None, as_json, delayed=True)
    try:
        # The repository's host lock: no host may watch a legacy run's old path while it moves.
        report = collect(
            project,
            force=force,
            claim_host=lambda _run_dir: host.claim(project.common_dir),
            progress=shown.callback,
        )
    finally:
        shown.done()
    found = orphan_homes(data_root(workdir))
    freed = remove_orphan_homes(found) if orphans else 0
    if as_json:
        emit_json(
            {
                **asdict(report),
                "orphan_homes": [{"home": o.home, "origin": o.origin, "bytes": o.bytes} for o in found],
                "orphans_removed": orphans and bool(found),
            }
        )
        return
    if found and orphans:
        click.echo(f"Removed {len(found)} run home(s) of repositories that no longer exist; freed {human_size(freed)}.")
    elif found:
        click.echo(
            f"{len(found)} run home(s) ({human_size(sum(o.bytes for o in found))}) belong to repositories that no "
            f"longer exist (e.g. {escape.path(found[0].origin)}); 'sandbox gc --orphans' removes them."
        )
    if report.temp_files:
        click.echo(f"Removed {report.temp_files} temp file(s) of interrupted pack writes.")
    if report.write_temp_files:
        click.echo(f"Removed {report.write_temp_files} temp file(s) of interrupted apply, undo or redo writes.")
    if not (report.runs or report.admin_dirs):
        temps = report.temp_files + report.write_temp_files
        click.echo("Nothing to reclaim." if not temps else "No runs to reclaim.")
    else:
        click.echo(
            f"Reclaimed {len(report.runs)} run(s), {len(report.worktrees)} worktree(s), "
            f"{len(report.admin_dirs)} stale worktree admin dir(s), {report.refs_deleted} ref(s); "
            f"freed {human_size(report.bytes_freed)}."
        )
    for run_id, path in sorted(report.moved.items()):
        click.echo(f"Moved run {run_id} (made before runs had their own git directory) to {path}.")
    for run_id, why in sorted(report.not_moved.items()):
        click.echo(f"Left run {run_id} in its old place under .git: {why}")
    for run_id in report.stored:
        click.echo(
            f"Gave run {run_id} (made before runs had their own object store) a store of its own: "
            "its sandbox now shows your committed history only."
        )
    for run_id, why in sorted(report.not_stored.items()):
        click.echo(f"Left run {run_id} without an object store of its own: {why}")
    for run_id in report.damaged:
        click.echo(
            f"Kept run {run_id}: its ledger ref is missing but it recorded work; restore it with "
            f"'sandbox repair {run_id}' (or reclaim it with 'sandbox gc --force')."
        )
    if report.skipped_busy:
        click.echo(f"Skipped (busy): {', '.join(report.skipped_busy)}")
