"""A plan checked whole before its journal is written: malformed input never half-applies.

Apply, undo and redo write a tree path by path, journaled (:func:`sandbox.merge.writing.execute`).
A bad entry found while writing stops the operation after some paths were written; so every entry
is checked here first, and the first bad one refuses the whole operation with nothing written:

* the path passes git's own checks (:mod:`sandbox.store.gitpath`: ``..``, absolute, ``.git`` and
  the names NTFS and HFS+ take for it, a symlink named ``.gitmodules``);
* what is written is a file (100644), an executable (100755) or a symlink (120000), never a gitlink
  or a tree, and its object is in the object store and is a blob;
* no entry is written below a path the same plan makes a file or a symlink: the writes would go
  through the new symlink (out of the tree) or fail half-way on the new file (removals below it
  are fine: they run first, so a directory can become a file).

What the user's tree holds (a symlinked directory, a file in the way) is
:mod:`sandbox.merge.obstacles`'s, decided while planning.
"""

from __future__ import annotations

from collections.abc import Sequence

import pygit2

from sandbox.errors import PathRefusedError
from sandbox.models import JournalEntry
from sandbox.store import gitpath, objects

#: The modes the sandbox writes into a tree.
WRITABLE_MODES = frozenset({objects.MODE_FILE, objects.MODE_EXEC, objects.MODE_LINK})


class PlanRefusedError(PathRefusedError):
    """An entry of the plan cannot be written; nothing was. The message names the first bad entry."""


def _refuse(path: str, why: str) -> PlanRefusedError:
    return PlanRefusedError(f"Refused before writing anything: the path {path!r} {why}; nothing was written.")


def _blob(repo: pygit2.Repository, path: str, oid: str) -> None:
    try:
        # Read and checked whole (and found in a pending pack too): libgit2 would hang on a truncated
        # loose object; the write reads it next anyway.
        kind, _data = objects.read_object(repo, oid)
    except (KeyError, ValueError, pygit2.GitError):
        raise _refuse(path, f"would be written from object {oid[:12]}, which is missing or damaged") from None
    if kind != pygit2.enums.ObjectType.BLOB:
        raise _refuse(path, f"would be written from object {oid[:12]}, which is not a file's contents")


def check(repo: pygit2.Repository, entries: Sequence[JournalEntry]) -> None:
    """Raise :class:`PlanRefusedError` for the first entry of ``entries`` that cannot be written.

    ``entries`` are the planned per-path changes (the journal's entries, before the journal exists).
    """
    made: dict[str, int] = {}
    seen: set[str] = set()
    for e in entries:
        why = gitpath.refusal(e.path, e.after_mode)
        if why is not None:
            raise _refuse(e.path, why)
        if e.path in seen:
            raise _refuse(e.path, "is planned twice")
        seen.add(e.path)
        if (e.after_mode is None) != (e.after_oid is None):
            raise _refuse(e.path, "has a mode without an object, or an object without a mode")
        if e.after_mode is not None and e.after_oid is not None:
            if e.after_mode not in WRITABLE_MODES:
                kind = {objects.MODE_GITLINK: "a submodule (gitlink)", objects.MODE_TREE: "a directory (tree)"}
                raise _refuse(e.path, f"would be written as {kind.get(e.after_mode, f'mode {e.after_mode:o}')}")
            _blob(repo, e.path, e.after_oid)
            made[e.path] = e.after_mode
    for e in entries:
        if e.after_mode is None:
            continue  # removals run first (journal.play): a directory may become a file
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in made:
                what = "a symlink" if made[above] == objects.MODE_LINK else "a file"
                raise _refuse(e.path, f"is below {above!r}, which the same operation makes {what}")
