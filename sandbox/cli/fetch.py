"""``sandbox fetch [REMOTE] [RUN...]``: bring runs from a git remote into this repository."""

from __future__ import annotations

import sys

import click

from sandbox.cli import escape
from sandbox.cli.finding import base_dir, open_project
from sandbox.cli.jsonout import emit_json


@click.command()
@click.argument("args", nargs=-1, metavar="[REMOTE] [RUN...]")
@click.option("--json", "as_json", is_flag=True, help="Print what arrived as JSON.")
@click.pass_context
def fetch(ctx: click.Context, args: tuple[str, ...], as_json: bool) -> None:
    """Fetch runs (all of REMOTE's, or the RUNs named: ids or unique prefixes) and list what arrived.

    REMOTE defaults to the one git would use (your branch's upstream remote, else origin); a first
    argument that is no remote of this repository is taken as a RUN. A run's ledger only moves
    forward: a run both sides recorded into since they last met is refused, never merged. A fetched
    run gets its worktree here when a command needs one (exec, run, path, resume).
    """
    from sandbox.cli.push import _interactive, remote_arg
    from sandbox.runs import remote

    project, _workdir, _cwd_run = open_project(ctx)
    given = list(args)
    if given and (given[0] in project.repo.remotes.names() or _looks_like_remote(given[0])):
        name = remote_arg(ctx, given.pop(0))
    else:
        name = remote.default_remote(project)
    report = remote.fetch(project, name, given, how=remote.Transport(base_dir(ctx), _interactive()))
    if as_json:
        emit_json({"remote": report.remote, "runs": [t.to_json() for t in report.runs]})
    else:
        if not report.runs:
            click.echo(f"{report.remote} has no sandbox runs.")
        for item in report.runs:
            what = f"{item.run_id}" + (f" ({escape.text(item.label)})" if item.label else "")  # another's label
            made = f", made on {item.host}" if item.host else ""
            if item.outcome == "new":
                click.echo(f"New run {what}: {item.events} event(s){made}.")
            elif item.outcome == "fetched":
                click.echo(f"Run {what}: {item.events} new event(s){made}.")
            elif item.outcome == "up_to_date":
                click.echo(f"Run {what}: up to date.")
            elif item.outcome == "ahead":
                click.echo(f"Run {what}: nothing new; {item.message}")
            else:
                click.echo(f"sandbox: {item.message}", err=True)
    if not report.ok:
        sys.exit(1)


def _looks_like_remote(text: str) -> bool:
    return "://" in text or ":" in text or "/" in text or text.endswith(".git")
