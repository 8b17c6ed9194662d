"""``sandbox log``: the run's calls in order, or one call in full (``--call``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from sandbox.cli.fastshow import log_header, log_row, log_text, refusals_by_call, session_refusals, show_agent_git
from sandbox.cli.finding import fast_open, open_run
from sandbox.cli.jsonout import dump, emit_json
from sandbox.cli.log_call import patch_of, show_call
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup
from sandbox.fast import views
from sandbox.fast.foldjson import state_json

if TYPE_CHECKING:
    from sandbox.fast.foldcache import Repository
    from sandbox.run.run import Run


class _PathspecCommand(OutputCommand):
    """Takes ``-- PATH...`` after the options, as ``git log`` does: everything after ``--`` is a path."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["pathspecs"] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


@click.command(cls=_PathspecCommand)
@click.argument("run_id", required=False)
@click.option("--call", "call_id", default=None, help="Show this call in full: input, result, the whole error.")
@click.option("-p", "--patch", is_flag=True, help="Show each call's patch.")
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entries as JSON.")
@click.pass_context
def log(
    ctx: click.Context,
    run_id: str | None,
    call_id: str | None,
    patch: bool,
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """List RUN's calls in order: when, how long, status, tool, command, commit and changed files.

    `sandbox log RUN -- PATH...` lists only the calls that changed those paths (or paths below them).
    Paged and coloured as git does it (see 'sandbox diff --help').
    """
    if call_id is None and not patch and not ctx.meta.get("pathspecs"):
        fast = fast_open(ctx, run_id)
        if fast is not None and _fast_log(fast[0], fast[1], as_json, ctx, color, no_color, no_pager):
            return
    run = open_run(ctx, run_id)
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    if call_id is not None:
        show_call(run, call_id, as_json, patch, out)
        return
    entries = run.entries()
    specs = _pathspecs(ctx, run)
    if specs is not None:
        entries = [e for e in entries if any(_matches(f.path, specs) for f in e.files)]
    if as_json:
        emit_json(dump(entries))
        return
    if not entries:
        click.echo(f"Run {run.run_id} has no calls yet." if specs is None else "No call changed those paths.")
        if specs is None:
            session_refusals(refusals_by_call(state_json(run.state().model_dump(mode="json"))), out, click.echo)
        return
    out.page()
    log_header(out, click.echo)
    # Calls of which only some hunks are in your tree ('apply --hunks'), from the typed fold (the
    # merge package stays unloaded: log is a fast command).
    data = state_json(run.state().model_dump(mode="json"))  # once: the rows and the partial applies read it
    partly = views.partial_paths(data)
    refused = refusals_by_call(data)
    for e in entries:
        log_row(
            run.run_id, data["calls"][e.call_id], out, click.echo, partly.get(e.call_id), refused.pop(e.call_id, None)
        )
        if patch and e.commit and e.parent_commit:
            patch_of(run, e, out)
    if specs is None:
        session_refusals(refused, out, click.echo)
        _agent_git(run)


def _fast_log(
    repo: Repository,
    run_id: str,
    as_json: bool,
    ctx: click.Context,
    color: str | None,
    no_color: bool,
    no_pager: bool,
) -> bool:
    """The whole log from the run's sealed fold cache; False (having shown nothing): take the full path."""
    from sandbox.fast import foldcache

    state = repo.state(run_id)
    entries = views.entries(state)
    try:
        agent = repo.agent_git(run_id, state["run"]["base"]) if entries and not as_json else None
    except foldcache.Miss:
        return False
    if as_json:
        emit_json(entries)
        return True
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    if entries:
        out.page()
    log_text(run_id, state, agent, out, click.echo)
    return True


def _pathspecs(ctx: click.Context, run: Run) -> list[str] | None:
    """The ``-- PATH...`` given, as paths relative to the top of the tree (None: no filter)."""
    given = ctx.meta.get("pathspecs")
    if not given:
        return None
    from sandbox.store import paths as pathmod

    cwd = os.getcwd() if ctx.find_root().obj.get("directory") is None else None
    # Relative paths are relative to where you are: in your tree, or in the run's worktree.
    worktree = os.path.realpath(run.worktree)
    inside = cwd is not None and (os.path.realpath(cwd) + os.sep).startswith(worktree + os.sep)
    root = run.worktree if inside else None
    out = []
    for p in given:
        rel = pathmod.from_user(root or run.user_workdir, p, cwd)
        out.append("" if rel in (".", "") else rel.rstrip("/"))
    return out


def _matches(path: str, specs: list[str]) -> bool:
    return any(s == "" or path == s or path.startswith(s + "/") for s in specs)


def _agent_git(run: Run) -> None:
    """What the agent did with the run's own git, after the calls (only when it did something)."""
    from sandbox.fast.agentgit import read

    if run.place.legacy or not run.worktree_exists():
        return
    found = read(run.git_dir, run.run_id, run.base)
    if found is not None:
        show_agent_git(found, click.echo)
