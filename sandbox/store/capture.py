"""Turning the paths a call may have touched into exact file changes against the run's head.

Given candidate paths (from the write helpers, a watcher or a scan), each is compared by content
hash with the run's head tree. Directories are expanded (a created, deleted or moved directory
yields every file in it). Paths inside ``.git``, ignored paths the head does not track, the
sandbox's own temp files, and nested repositories are never captured. Files are hashed as
``git add`` would store them (:mod:`sandbox.store.convert`). The cost follows the number of candidates,
not the size of the repository.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

import pygit2

from sandbox.errors import SandboxError
from sandbox.store import agentread, convert, objects, sparse
from sandbox.store.fsutil import TEMP_PREFIX
from sandbox.store.objects import Entry
from sandbox.store.preread import LIVE, Reader

SYNC_NAME = ".sandbox-sync"

#: The deepest path recorded, in directories. Capture, tree edits and tree diffs go one Python
#: frame per level, and an agent may nest directories deeper than Python recurses (measured: 1,500
#: levels ended a recording in a RecursionError and left the call in flight). libgit2's status,
#: the scan's fallback, stops at 100 levels.
MAX_DEPTH = 256


class TooDeepError(SandboxError):
    """A changed path is nested deeper than :data:`MAX_DEPTH` directories: nothing was recorded."""


def skip(rel: str) -> bool:
    """True for a path capture never records (in a ``.git``, the sandbox's temp or sync files)."""
    for part in rel.split("/"):
        if part.lower() == ".git" or part.startswith(TEMP_PREFIX) or part.startswith(SYNC_NAME):
            return True
    return False


class CallTooLargeError(SandboxError):
    """A call added more to the worktree than ``max_call_size`` allows; nothing of it was stored."""

    exit_code = 1


class Capturer:
    """Compares worktree paths with a head tree and collects the differences."""

    #: Bytes of new or changed files a call may add (None: not bounded); see ``max_call_size``.
    max_bytes: int | None = None
    #: The largest file read into memory (None: agentread's default); see ``max_read_size``.
    max_read: int | None = None
    added: int = 0

    def __init__(
        self,
        repo: pygit2.Repository,
        worktree: str,
        head_tree: str | None,
        is_ignored: Callable[[str], bool] | None = None,
        is_private: Callable[[str], bool] | None = None,
        reader: Reader = LIVE,
    ) -> None:
        self.repo = repo
        self.worktree = worktree
        self.head_tree = head_tree
        self.is_ignored = is_ignored
        #: Paths never captured, tracked or not (the run's private list).
        self.is_private = is_private
        self.changes: dict[str, Entry | None] = {}
        self.before: dict[str, Entry | None] = {}
        self._tree_cache: dict[str, Entry | None] = {}
        self._seen: set[str] = set()
        self.convert = convert.for_tree(worktree)
        self._sparse: dict[str, Entry] | None = None
        self._nested: dict[str, bool] = {}
        #: The directories left out because they hold a repository of their own (the agent's ``git init``).
        self.nested: set[str] = set()
        #: The worktree's descriptor: every path is opened beneath it (:meth:`close` lets it go).
        self.root = agentread.open_root(worktree)
        #: Reads the agent's files, or answers from what was read before (:mod:`sandbox.store.preread`).
        self.fs = reader

    def close(self) -> None:
        """Let go of the worktree's descriptor (idempotent)."""
        if self.root >= 0:
            os.close(self.root)
            self.root = -1

    def head_entry(self, rel: str) -> Entry | None:
        """The head tree's entry at ``rel`` (None: absent), cached."""
        if rel not in self._tree_cache:
            self._tree_cache[rel] = objects.lookup(self.repo, self.head_tree, rel)
        return self._tree_cache[rel]

    def _tracked_under(self, rel: str) -> Iterable[tuple[str, Entry]]:
        entry = self.head_entry(rel)
        if entry is None:
            return []
        if entry.is_tree:
            return objects.walk_tree(self.repo, entry.oid, rel + "/")
        return [(rel, entry)]

    def add(self, rel: str) -> None:
        """Compare one path (file, link, directory or absent) with the head and record differences."""
        if not rel or skip(rel) or rel in self._seen:
            return
        if rel.count("/") >= MAX_DEPTH:
            shown = "/".join(rel.split("/")[:3])
            raise TooDeepError(
                f"The worktree has a path nested deeper than {MAX_DEPTH} directories ({shown}/...); "
                "nothing of this call was recorded. Remove or flatten it in the worktree, then record again."
            )
        if self.is_private is not None and self.is_private(rel):
            return
        self._seen.add(rel)
        # Every look at the agent's files goes through a descriptor of the worktree, following no
        # link (sandbox.store.agentread): a name swapped for a link to a secret outside is refused.
        st = self.fs.lstat(self.root, rel)
        head: Entry | None = self.head_entry(rel)
        if head is not None and head.mode == objects.MODE_GITLINK:
            return  # a submodule: recorded only as its gitlink, which agents' file writes never change
        if self._under_gitlink(rel) or self._in_nested_repository(rel):
            return
        if st is None:
            for path, old_entry in self._tracked_under(rel):
                if not self._not_checked_out(path, old_entry):
                    self._record(path, old_entry, None)
            return
        if stat.S_ISDIR(st.st_mode):
            self._add_dir(rel, head)
            return
        if head is None and self.is_ignored is not None and self.is_ignored(rel):
            return
        # Hashed as `git add` would store it (end of lines, ident, filters): a CRLF checkout of an
        # LF blob is not a change (sandbox.store.convert). Read once, bounded, from a checked descriptor.
        read = self.convert.read_file(rel, self.root, st, self.repo, self.max_read, self.fs)
        if read is None:
            return  # a fifo or socket: git stores neither
        entry, data = read
        if head is not None and head.is_tree:
            for path, old in self._tracked_under(rel):
                self._record(path, old, None)
            head = None
        if head is None or head != entry:
            self.added += len(data)
            if self.max_bytes is not None and self.added > self.max_bytes:
                # Checked before the blob is stored: a runaway call costs no object store space.
                raise CallTooLargeError(
                    f"it adds more than max_call_size = {self.max_bytes} bytes ([isolation] in .sandbox.toml) "
                    f"to the worktree (at {rel})"
                )
            self._record(rel, head, Entry(entry.mode, objects.write_blob(self.repo, data)))

    def _add_dir(self, rel: str, head: Entry | None) -> None:
        if self.fs.lstat(self.root, rel + "/.git") is not None:
            self.nested.add(rel)
            return  # a nested repository or submodule: its gitlink stays as it is
        if head is not None and not head.is_tree:
            self._record(rel, head, None)
        on_disk = set()
        try:
            names = self.fs.listdir(self.root, rel)
        except (OSError, agentread.AgentReadError):
            names = []
        for name in names:
            on_disk.add(name)
            self.add(rel + "/" + name)
        if head is not None and head.is_tree:
            for name in objects.read_tree(self.repo, head.oid):
                if name not in on_disk:
                    self.add(rel + "/" + name)

    def _not_checked_out(self, rel: str, head: Entry) -> bool:
        """True for a path the worktree's sparse checkout leaves out, unchanged since: absent, not deleted."""
        if self._sparse is None:
            self._sparse = sparse.excluded(self.worktree) if sparse.may_be_sparse(self.worktree) else {}
        return self._sparse.get(rel) == head

    def _in_nested_repository(self, rel: str) -> bool:
        """True for a path below a directory the head does not track that holds a ``.git`` (the agent's
        ``git init sub``, staged or not): it is recorded as nothing, like the directory itself
        (:meth:`_add_dir`), whichever of its paths a watcher names. Its ``.git`` is never read."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in self._nested:
                head = self.head_entry(parent)
                tracked = head is not None and head.is_tree
                self._nested[parent] = not tracked and self.fs.lstat(self.root, parent + "/.git") is not None
            if self._nested[parent]:
                self.nested.add(parent)
                return True
        return False

    def _under_gitlink(self, rel: str) -> bool:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            entry = self.head_entry("/".join(parts[:i]))
            if entry is None or not entry.is_tree:
                return entry is not None and entry.mode == objects.MODE_GITLINK
        return False

    def _record(self, rel: str, before: Entry | None, after: Entry | None) -> None:
        if before == after:
            return
        self.before[rel] = before
        self.changes[rel] = after


def capture(
    repo: pygit2.Repository,
    worktree: str,
    head_tree: str | None,
    paths: Iterable[str],
    is_ignored: Callable[[str], bool] | None = None,
    is_private: Callable[[str], bool] | None = None,
    max_bytes: int | None = None,
    max_read: int | None = None,
    reader: Reader = LIVE,
) -> Capturer:
    """Compare every candidate path (and, for a missing path, its parents' fate) with the head.

    Raises :class:`CallTooLargeError` once new or changed files add up to more than ``max_bytes``,
    and :class:`sandbox.store.agentread.AgentReadError` for a file that cannot be read safely (over
    ``max_read`` bytes, swapped while opened, too slow): nothing of the call is recorded then.
    ``reader``: what was read before (:mod:`sandbox.store.preread`), else the files are read now.
    """
    cap = Capturer(repo, worktree, head_tree, is_ignored, is_private, reader)
    cap.max_bytes = max_bytes
    cap.max_read = max_read
    try:
        for rel in sorted(set(paths)):
            cap.add(rel)
            # A path whose parent became a file or vanished, or a directory where the head has a file
            # (``rm f; mkdir f``): check the parents too, so the file's removal is recorded with it.
            parts = rel.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                st = cap.fs.lstat(cap.root, parent)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    cap.add(parent)
                    break
                was = cap.head_entry(parent)
                if was is not None and not was.is_tree:
                    cap.add(parent)
                    break
    finally:
        cap.close()
    return cap
