"""What every command started on a run from another clone does not see: the worktree's agent settings.

A run holding anything another clone wrote (an event whose MAC does not verify here: fetched, pushed
into this repository, a copied ``.git``) has a worktree whoever wrote it chose, the agents' project
settings among it: Claude Code's ``.claude/`` (its hooks, permissions, commands) and ``.mcp.json`` (MCP
servers it starts), Gemini CLI's ``.gemini/`` (hooks, MCP servers), Codex's ``.codex/`` (its project
``config.toml``), and ``.env``, which Gemini CLI loads into its own environment in a folder it trusts
(the sandbox trusts the run's worktree for it): every shell command it runs then inherits whatever the
file says (``BASH_ENV``, ``LD_PRELOAD``, ``NODE_OPTIONS``: a program of the file's choosing). Each makes
an agent run programs as soon as it starts or runs a command, without the model asking.
So for every command started on such a run, whatever program it is (``sandbox run RUN -- claude``, a
wrapper ``./my-claude.sh`` that calls it, ``sandbox exec RUN -- anything``, a ``run_command`` of the
MCP server, a compensation), the confinement masks those that exist (:data:`AGENT_SETTINGS`, at the
worktree's root and in each directory down to where the command starts, where the agents look for
them): an empty read-only directory or file inside, the worktree's own files untouched. Unconfined
nothing could hide them, so such a command is refused under ``--isolate off``.

Deeper in the tree, where a program gets by ``cd`` first (``sh -c 'cd pkg/sub && claude'``, a wrapper
script), the masks follow the run's recorded tree instead of a walk of the worktree: every path of the
run's head tree whose name is one of :data:`AGENT_SETTINGS` (``recorded``, found in git's trees by
:mod:`sandbox.confine.settingstree`, cached per tree, and passed here by the caller: the host's answer on
``sandbox exec``'s fast path) adds its directory, and each one above it, to those looked in. A launch
costs an ``lstat`` per name and directory so named, whatever the size of the tree.

Not masked: the instructions files (``CLAUDE.md``, ``GEMINI.md``, ``AGENTS.md``). The agents read them as
text for the model, as they read any file of the worktree; no agent runs a program they name. A tool
of the project's own that reads ``.env`` finds it empty on such a run too (``sandbox adopt`` a run you
trust entirely).

The one list of those paths, and the one rule: :func:`for_foreign_run`. Whether a run is foreign is the
caller's to say (the fold counts such events; the repository's host says so in its answer to a start).
Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Sequence

from sandbox.confine.policy import ConfinementError, Isolation

#: The worktree's paths the agents load settings from that make them run programs (hooks, MCP
#: servers): masked inside for every command started on a run from elsewhere. The one list.
AGENT_SETTINGS = (".claude", ".mcp.json", ".gemini", ".codex", ".env")


class ForeignSettingsError(ConfinementError):
    """A command on a run from elsewhere would see the worktree's agent settings: unconfined, or through a link."""


def settings_paths(worktree: str, subdir: str = "", recorded: Sequence[str] = ()) -> list[str]:
    """The :data:`AGENT_SETTINGS` that exist in ``worktree``, at its root and in each directory of
    ``subdir`` (where the command starts) below it, as the confinement masks them (where they lead);
    and, for each path of ``recorded`` (the run's recorded tree's settings, deeper ones among them:
    :func:`sandbox.confine.settingstree.recorded`), in its directory and each one above it.

    One that leads out of the worktree through a link is refused: the masks are made where a path
    leads, and a program inside would follow the link to settings the mask does not cover."""
    root = os.path.realpath(worktree)
    folders = dict.fromkeys(_down_to(root, subdir))
    for rel in sorted(recorded):
        folders.update(dict.fromkeys(_down_to(root, rel.rpartition("/")[0])))
    out: list[str] = []
    for folder in folders:
        for name in AGENT_SETTINGS:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            real = os.path.realpath(path)
            if not real.startswith(root + os.sep):
                raise ForeignSettingsError(
                    f"The run's worktree has {os.path.relpath(path, root)} as a link out of it, where an agent "
                    "would read settings this clone did not write; remove the link, then start the command again."
                )
            if stat.S_ISLNK(st.st_mode) and not os.path.exists(real):
                continue  # leads nowhere yet: nothing to read
            if real not in out:
                out.append(real)
    # One inside another is hidden with it (and could not be masked inside the empty one).
    found = set(out)
    return [p for p in out if not any(above in found for above in _above(p, root))]


def _above(path: str, root: str) -> list[str]:
    """The directories between ``root`` and ``path`` (both left out)."""
    out = []
    parent = os.path.dirname(path)
    while parent != root and len(parent) > len(root):
        out.append(parent)
        parent = os.path.dirname(parent)
    return out


def _down_to(root: str, subdir: str) -> list[str]:
    """``root`` and each directory of ``subdir`` below it (``.`` and ``..`` taken for nothing: a tree's
    names never hold them, and a folder above the root is none of the worktree's)."""
    folders = [root]
    for part in subdir.split("/"):
        if part not in ("", ".", ".."):
            folders.append(os.path.join(folders[-1], part))
    return folders


def shown(worktree: str, paths: list[str]) -> str:
    """The masked paths as the user names them in the worktree (``.claude/, .mcp.json``)."""
    root = os.path.realpath(worktree)
    return ", ".join(os.path.relpath(p, root) + ("/" if os.path.isdir(p) else "") for p in paths)


def for_foreign_run(
    isolation: Isolation | None, worktree: str, subdir: str, run_id: str, recorded: Sequence[str] = ()
) -> tuple[Isolation | None, list[str]]:
    """``isolation`` for a command started in ``subdir`` of the worktree of ``run_id``, a run from elsewhere:
    with its agent settings masked (:func:`settings_paths`, with the ``recorded`` ones of its tree, then
    :func:`mask`); and the paths masked."""
    paths = settings_paths(worktree, subdir, recorded)
    return mask(isolation, paths, worktree, run_id), paths


def mask(isolation: Isolation | None, paths: list[str], worktree: str, run_id: str) -> Isolation | None:
    """``isolation`` with ``paths`` (:func:`settings_paths` of a run from elsewhere) masked inside.

    Refused in one sentence when there is something to mask and no sandbox of ours to mask it in
    (``--isolate off``; None: the caller confines nothing). Inside a sandbox of ours (``inherited``: an
    agent's own ``sandbox exec``) the enclosing one, started on the same run, already masks them."""
    if not paths or (isolation is not None and isolation.inherited):
        return isolation
    if isolation is None or not isolation.enabled:
        raise ForeignSettingsError(
            f"Run {run_id} holds work from another clone, and its worktree's agent settings "
            f"({shown(worktree, paths)}) are kept from the commands started on it only inside the sandbox; "
            "run it without '--isolate off'."
        )
    return dataclasses.replace(isolation, masked=(*isolation.masked, *paths))


def said(worktree: str, paths: list[str], run_id: str, where: str = "from another clone") -> str:
    """The one line that tells the user what a command on a run from elsewhere does not see."""
    verb = "is" if len(paths) == 1 else "are"
    return (
        f"run {run_id} holds work {where}: its worktree's agent settings are not loaded ({shown(worktree, paths)} "
        f"{verb} empty inside the sandbox)."
    )
