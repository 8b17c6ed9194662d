"""``sandbox diff``: the agent's patch, for the run, some calls, or some paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli.finding import open_run
from sandbox.cli.jsonout import emit_json
from sandbox.cli.output import OutputCommand, color_option, pager_option, setup
from sandbox.cli.selection import pathspec, run_and_pathspecs, selection_options

if TYPE_CHECKING:
    from sandbox.fast.pathspec import Pathspec
    from sandbox.merge.preview import Range
    from sandbox.run.run import Run


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@selection_options
@click.option("--stat", "stat_", is_flag=True, help="Summarise changed files instead of the full patch.")
@click.option("--no-renames", is_flag=True, help="Show a renamed file as a deletion and an addition.")
@click.option("--conflicts", is_flag=True, help="Show base, agent and yours for each path an apply would refuse.")
@click.option("--unapplied", is_flag=True, help="Show only what is not in your tree yet (after partial applies).")
@color_option
@pager_option
@click.option("--json", "as_json", is_flag=True, help="Print per-file records (with hunk ids) as JSON.")
@click.pass_context
def diff(
    ctx: click.Context,
    run_id: str | None,
    pathspecs: tuple[str, ...],
    calls: tuple[str, ...],
    paths: tuple[str, ...],
    excludes: tuple[str, ...],
    stat_: bool,
    no_renames: bool,
    conflicts: bool,
    unapplied: bool,
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """Show the agent's patch against the base snapshot (or the patch of some calls with --call).

    PATHSPEC (git pathspecs, ':!PATH' to leave out) limits it to some paths. With --json every
    file and hunk carries the stable id that 'sandbox apply --hunks-from' takes. Paged and
    coloured as git does it (GIT_PAGER, core.pager, PAGER; --color, color.diff, NO_COLOR);
    renames are detected unless --no-renames. --unapplied leaves out what is in your tree already:
    whole files, and the hunks a partial apply took.
    """
    if conflicts and unapplied:
        raise click.UsageError("Give --conflicts or --unapplied, not both.")
    if conflicts:
        from sandbox.cli.conflicts import show_conflicts

        show_conflicts(ctx, run_id, calls, color, no_color, no_pager, as_json)
        return
    from sandbox.merge.preview import diff_files, diff_text, preview_range

    run_id, pathspecs = run_and_pathspecs(ctx, run_id, pathspecs)
    run = open_run(ctx, run_id)
    spec = pathspec(ctx, run.user_workdir, pathspecs + paths, excludes, run.worktree)
    rng = preview_range(run, calls=list(calls))
    if unapplied:
        _unapplied(ctx, run, rng, spec, stat_, color, no_color, no_pager, as_json)
        return
    if as_json:
        emit_json(
            {
                "run": run.run_id,
                "call_id": rng.call_id,
                "calls": rng.calls,
                "from": rng.old,
                "to": rng.new,
                "files": diff_files(run, rng, spec),
            }
        )
        return
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    text = diff_text(run, rng, stat=stat_, color=out.color, spec=spec, renames=not no_renames)
    out.page()
    click.echo(out.content(text) if text else "No changes.", nl=not text.endswith("\n") if text else True)


def _unapplied(
    ctx: click.Context,
    run: Run,
    rng: Range,
    spec: Pathspec | None,
    stat_: bool,
    color: str | None,
    no_color: bool,
    no_pager: bool,
    as_json: bool,
) -> None:
    """``diff --unapplied``: the files and hunks not in the user's tree yet."""
    from sandbox.cli import escape
    from sandbox.merge.leftover import unapplied
    from sandbox.merge.preview import diff_files

    files = diff_files(run, rng, spec)
    rest = unapplied(run, files)
    if as_json:
        payload = {"run": run.run_id, "call_id": rng.call_id, "calls": rng.calls, "from": rng.old, "to": rng.new}
        emit_json({**payload, "unapplied": True, "files": rest})
        return
    if not rest:
        click.echo(f"Nothing left: every change of run {run.run_id} is in your tree.")
        return
    out = setup(ctx, color, no_color, slot="diff", no_pager=no_pager)
    whole = {f["path"]: len(f["hunks"]) for f in files}
    partly = {f["path"] for f in rest if all(f is not g for g in files)}  # a record rebuilt: some hunks left
    from sandbox.merge.leftover import rename_patch, renames

    moved = renames(rest)
    by_path = {f["path"]: f for f in rest}
    shown: list[tuple[str, str, str]] = []  # (name as stat shows it, path, patch)
    for f in rest:
        if f["path"] in moved:
            new = by_path[moved[f["path"]]]
            shown.append(
                (f"{escape.path(f['path'])} => {escape.path(new['path'])}", new["path"], rename_patch(run, f, new))
            )
        elif f["renamed_from"] is None or f["renamed_from"] not in moved:
            shown.append((escape.path(f["path"]), f["path"], f["patch"]))
    if stat_:
        for name, path, patch in shown:
            lines = patch.splitlines()
            added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
            removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
            part = (
                f" (partly applied: {len(by_path[path]['hunks'])} hunk(s) left of {whole[path]})"
                if path in partly
                else ""
            )
            click.echo(f" {name} | +{added} -{removed}{part}")
        click.echo(f" {len(shown)} file(s) not in your tree yet")
        return
    out.page()
    styles = (("diff --git", {"bold": True}), ("@@", {"fg": "cyan"}), ("+", {"fg": "green"}), ("-", {"fg": "red"}))
    for _name, _path, patch in shown:
        for line in patch.splitlines():
            style = next((s for prefix, s in styles if line.startswith(prefix)), None)
            text = out.content(line)  # the agent's text, escaped when it goes straight to a terminal
            click.echo(out.style(text, **style) if style and not line.startswith(("---", "+++")) else text)
