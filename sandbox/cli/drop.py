"""``sandbox drop``: remove a run's worktree and refs (or every run of a group but one)."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_project, open_run
from sandbox.cli.jsonout import emit_json
from sandbox.cli.which import say_which
from sandbox.store.fsutil import human_size


@click.command()
@click.argument("run_id", required=False)
@click.option("--force", is_flag=True, help="Drop even though the run has changes not applied to your tree.")
@click.option(
    "--all-but",
    "keep",
    default=None,
    metavar="RUN",
    help="Drop every other run of RUN's group (its 'start --count' siblings and forks); with --force, changes and all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def drop(ctx: click.Context, run_id: str | None, force: bool, keep: str | None, as_json: bool) -> None:
    """Remove RUN: its worktree, its refs and its ledger.

    Refuses while the run has recorded changes that are not applied to your tree, unless --force.
    With --all-but RUN (best-of-N, after 'sandbox compare'), the other runs of RUN's group are
    dropped; as for one run, a run with unapplied changes refuses (nothing is dropped) unless --force.
    """
    if keep is not None:
        _drop_all_but(ctx, run_id, keep, force, as_json)
        return
    from sandbox.agent.host import forget_run

    run = open_run(ctx, run_id)
    say_which(run, run_id)
    # A background `sandbox serve` would keep watching the worktree while it is removed.
    # The repository's host stops watching the worktree first (it would notice the drop anyway).
    freed = run.drop(force=force, before_remove=lambda r: forget_run(r.project.common_dir, r.run_id))
    if as_json:
        emit_json({"run": run.run_id, "dropped": True, "bytes_freed": freed})
    else:
        click.echo(f"Dropped run {run.run_id}; freed {human_size(freed)} of worktree files.")


def _drop_all_but(ctx: click.Context, run_id: str | None, keep: str, force: bool, as_json: bool) -> None:
    from sandbox.errors import UsageError
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.runs.many import group_of

    if run_id is not None:
        raise UsageError("Give either RUN or --all-but RUN, not both.")
    project, _workdir, cwd_run = open_project(ctx)
    kept = Run.open(project, resolve_run(project, keep, cwd_run))
    others = [r for r in group_of(project, kept) if r != kept.run_id]
    if not others:
        raise UsageError(
            f"Run {kept.run_id} has no other run in its group (the runs of one 'start --count', and forks); "
            "nothing was dropped."
        )
    if not force:  # checked for all first: one refusal drops none of them
        pending = []
        for other in others:
            run = Run.open(project, other)
            if run.unapplied_calls() and run.changed_paths():
                pending.append(other)
        if pending:
            from sandbox.errors import SandboxError

            raise SandboxError(
                f"{len(pending)} other run(s) of the group have changes not applied to your tree "
                f"({', '.join(pending)}); nothing was dropped. Add --force to discard them, "
                "or apply what you want to keep first."
            )
    from sandbox.agent.host import forget_run

    dropped = []
    for other in others:
        freed = Run.open(project, other).drop(
            force=True, before_remove=lambda r: forget_run(r.project.common_dir, r.run_id)
        )
        dropped.append({"run": other, "bytes_freed": freed})
        if not as_json:
            click.echo(f"Dropped run {other}; freed {human_size(freed)} of worktree files.")
    if as_json:
        emit_json({"kept": kept.run_id, "dropped": dropped})
    else:
        click.echo(f"Kept run {kept.run_id}.")
