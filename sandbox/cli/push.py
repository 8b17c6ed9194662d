"""``sandbox push RUN [REMOTE]``: send a run's record to a git remote."""

from __future__ import annotations

import sys

import click

from sandbox.cli.finding import base_dir, open_project
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("run_ids", nargs=-1, metavar="[RUN] [REMOTE]")
@click.option(
    "--with-agent-refs",
    is_flag=True,
    help="Send the branches, tags and commits the agent made in its own git too (left out otherwise).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was pushed as JSON.")
@click.pass_context
def push(ctx: click.Context, run_ids: tuple[str, ...], with_agent_refs: bool, as_json: bool) -> None:
    """Push RUN's refs (ledger, head, base, checkpoints) to REMOTE.

    REMOTE defaults to the one git would use: your branch's upstream remote, else origin. The ledger
    only moves forward: if REMOTE has events of the run this clone lacks, nothing is pushed and you
    are told to fetch first. Uses git's own push (your credential helpers and ssh config apply).
    What the agent made in its own git (tags, branches, commits: nothing 'sandbox diff' shows) stays
    here unless --with-agent-refs is given; the refs left out are named.
    """
    from sandbox.run.names import resolve_run
    from sandbox.runs import remote

    project, _workdir, cwd_run = open_project(ctx)
    if len(run_ids) > 2:
        raise click.UsageError("Push one run at a time: sandbox push RUN [REMOTE]")
    given, where = (run_ids[0] if run_ids else None), (run_ids[1] if len(run_ids) == 2 else None)
    run_id = resolve_run(project, given, cwd_run)
    name = remote_arg(ctx, where) if where else remote.default_remote(project)
    how = remote.Transport(base_dir(ctx), _interactive())
    report = remote.push(project, [run_id], name, how=how, with_agent_refs=with_agent_refs)
    if as_json:
        emit_json({"remote": report.remote, "runs": [t.to_json() for t in report.runs]})
    else:
        for item in report.runs:
            if item.outcome == "pushed":
                click.echo(f"Pushed run {item.run_id} to {report.remote} ({item.events} new event(s)).")
            elif item.outcome == "up_to_date":
                click.echo(f"Run {item.run_id} is up to date on {report.remote}.")
            else:
                click.echo(f"sandbox: {item.message}", err=True)
            if item.left_out and item.ok:
                from sandbox.cli import escape

                names = ", ".join(
                    escape.text(n.removeprefix(remote.AGENT_PREFIX).removeprefix("refs/")) for n in item.left_out
                )
                click.echo(
                    f"Left out what the agent made in its own git ({names}): 'sandbox diff' never shows it; "
                    "push again with --with-agent-refs to send it."
                )
    if not report.ok:
        sys.exit(1)


def remote_arg(ctx: click.Context, given: str) -> str:
    """A remote as given; a relative path to a repository is taken from where the command runs."""
    import os

    from sandbox.cli.finding import base_dir

    path = os.path.join(base_dir(ctx), given)
    if not os.path.isabs(given) and "://" not in given and os.path.isdir(path):
        return os.path.abspath(path)
    return given


def _interactive() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False
