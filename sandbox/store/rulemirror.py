"""The ignore and attribute rules of a run's worktree, as libgit2 reads them, from the host's own copies.

libgit2 opens the ``.gitignore`` and ``.gitattributes`` along a path, and the git dir's ``info/exclude``
and ``info/attributes``, by name. In a run's worktree and git dir those are the agent's to write, while
the host records: a check before libgit2's open (:mod:`sandbox.store.gitfiles`) is a race the agent can
win, by swapping the file for a FIFO between the two. Measured: a confined loop renaming a FIFO and a plain
file over ``.gitattributes`` in turn made the next recording of another call of the run block in libgit2's
``open`` for ever, holding the GIL, on the first try.

A :class:`RuleMirror` is a repository of the host's, one per process, in the run's own directory
(``<common>/sandbox/runs/<run>/rules/<pid>.<random>``: the sandbox's, read-only or hidden inside; removed
with the mirror, one left by a killed process by the next mirror made, all with the run). Before each lookup
the rule files that apply to the path are read beneath the worktree by descriptor
(:mod:`sandbox.store.agentread`: no link followed, a FIFO never waited for, a regular file only, bounded)
and written into the mirror where they changed; libgit2 opens only the mirror's files. A rule file that is
not a plain file counts as absent, as git leaves out a symlinked ``.gitattributes``. The mirror's config
includes the run's own (the sandbox's file, read-only inside) and git's global and system files, as the
run's git reads them; its index is empty, so a rule file staged in the agent's index but gone from its
worktree does not apply (git would fall back to it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import weakref

import pygit2

from sandbox.store import agentread

#: The most of one rule file copied (git's own bound for attribute files is 100 MB).
LIMIT = 100 * 1024 * 1024
#: The rule files of each kind: per directory in the worktree, and the git dir's own.
RULES = {".gitignore": "info/exclude", ".gitattributes": "info/attributes"}


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class RuleMirror:
    """The host's copy of the rule files of one worktree, and the libgit2 repository that reads them."""

    def __init__(self, worktree: str, git_dir: str, config: str, home: str) -> None:
        self.worktree = worktree
        self.git_dir = git_dir
        os.makedirs(home, exist_ok=True)
        _sweep(home)
        self.root = tempfile.mkdtemp(prefix=f"{os.getpid()}.", dir=home)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.root, True)
        dot = os.path.join(self.root, ".git")
        for sub in ("objects", "refs", "info"):
            os.makedirs(os.path.join(dot, sub))
        with open(os.path.join(dot, "HEAD"), "w", encoding="utf-8") as fh:
            fh.write("ref: refs/heads/rules\n")
        with open(os.path.join(dot, "config"), "w", encoding="utf-8") as fh:
            fh.write(f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n[include]\n\tpath = {_quoted(config)}\n")
        self.repo = pygit2.Repository(self.root)
        #: What each copy holds (relative to the mirror's root), so that an unchanged file is not written.
        self._held: dict[str, bytes] = {}
        #: One sync at a time: a converter is shared by the host's threads (sandbox.store.convert.for_tree).
        self._lock = threading.Lock()

    def for_path(self, rel: str, kind: str) -> pygit2.Repository:
        """The mirror, its ``kind`` rules (``.gitignore`` or ``.gitattributes``) for ``rel`` as they are now."""
        with self._lock:
            return self._for_path(rel, kind)

    def _for_path(self, rel: str, kind: str) -> pygit2.Repository:
        parts = [p for p in rel.split("/") if p][:-1]
        names = ["/".join([*parts[:i], kind]) for i in range(len(parts) + 1)]
        root = agentread.open_root(self.worktree)
        try:
            for name in names:
                self._sync(name, _read(root, name))
        finally:
            os.close(root)
        info = RULES[kind]
        try:
            git_root = agentread.open_root(self.git_dir)
        except OSError:
            self._sync(f".git/{info}", None)
        else:
            try:
                self._sync(f".git/{info}", _read(git_root, info))
            finally:
                os.close(git_root)
        return self.repo

    def _sync(self, name: str, data: bytes | None) -> None:
        if self._held.get(name) == data:
            return
        path = os.path.join(self.root, name)
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self._held.pop(name, None)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # A new file each time (a new inode): libgit2 keeps a rule file it has read until its stamp changes.
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "wb") as fh:
            fh.write(data)
        os.replace(temp, path)
        self._held[name] = data

    def close(self) -> None:
        """Remove the mirror's directory (also done when the mirror is collected)."""
        self._finalizer()


def for_run(common_dir: str, run_id: str, worktree: str) -> RuleMirror:
    """A mirror of the rules of the run's ``worktree``, made in ``rules`` of the run's own directory. Its
    git dir's ``info/`` files and config are the run's own; a run made before homes (a linked worktree of
    yours) reads yours, as git does for it."""
    from sandbox.store import layout

    place = layout.place_of(common_dir, run_id)
    git_dir = common_dir if place.legacy else place.git_dir
    home = os.path.join(layout.run_dir(common_dir, run_id), "rules")
    return RuleMirror(worktree, git_dir, os.path.join(git_dir, "config"), home)


def _sweep(home: str) -> None:
    """Remove the mirrors of processes that are gone (killed before they could remove their own)."""
    for name in os.listdir(home):
        pid = name.split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(home, name), ignore_errors=True)
        except OSError:
            continue  # alive, someone else's


def _read(root: int, rel: str) -> bytes | None:
    try:
        return agentread.read_file(root, rel, limit=LIMIT).data
    except (OSError, agentread.AgentReadError):
        return None
