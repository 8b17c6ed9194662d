"""Finding what a command acts on: the repository (``-C``), the data directory, the run and the call."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import click

from sandbox.cli.machine import data_root as data_root  # read from here by the commands

if TYPE_CHECKING:
    from sandbox.fast.foldcache import Repository
    from sandbox.run.run import Run
    from sandbox.store.project import Project


def base_dir(ctx: click.Context) -> str:
    """The directory the command works from (``-C DIR`` or the current directory)."""
    root = ctx.find_root()
    directory = root.obj.get("directory") if root.obj else None
    return os.path.abspath(directory or os.getcwd())


def open_project(ctx: click.Context) -> tuple[Project, str | None, str | None]:
    """The project around the working directory: (project, user workdir, run id of cwd).

    The project gets the data root new runs are placed under (see :func:`data_root`).
    """
    from sandbox.store.project import Project

    # GIT_DIR / GIT_WORK_TREE name the repository and tree as they do for git (the library reads no environment).
    git_dir, work_tree = os.environ.get("GIT_DIR") or None, os.environ.get("GIT_WORK_TREE") or None
    project, workdir, cwd_run = Project.discover(base_dir(ctx), git_dir=git_dir, work_tree=work_tree)
    project.data_root = data_root(workdir or main_workdir(project.common_dir))
    return project, workdir, cwd_run


def fast_open(ctx: click.Context, run_id: str | None) -> tuple[Repository, str] | None:
    """The repository and the id of the run named (or the one we are in) as the fast read path
    finds them (:mod:`sandbox.fast.foldcache`); None when it cannot: take the full path."""
    from sandbox.cli.fastshow import fast_open as find

    return find(base_dir(ctx), run_id)


def main_workdir(common_dir: str) -> str | None:
    """The main working tree of a repository whose common git dir is ``common_dir`` (None: bare)."""
    return os.path.dirname(common_dir) if os.path.basename(common_dir) == ".git" else None


def open_run(ctx: click.Context, run_id: str | None, report_problems: bool = True) -> Run:
    """The run named on the command line, or the one whose worktree we are in.

    Its ledger is read (and verified) here, so derived state that did not match the ledger is
    reported, one line each, before the command works from the rebuilt state.
    """
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run

    project, _workdir, cwd_run = open_project(ctx)
    run = Run.open(project, resolve_run(project, run_id, cwd_run))
    if not report_problems:
        run.load()
        seal_when_done(run)
        return run
    return verified(run)


def seal_when_done(run: Run) -> None:
    """Leave the run's fold cache at the ledger's tip when the command ends (see :func:`verified`)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(lambda: _seal(run))


def _seal(run: Run) -> None:
    from sandbox.errors import SandboxError

    # Only a cache: a run dropped, damaged or unwritable meanwhile keeps the one it has.
    with contextlib.suppress(SandboxError, OSError):
        run.seal_cache()


def ensure_worktree(run: Run) -> str | None:
    """Make the run's worktree here when it has none in this repository (a fetched run); the line
    to show, or None (see :mod:`sandbox.runs.materialize`)."""
    from sandbox.runs.materialize import ensure

    return ensure(run)


def run_then(run_id: str | None, other: str | None, metavar: str) -> tuple[str | None, str]:
    """``[RUN] X`` arguments: with one word it is X, and the run is the one we are in (or the only one).

    Declare both arguments optional (``run_id`` first); click alone fills the first one first.
    """
    if other is not None:
        return run_id, other
    if run_id is None:
        raise click.UsageError(f"Missing argument '{metavar}'.")
    return None, run_id


def open_call(ctx: click.Context, run_id: str | None, call: str) -> tuple[Run, str]:
    """The run named (or the one we are in) and the id of its call ``call`` names (see sandbox.run.names)."""
    from sandbox.run.names import resolve_call_id

    run = open_run(ctx, run_id)
    return run, resolve_call_id(run, call)


def verified(run: Run) -> Run:
    """``run`` with its ledger read and verified; what did not match is printed, one line each.

    When the command ends, the run's fold cache is left at the ledger's tip, so the next ``list``,
    ``status``, ``log`` or ``path`` reads it without git or pydantic (:mod:`sandbox.fast.foldcache`).
    """
    run.load()
    seal_when_done(run)
    for problem in run.problems:
        click.echo(f"sandbox: {problem}", err=True)
    return run
