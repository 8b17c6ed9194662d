"""``sandbox conflicts``: why an apply would refuse each path, with base, agent and yours side by side."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import Output, OutputCommand, color_option, pager_option, setup

if TYPE_CHECKING:
    from sandbox.merge.conflicts import Conflict, Side


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@click.option("--call", "calls", multiple=True, help="Only as applying this call would (repeatable).")
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print the conflicts as JSON.")
@click.pass_context
def conflicts(
    ctx: click.Context,
    run_id: str | None,
    calls: tuple[str, ...],
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """Explain each path 'sandbox apply RUN' would refuse: base, agent and yours, diff3 style.

    Writes nothing. The markers are those 'sandbox apply --3way' writes (yours, base, agent).
    """
    show_conflicts(ctx, run_id, calls, color, no_color, no_pager, as_json)


def show_conflicts(
    ctx: click.Context,
    run_id: str | None,
    calls: tuple[str, ...],
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """The body of ``sandbox conflicts`` (and of ``sandbox diff --conflicts``)."""
    from sandbox.merge.conflicts import explain
    from sandbox.merge.planning import NothingToApplyError
    from sandbox.run.names import resolve_call_id

    run = open_run(ctx, run_id)
    try:
        found = explain(run, [resolve_call_id(run, c) for c in calls] or None)
    except NothingToApplyError:
        found = []  # nothing to apply: nothing can conflict
    if as_json:
        emit_json({"run": run.run_id, "conflicts": [c.to_json() for c in found]})
        return
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    if not found:
        click.echo(f"No conflicts: 'sandbox apply {run.run_id}' would not refuse any path.")
        return
    out.page()
    for c in found:
        render(out, c)
    click.echo(
        f"{len(found)} path(s) conflict. Merge by hand, 'sandbox apply {run.run_id} --3way' to write these "
        "markers into your files, or leave the paths out."
    )


def render(out: Output, c: Conflict) -> None:
    """One conflict: the reason, the three versions, and where they disagree."""
    click.echo(out.style(f"CONFLICT {escape.path(c.path)}", fg="red", bold=True) + f": {escape.text(c.reason)}")
    for side in (c.base, c.agent, c.yours):
        oid = (side.oid or "-")[:12]
        extra = f"  (call {', '.join(c.calls)})" if side.label == "agent" and c.calls else ""
        click.echo(f"  {side.label:<6} {out.style(f'{oid:<12}', fg='yellow')}  {side.describe()}{extra}")
    if c.hint:
        click.echo(f"  what to do: {escape.text(c.hint)}")
    if c.regions:
        section = ""
        for region in c.regions:
            click.echo(out.style(f"@@ your line {region.line} @@", fg="cyan"))
            for line in region.lines:
                if line in ("<<<<<<< yours", "||||||| base", "=======", ">>>>>>> agent"):
                    section = {"<<<<<<< yours": "yours", "||||||| base": "base", "=======": "agent"}.get(line, "")
                    click.echo(out.style(line, bold=True))
                else:
                    fg = {"yours": "green", "base": None, "agent": "yellow"}.get(section)
                    shown = out.content(line)
                    click.echo(out.style(shown, fg=fg, dim=section == "base") if section else shown)
    elif not c.obstacle:
        for side in (c.agent, c.yours):
            _side_diff(out, c.base, side, c.path)
    click.echo()


def _side_diff(out: Output, base: Side, side: Side, path: str) -> None:
    """base -> side as a unified diff, when both are text (or one is absent)."""
    if not ((base.text or base.mode is None) and (side.text or side.mode is None)) or base.oid == side.oid:
        return
    old = (base.data or b"").decode(errors="replace").splitlines(keepends=True)
    new = (side.data or b"").decode(errors="replace").splitlines(keepends=True)
    for line in difflib.unified_diff(old, new, f"base/{path}", f"{side.label}/{path}"):
        line = out.content(line.rstrip("\n"))
        fg = "green" if line.startswith("+") else "red" if line.startswith("-") else None
        if line.startswith(("+++", "---")):
            fg = None
        click.echo(out.style(line, fg="cyan") if line.startswith("@@") else out.style(line, fg=fg) if fg else line)
