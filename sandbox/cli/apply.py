"""``sandbox apply``: bring the agent's changes into your tree, never over an edit of yours."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_project, verified
from sandbox.cli.jsonout import dump, emit_json, renamed
from sandbox.cli.output import OutputCommand
from sandbox.cli.selection import pathspec, run_and_pathspecs, selection_options
from sandbox.cli.which import say_which

if TYPE_CHECKING:
    from sandbox.models import ApplyReport
    from sandbox.store.project import Project


def print_report(report: ApplyReport, verb: str) -> None:
    """The human form of an apply, undo or redo report."""
    if report.recovered:
        click.echo(f"Run {report.run}: {report.recovered} in {report.target_dir}.")
    where = "your tree" if report.target == "user" else "the run's worktree"
    done = "Would write" if report.dry_run else verb
    # Only paths the operation wrote are listed as written: a refused one lists none.
    restored = "Would restore" if report.dry_run else "Restored"
    wrote = report.would_apply if report.dry_run else report.applied
    for written, label, gone in ((wrote, done, "deleted"), (report.restored, restored, "removed")):
        if written:
            click.echo(f"{label} {len(written)} path(s) in {where}:")
            for path in written:
                note = f"  ({report.reasons[path]})" if path in report.reasons else ""
                if not note and not report.dry_run and not os.path.lexists(os.path.join(report.target_dir, path)):
                    note = f"  ({gone})"  # written as absent: the agent deleted it, or it was not there before
                click.echo(f"  {escape.path(path)}{note}")
    # Paths already as the agent left them (an earlier apply wrote them) are counted, not listed again
    # after every partial apply; other skips say why, one by one.
    already = [p for p in report.skipped if report.reasons.get(p) == "already applied"]
    for path in report.skipped:
        if path not in already:
            click.echo(f"  skipped {escape.path(path)}: {report.reasons.get(path, 'already there')}")
    if already:
        shown = escape.path(already[0]) + (f" and {len(already) - 1} more" if len(already) > 1 else "")
        click.echo(f"  {len(already)} path(s) already applied in {where} ({shown}); --json lists them.")
    if report.partial and not report.dry_run:
        click.echo(
            f"Partly applied: 'sandbox diff {report.run} --unapplied' shows the rest; 'sandbox undo' takes back "
            "exactly these hunks."
        )
    if report.attention:
        click.echo(f"Needs attention (conflict markers): {', '.join(escape.path(p) for p in report.attention)}")
    if report.head_moved:
        click.echo("Note: your HEAD moved since the run started; paths were checked against your current files.")
    if report.conflicts:
        from sandbox.cli.output import setup

        out = setup(click.get_current_context(), page=False)
        click.echo(out.style("Conflicts (nothing was written):", fg="red", bold=True))
        for c in report.conflicts:
            click.echo(f"  {out.style(escape.path(c.path), fg='red')}: {c.reason}")
            versions = (("base", c.base), ("agent", c.agent), ("yours", c.user))
            click.echo("    " + "  ".join(f"{k} {out.style((v or 'absent')[:12], fg='yellow')}" for k, v in versions))
            click.echo(f"    what to do: {c.hint}")
    if not (wrote or report.restored or report.skipped or report.conflicts or report.recovered):
        click.echo("Nothing to do.")


def finish(report: ApplyReport, verb: str, as_json: bool, extra: Mapping[str, object] | None = None) -> None:
    """Print a report as JSON or text."""
    if as_json:
        emit_json({**renamed(dump(report)), **(extra or {})})
    else:
        print_report(report, verb)


@click.command(cls=OutputCommand)
@click.argument("run_id", required=False)
@selection_options
@click.option("--with-deps", is_flag=True, help="Also take the earlier calls the selected ones build on.")
@click.option("--hunks", "ask_hunks", is_flag=True, help="Choose hunk by hunk on the terminal (like git add -p).")
@click.option(
    "--hunks-from",
    "hunks_from",
    type=click.File("r"),
    default=None,
    help="Take only these hunk ids (from 'diff --json').",
)
@click.option("--dry-run", is_flag=True, help="Report what would happen; write nothing.")
@click.option(
    "--3way",
    "three_way",
    is_flag=True,
    help="Write conflict markers into text files both sides changed (with --hunks: only where a chosen hunk does).",
)
@click.option("--allow-moved-head", is_flag=True, help="Apply even though your HEAD moved since the run started.")
@click.option("--continue", "cont", is_flag=True, help="Finish an interrupted apply, undo or redo.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def apply(
    ctx: click.Context,
    run_id: str | None,
    pathspecs: tuple[str, ...],
    calls: tuple[str, ...],
    paths: tuple[str, ...],
    excludes: tuple[str, ...],
    with_deps: bool,
    ask_hunks: bool,
    hunks_from: TextIO | None,
    dry_run: bool,
    three_way: bool,
    allow_moved_head: bool,
    cont: bool,
    as_json: bool,
) -> None:
    """Apply RUN's changes to your working tree where your files still equal what the agent started from.

    PATHSPEC (git pathspecs: paths, globs, ':!PATH' to leave out) and --call (ids, log numbers,
    ranges A..B) select what to take; --hunks chooses hunk by hunk. Any conflict writes nothing and
    exits 1. Applying twice is a no-op; an interrupted apply is finished by --continue or rolled
    back by 'sandbox undo'.
    """
    from sandbox.merge import mergeback
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.store import journal

    run_id, pathspecs = run_and_pathspecs(ctx, run_id, pathspecs)
    project, workdir, cwd_run = open_project(ctx)
    run_id = run_id or cwd_run or journal.pending_run_id(project, workdir)
    if cont:
        if calls or paths or pathspecs or excludes or dry_run or three_way or ask_hunks or hunks_from or with_deps:
            raise click.UsageError("--continue takes no other options.")
        _continue(project, workdir, run_id, cwd_run, as_json)
        return
    if ask_hunks and hunks_from:
        raise click.UsageError("Give either --hunks (on the terminal) or --hunks-from FILE, not both.")
    run = verified(Run.open(project, resolve_run(project, run_id, cwd_run)))
    say_which(run, run_id)
    spec = pathspec(ctx, run.user_workdir, pathspecs + paths, excludes, run.worktree)
    choice = None
    if hunks_from is not None:
        from sandbox.merge import hunks

        choice = hunks.Choice(ids=hunks.read_ids(hunks_from.read()))
    from sandbox.cli.output import Progress

    shown = Progress.choose(None, as_json, delayed=True)
    try:
        if ask_hunks:
            from sandbox.cli.hunkprompt import choose

            choice = choose(run, list(calls) or None, spec, with_deps)
            if choice is None:
                click.echo("No hunk chosen; nothing was written.")
                return
        report = mergeback.apply(
            run,
            list(calls) or None,
            spec,
            dry_run=dry_run,
            three_way=three_way,
            allow_moved_head=allow_moved_head,
            with_deps=with_deps,
            choice=choice,
            progress=shown.callback,
        )
    except mergeback.ApplyConflict as exc:
        shown.done()
        finish(exc.report, "Applied", as_json)
        click.echo(f"sandbox: {escape.text(exc.message)}", err=True)
        ctx.exit(1)
    finally:
        shown.done()
    finish(report, "Applied", as_json)
    if report.attention:
        ctx.exit(1)


def _continue(project: Project, workdir: str | None, run_id: str | None, cwd_run: str | None, as_json: bool) -> None:
    """``apply --continue``: finish the interrupted apply, undo or redo of RUN (or of this tree)."""
    from sandbox.merge import writing
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run

    dirs = [workdir] if workdir and not run_id else []
    if run_id:
        opened = Run.open(project, resolve_run(project, run_id, cwd_run))
        dirs = [opened.user_workdir, opened.worktree]
    reports = [r for d in dirs if (r := writing.continue_pending(project, d)) is not None]
    if not reports:
        click.echo("Nothing to continue: no interrupted apply, undo or redo is pending.")
    for report in reports:
        finish(report, "Wrote", as_json)
