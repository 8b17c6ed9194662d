"""Options that select what to take from a run, shared by ``apply`` and ``diff``: pathspecs and calls."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from sandbox.fast.pathspec import Pathspec

F = TypeVar("F", bound=Callable[..., Any])


def selection_options(func: F) -> F:
    """``PATHSPEC...``, ``--path``, ``--exclude`` and ``--call`` (repeatable, ranges ``A..B``)."""
    for decorator in reversed(
        [
            click.argument("pathspecs", nargs=-1),
            click.option(
                "--call",
                "calls",
                multiple=True,
                help="Only this call (id, id prefix or log number), or a range A..B in ledger order (repeatable).",
            ),
            click.option(
                "--path",
                "paths",
                multiple=True,
                help="Only paths matching this git pathspec (repeatable; ':!PATH' excludes).",
            ),
            click.option(
                "--exclude", "excludes", multiple=True, help="Leave out paths matching this pathspec (repeatable)."
            ),
        ]
    ):
        func = decorator(func)
    return func


def run_and_pathspecs(
    ctx: click.Context, run_id: str | None, pathspecs: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    """RUN may be left out before pathspecs (the run of the worktree you are in, or the only run):
    what click took for RUN is a pathspec when it came after ``--``, or when it names no run and
    reads as a path (``:!tests``, ``src/*.py``, a path that exists here)."""
    from sandbox.cli.output import AFTER_DASHDASH

    if run_id is None:
        return None, pathspecs
    after = ctx.meta.get(AFTER_DASHDASH, ())
    if after and after[0] == run_id and len(after) == len(pathspecs) + 1:
        return None, (run_id, *pathspecs)
    looks_like_path = run_id.startswith(":") or any(ch in run_id for ch in "*?[/")
    if not looks_like_path:
        from sandbox.cli.finding import base_dir

        looks_like_path = os.path.lexists(os.path.join(base_dir(ctx), run_id))
    if not looks_like_path:
        return run_id, pathspecs
    from sandbox.cli.finding import open_project
    from sandbox.errors import UnknownRunError
    from sandbox.run.names import resolve_run

    project, _workdir, cwd_run = open_project(ctx)
    try:
        resolve_run(project, run_id, cwd_run)
    except UnknownRunError:
        return None, (run_id, *pathspecs)
    return run_id, pathspecs


def pathspec(
    ctx: click.Context, root: str, specs: tuple[str, ...], excludes: tuple[str, ...], worktree: str | None = None
) -> Pathspec | None:
    """The pathspec of the command line, relative to the current directory when it lies in ``root``
    (the user's tree) or in ``worktree`` (the run's, whose paths are the same).

    As in git, a pathspec is relative to the directory the command runs in (``:/`` or ``:(top)``
    for the top of the tree); with ``-C DIR`` that directory is the top.
    """
    from sandbox.merge.select import pathspec as build
    from sandbox.store import paths as pathmod

    prefix = ""
    if ctx.find_root().obj.get("directory") is None:
        cwd = os.path.realpath(os.getcwd())
        # The run's worktree may lie inside the user's tree (under .git): the innermost top wins.
        tops = sorted((os.path.realpath(t) for t in (root, worktree) if t), key=len, reverse=True)
        for top in tops:
            if cwd != top and cwd.startswith(top.rstrip("/") + "/"):
                prefix = os.path.relpath(cwd, top).replace(os.sep, "/")
                break

    def absolute(spec: str) -> str:
        # An absolute path inside the tree, as git takes it: the literal path from the top.
        return ":(top,literal)" + pathmod.from_user(root, spec) if os.path.isabs(spec) else spec

    return build([absolute(s) for s in specs], [absolute(s) for s in excludes], prefix)
