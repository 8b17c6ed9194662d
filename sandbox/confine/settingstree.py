"""Where a run's recorded tree holds agent settings: a search of git's trees, kept per tree.

A run from elsewhere gets its worktree's agent settings masked for every command started on it
(:mod:`sandbox.confine.foreign`); the agents look for them where they start, and a program can start
one anywhere below the root (``sh -c 'cd pkg/sub && claude'``). The settings its author chose are in
the run's recorded tree, the tree of its head: :func:`recorded` names every path of it whose name is
one of :data:`~sandbox.confine.foreign.AGENT_SETTINGS`, and :func:`sandbox.confine.foreign.settings_paths`
masks what is there now in each of their directories and those above them.

The search reads git's trees, never the worktree's files: every subtree of the head, nothing skipped
but the inside of a path found (masked whole) and, when the run's previous head was searched, the
subtrees whose id did not change since (their paths are the previous search's). What was found is
kept in the run's directory, ``settings-found.json`` (:class:`~sandbox.models.SettingsFound`, beside
the fold's cache, read-only for the run's agent), by tree id: a launch on the same head reads it. A
head that moved (a call recorded) costs a search of the directories that changed.

Files the run's head holds that this clone's agent made after the run came here are masked too: the
head does not say who wrote a path, and a file an agent wrote there at the word of another clone's
instructions is no more trusted than the clone's own. Files nobody recorded yet (made since the head)
are masked only where the agents look from the start directory (:mod:`sandbox.confine.foreign`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from typing import TYPE_CHECKING

import pygit2
from pydantic import ValidationError

from sandbox.confine import foreign
from sandbox.confine.foreign import AGENT_SETTINGS
from sandbox.errors import CorruptionError
from sandbox.models import FORMAT_VERSION, SettingsFound, from_json, to_json
from sandbox.store import fsutil

if TYPE_CHECKING:
    from sandbox.run.core import RunCore

#: In the run's directory: what the last search found, and in which tree.
CACHE = "settings-found.json"

_NAMES = frozenset(AGENT_SETTINGS)
_TREE = 0o040000


def recorded(run: RunCore) -> list[str]:
    """The paths of the run's head tree named as an agent's project settings (relative, sorted): read
    from the run's cache when it was searched at this tree, else searched (from the tree searched
    before, when there is one) and kept."""
    head = run.state().head
    if head is None:
        return []
    try:
        tree = str(run.repo[head].peel(pygit2.Tree).id)
        path = os.path.join(run.dir, CACHE)
        before = _read(path)
        if before is not None and before.tree == tree:
            return list(before.paths)
        found = search(run.repo, tree, before)
    except (KeyError, ValueError, pygit2.GitError) as exc:  # a missing or damaged object: reported, never skipped
        raise CorruptionError(
            f"The recorded tree of run {run.run_id} cannot be read ({exc}), so where its agent settings are is not "
            "known; 'git fsck' names what is damaged."
        ) from exc
    with contextlib.suppress(OSError):  # a cache: the next launch searches again
        fsutil.atomic_write(path, to_json(SettingsFound(tree=tree, paths=found)).encode(), sync=False)
    return found


def whose(run: RunCore) -> tuple[bool | None, list[str] | None]:
    """The host's answer to a start on ``run``: whether it holds events from another clone, and then
    :func:`recorded`. Unsaid (None) when it cannot be read: a command of a run the host does not vouch for
    is masked as one from elsewhere (:mod:`sandbox.agent.hosted`), at its root and down to where it starts
    when only the tree could not be read."""
    try:
        foreign = run.state().foreign != 0
    except Exception:  # the host must outlive one bad run; its answer says nothing of it
        return None, None
    if not foreign:
        return False, None
    try:
        return True, recorded(run)
    except Exception:  # e.g. a head whose objects are missing
        return True, None


def refuse_unconfined(run: RunCore) -> None:
    """Refuse, before its start is recorded, a command started with ``--isolate off`` (the recorder asks for
    such a call only) on a run from elsewhere whose recorded tree holds agent settings there now: nothing
    could hide them (:func:`sandbox.confine.foreign.mask`). The client, which sees only where the command
    starts, learns of deeper ones from the host's answer, which came after the start was booked."""
    if not run.state().foreign:
        return
    foreign.mask(None, foreign.settings_paths(run.worktree, "", recorded(run)), run.worktree, run.run_id)


def search(repo: pygit2.Repository, tree: str, before: SettingsFound | None = None) -> list[str]:
    """Every path of ``tree`` whose name is one of :data:`AGENT_SETTINGS` (nothing inside one is looked
    at), sorted. ``before``: what a search of another tree found; its subtrees that ``tree`` holds
    unchanged (same id at the same path) are not read again."""
    old: pygit2.Tree | None = None
    if before is not None:
        with contextlib.suppress(KeyError, ValueError):
            got = repo[before.tree]
            old = got if isinstance(got, pygit2.Tree) else None
    out: list[str] = []
    _search(repo[tree].peel(pygit2.Tree), "", old, sorted(before.paths) if old is not None and before else [], out)
    return sorted(out)


def _search(tree: pygit2.Tree, prefix: str, old: pygit2.Tree | None, kept: list[str], out: list[str]) -> None:
    for entry in tree:
        name = entry.name
        if name is None:
            continue
        if name in _NAMES:
            out.append(prefix + name)  # masked whole: what is inside is not reachable
            continue
        if entry.filemode != _TREE or not isinstance(entry, pygit2.Tree):
            continue  # a file, a link, a submodule's commit: no settings below it here
        was = None
        if old is not None:
            with contextlib.suppress(KeyError):
                was = old[name]
        below = prefix + name + "/"
        if was is not None and was.id == entry.id:
            out.extend(_under(kept, below))  # the same subtree: found there before
            continue
        _search(entry, below, was if isinstance(was, pygit2.Tree) else None, kept, out)


def _under(paths: list[str], prefix: str) -> list[str]:
    """The paths of sorted ``paths`` that start with ``prefix``."""
    i = bisect.bisect_left(paths, prefix)
    out = []
    while i < len(paths) and paths[i].startswith(prefix):
        out.append(paths[i])
        i += 1
    return out


def _read(path: str) -> SettingsFound | None:
    """The cache, or None when there is none this sandbox reads (a version it does not know: searched again)."""
    try:
        with open(path, "rb") as fh:
            found = from_json(SettingsFound, fh.read())
    except (OSError, ValueError, ValidationError):
        return None
    return found if found.version == FORMAT_VERSION else None
