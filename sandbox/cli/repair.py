"""``sandbox repair``: restore a run's ledger ref that was deleted, rewound or rewritten."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_project
from sandbox.cli.jsonout import emit_json, renamed


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def repair(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """Restore RUN's ledger ref to the tip the run last acknowledged (after checking it reads back)."""
    from dataclasses import asdict

    from sandbox.run.fold import FOLD
    from sandbox.run.names import resolve_run
    from sandbox.store import layout
    from sandbox.store.ledger import repair as do_repair
    from sandbox.store.locks import run_lock

    project, _, cwd_run = open_project(ctx)
    rid = resolve_run(project, run_id, cwd_run)
    run_dir = project.run_dir(rid)
    lock = run_lock(layout.run_lock_path(project.common_dir, rid), f"Run {rid}").hold()
    report = do_repair(project.run_repository(rid), rid, run_dir, lock, FOLD)
    if as_json:
        emit_json(renamed(asdict(report)))
    elif report.problem is None:
        click.echo(f"The ledger of run {rid} is intact; nothing to repair.")
    else:
        assert report.restored is not None
        replaced = f" (it pointed at {report.replaced})" if report.replaced else ""
        click.echo(
            f"The ledger of run {rid} {report.problem}{replaced}; restored it to {report.restored[:12]} "
            f"({report.events} events)."
        )
