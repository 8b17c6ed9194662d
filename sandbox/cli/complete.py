"""Shell completion of names: run ids and labels for RUN, call ids for CALL (``sandbox completion``).

Completion is click's: the shell calls ``sandbox`` with ``_SANDBOX_COMPLETE=<shell>_complete`` and
the words typed so far, and click asks each parameter. The lazy group gives every ``RUN`` argument
:func:`complete_runs` and every ``CALL`` argument or ``--call`` option :func:`complete_calls`
(:func:`sandbox.cli.group.shared_options`), so a new command gets them by naming its parameters
``run_id`` and ``call_id`` / ``calls``. Completion never fails loudly: outside a repository it
offers nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


def _directory(ctx: click.Context) -> str:
    # While completing, the group's own callback has not run: -C before the subcommand is only in
    # the root context's parameters; a -C after it went through its callback (relative to the root's).
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    directory = obj.get("directory") or root.params.get("directory")
    return os.path.abspath(directory or os.getcwd())


def complete_runs(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Run ids (with their label as help) and labels that start with ``incomplete``."""
    from click.shell_completion import CompletionItem

    if ctx.meta.get("sandbox.command_started"):
        return []  # after exec's or run's '--': the command's own words

    from sandbox.errors import SandboxError
    from sandbox.run.names import run_labels
    from sandbox.store.project import Project

    try:
        project, _workdir, _cwd_run = Project.discover(_directory(ctx))
        ids = project.run_ids()
        labels = run_labels(project, ids)
    except (SandboxError, OSError):
        return []
    items = [CompletionItem(rid, help=labels.get(rid)) for rid in ids if rid.startswith(incomplete)]
    items += [CompletionItem(label, help=f"run {rid}") for rid, label in labels.items() if label.startswith(incomplete)]
    return items


def complete_calls(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Call ids of the run named before (or the one we are in), newest first, with seq and tool as help."""
    from click.shell_completion import CompletionItem

    from sandbox.errors import SandboxError
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    try:
        project, _workdir, cwd_run = Project.discover(_directory(ctx))
        given = ctx.params.get("run_id")
        run = Run.open(project, resolve_run(project, given if isinstance(given, str) and given else None, cwd_run))
        entries = run.entries()
    except (SandboxError, OSError):
        return []
    return [
        CompletionItem(e.call_id, help=f"#{e.seq} {e.tool_name} {e.status.value}")
        for e in reversed(entries)
        if e.call_id.startswith(incomplete) or (incomplete.isdigit() and str(e.seq).startswith(incomplete))
    ]
