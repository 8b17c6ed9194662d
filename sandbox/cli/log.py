"""``sandbox log``: the run's calls in order, or one call in full (``--call``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import fast_open, open_run
from sandbox.cli.fmt import command_of, duration, fit, local_time
from sandbox.cli.jsonout import dump, emit_json
from sandbox.cli.log_call import patch_of, show_call
from sandbox.cli.output import STATUS_COLORS, Output, OutputCommand, color_option, pager_option, setup
from sandbox.fast import views
from sandbox.fast.foldjson import EntryJson, StateJson, state_json
from sandbox.fast.views import RefusalJson, parse_time

if TYPE_CHECKING:
    from sandbox.fast.agentgit import AgentGitJson
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
            _session_refusals(_refusals_by_call(state_json(run.state().model_dump(mode="json"))), out)
        return
    out.page()
    _header(out)
    # Calls of which only some hunks are in your tree ('apply --hunks'), from the typed fold (the
    # merge package stays unloaded: log is a fast command).
    data = state_json(run.state().model_dump(mode="json"))  # once: the rows and the partial applies read it
    partly = views.partial_paths(data)
    refused = _refusals_by_call(data)
    for e in entries:
        _row(run.run_id, data["calls"][e.call_id], out, partly.get(e.call_id), refused.pop(e.call_id, None))
        if patch and e.commit and e.parent_commit:
            patch_of(run, e, out)
    if specs is None:
        _session_refusals(refused, out)
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
    if not entries:
        click.echo(f"Run {run_id} has no calls yet.")
        _session_refusals(_refusals_by_call(state), out)
        return True
    out.page()
    _header(out)
    partly = views.partial_paths(state)
    refused = _refusals_by_call(state)
    for e in entries:
        _row(run_id, e, out, partly.get(e["call_id"]), refused.pop(e["call_id"], None))
    _session_refusals(refused, out)
    if agent is not None:
        _show_agent_git(agent)
    return True


def _header(out: Output) -> None:
    click.echo(out.style(f"{'#':>3}  {'CALL':<18} {'STATUS':<10} {'TOOL':<16} COMMIT", bold=True))
    click.echo(out.style(f"{'':>7}{'STARTED':<25} {'TOOK':>6}  COMMAND", bold=True))


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


def _refusals_by_call(state: StateJson) -> dict[str | None, list[RefusalJson]]:
    """The network allowlist's refusals per call running then (None: between calls)."""
    found: dict[str | None, list[RefusalJson]] = {}
    for item in views.network_refusals(state["data"]["note"]):
        found.setdefault(item["call_id"], []).append(item)
    return found


def _refused_line(item: RefusalJson, out: Output) -> str:
    when = local_time(item["at"]) if item["at"] else "?"
    where = escape.text(f"{item['host']}:{item['port']}")
    return f"       {out.style('refused:', fg='red')} network {where} at {when} (not in the allowlist)"


def _session_refusals(left: dict[str | None, list[RefusalJson]], out: Output) -> None:
    """Refusals between calls (or of calls not listed): after the calls, tied to the session."""
    items = [item for group in left.values() for item in group]
    if items:
        click.echo("network refused outside any call (during an agent session):")
        for item in items:
            click.echo(_refused_line(item, out))


def _untimed(e: EntryJson) -> str | None:
    """Why the call's TOOK may include a wait at the agent's prompt (its agent gives no tool time), or None."""
    from sandbox.agent.adapters import gemini

    ended = e["started_at"] and e["finished_at"] and e["status"] != "not_run"
    same = e["started_at"] is not None and parse_time(e["started_at"]) == parse_time(e["created_at"])
    return gemini.UNTIMED if ended and same and str(e["call_id"]).startswith(gemini.CALL_PREFIX) else None


def _row(
    run_id: str,
    e: EntryJson,
    out: Output,
    partly: list[str] | None = None,
    refused: list[RefusalJson] | None = None,
) -> None:
    """One call's lines; ``e`` is its ledger entry as JSON data (both read paths give it so)."""
    approval = e["approval"]
    asked, started = parse_time(e["created_at"]), e["started_at"]
    # The tool's own start came after the agent's permission prompt: that wait is not its TOOK.
    tool_start = parse_time(started) if started else asked
    waited = duration(asked, tool_start) if (tool_start - asked).total_seconds() >= 0.5 else ""
    untimed = _untimed(e)
    flags = "".join(
        [
            f" [waited {waited} at the agent's prompt]" if waited else "",
            f" [{untimed}]" if untimed else "",
            " [undone]" if e["undone"] else "",
            " [rolled back]" if e.get("rolled_back") else "",
            " [applied]" if e["applied"] else "",
            f" [partly applied: {', '.join(escape.path(p) for p in partly)}]" if partly else "",
            f" [denied: {escape.text(e['denial_reason'] or 'no reason')}]" if approval == "denied" else "",
        ]
    )
    commit = e["commit"][:10] if e["commit"] else "-"
    status = e["status"]
    seq = f"{e['seq']:>3}"
    click.echo(
        f"{out.style(seq, fg='yellow')}  {escape.text(e['call_id']):<18} "
        f"{out.style(f'{status:<10}', fg=STATUS_COLORS.get(status))} {escape.text(e['tool_name']):<16} "
        f"{out.style(commit, fg='yellow')}{flags}"
    )
    finished = e["finished_at"]
    # A call that never ran took no time (its finish is when the agent moved on).
    took = duration(parse_time(started), parse_time(finished)) if started and finished and status != "not_run" else ""
    when = f"{local_time(started or e['created_at']):<25} {took:>6}"
    command = command_of(e["tool_name"], e["input"], e["summary"])
    click.echo(fit(f"       {when}  {command}".rstrip(), out.width))
    error = e["error"]
    if error:
        more = f"  (in full: sandbox log {run_id} --call {e['call_id']})" if e["error_detail"] or e["error_ref"] else ""
        first = escape.text(error.strip().splitlines()[0] if error.strip() else error)  # older: multi-line
        click.echo(fit(f"       {out.style('error:', fg='red')} {first}{more}", None if more else out.width))
    for f in e["files"]:
        kind = "A" if f["before_hash"] is None else "D" if f["after_hash"] is None else "M"
        if kind == "M" and f["before_hash"] == f["after_hash"]:
            kind = "T"
        click.echo(f"       {out.style(kind, fg={'A': 'green', 'D': 'red'}.get(kind))} {escape.path(f['path'])}")
    for item in refused or []:
        click.echo(_refused_line(item, out))


def _agent_git(run: Run) -> None:
    """What the agent did with the run's own git, after the calls (only when it did something)."""
    from sandbox.fast.agentgit import read

    if run.place.legacy or not run.worktree_exists():
        return
    found = read(run.git_dir, run.run_id, run.base)
    if found is not None:
        _show_agent_git(found)


def _show_agent_git(found: AgentGitJson) -> None:
    if not views.agent_git_changed(found):
        return
    first, *rest = views.describe_agent_git(found)  # branch names and commit subjects are the agent's
    click.echo(f"agent git: {escape.text(first)}")
    for line in rest:
        click.echo(f"           {escape.text(line)}")
