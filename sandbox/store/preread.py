"""Reading a call's files before its recording takes the host's shared lock.

The repository's host records every run through one repository object, so recording holds one
lock all runs need (:mod:`sandbox.agent.host`). Reading the agent's files is the part of a
recording whose cost the agent chooses: a sparse file of 4 GiB is hashed for seconds, a thousand of
them for an hour, and a scan of a worktree the agent filled takes as long as its size. So the
recording first reads, here, every file :mod:`sandbox.store.capture` will look at, holding only the
run's own lock; then it takes the shared lock and captures from what was read
(:class:`Preread` has the functions of :mod:`sandbox.store.agentread` that capture calls, answered
from what it read; anything it did not foresee is read then, as before).

The walk follows capture's: each candidate path, a directory's entries (not below a nested
repository, nor a private, ignored or sandbox-owned path), and the parents of a path that are no
longer directories. Every read goes through :mod:`sandbox.store.agentread` (checked descriptors,
bounded, a deadline each); what fails is kept and raised again when capture reaches the path, so
a file capture would skip (ignored, under a gitlink) costs its read here but fails nothing.
What is read is a snapshot of the moment of the read: a file changed between here and the
capture is recorded as it was read, as if the call had ended a moment sooner.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

from sandbox.store import agentread

_Failure = OSError | agentread.AgentReadError
#: The most content (bytes) a pre-read keeps in memory for one call.
BUDGET = 256 * 1024 * 1024


class Reader:
    """How capture reads the agent's files: through :mod:`sandbox.store.agentread`, now."""

    def lstat(self, root: int, rel: str) -> os.stat_result | None:
        """:func:`sandbox.store.agentread.lstat`."""
        return agentread.lstat(root, rel)

    def listdir(self, root: int, rel: str) -> list[str]:
        """:func:`sandbox.store.agentread.listdir`."""
        return agentread.listdir(root, rel)

    def readlink(self, root: int, rel: str) -> bytes:
        """:func:`sandbox.store.agentread.readlink`."""
        return agentread.readlink(root, rel)

    def read_file(
        self,
        root: int,
        rel: str,
        seen: os.stat_result | None = None,
        *,
        limit: int = agentread.DEFAULT_LIMIT,
        deadline: float = agentread.DEFAULT_DEADLINE,
    ) -> agentread.Blob:
        """:func:`sandbox.store.agentread.read_file`."""
        return agentread.read_file(root, rel, seen, limit=limit, deadline=deadline)


#: The reader of a capture that read nothing before.
LIVE = Reader()


class Preread(Reader):
    """What a capture will read beneath ``worktree``, read now (see the module docstring)."""

    def __init__(
        self,
        worktree: str,
        *,
        limit: int | None = None,
        skip: Callable[[str], bool] | None = None,
        is_ignored: Callable[[str], bool] | None = None,
        max_depth: int = 256,
    ) -> None:
        self.limit = agentread.DEFAULT_LIMIT if limit is None else limit
        self.skip = skip
        self.is_ignored = is_ignored
        self.max_depth = max_depth
        #: Bytes of content kept for the capture: past ``budget``, files are left to it (read under
        #: the shared lock, as before) rather than held in memory all at once.
        self.kept = 0
        self.budget = BUDGET
        self.stats: dict[str, os.stat_result | None] = {}
        self.names: dict[str, list[str] | _Failure] = {}
        self.blobs: dict[str, agentread.Blob | _Failure] = {}
        self.links: dict[str, bytes | _Failure] = {}
        self._root = agentread.open_root(worktree)

    def close(self) -> None:
        """Let go of the worktree's descriptor (idempotent); what was read stays."""
        if self._root >= 0:
            os.close(self._root)
            self._root = -1

    # -- the walk -----------------------------------------------------------------------------

    def fill(self, paths: Iterable[str]) -> None:
        """Read every path of ``paths`` as capture will look at it, and the parents that changed kind."""
        try:
            for rel in sorted(set(paths)):
                self._visit(rel)
                parts = rel.split("/")
                for i in range(1, len(parts)):
                    parent = "/".join(parts[:i])
                    st = self._lstat(parent)
                    if st is None or not stat.S_ISDIR(st.st_mode):
                        self._visit(parent)
                        break
        finally:
            self.close()

    def _lstat(self, rel: str) -> os.stat_result | None:
        if rel not in self.stats:
            self.stats[rel] = agentread.lstat(self._root, rel)
        return self.stats[rel]

    def _visit(self, rel: str, listed: bool = False) -> None:
        if not rel or rel in self.blobs or rel in self.links or rel in self.names:
            return
        if rel.count("/") >= self.max_depth or (self.skip is not None and self.skip(rel)):
            return  # capture refuses or skips it before reading anything
        st = self._lstat(rel)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            if self._lstat(rel + "/.git") is not None:
                return  # a nested repository: capture keeps its gitlink and reads nothing in it
            try:
                names: list[str] | _Failure = agentread.listdir(self._root, rel)
            except (OSError, agentread.AgentReadError) as exc:
                names = exc
            self.names[rel] = names
            for name in names if isinstance(names, list) else []:
                self._visit(rel + "/" + name, listed=True)
        elif stat.S_ISLNK(st.st_mode):
            try:
                self.links[rel] = agentread.readlink(self._root, rel)
            except (OSError, agentread.AgentReadError) as exc:
                self.links[rel] = exc
        elif self.kept >= self.budget:
            return  # what is kept in memory is bounded: the rest is read by the capture itself
        elif stat.S_ISREG(st.st_mode) and not (listed and self.is_ignored is not None and self.is_ignored(rel)):
            # Ignored files are asked about only in a directory's listing (a new node_modules is not read
            # whole); the few paths a call names are read without asking (capture may want them tracked).
            try:
                blob = agentread.read_file(self._root, rel, st, limit=self.limit)
            except (OSError, agentread.AgentReadError) as exc:
                self.blobs[rel] = exc
            else:
                self.blobs[rel] = blob
                self.kept += len(blob.data)

    # -- answered to capture, as agentread would ----------------------------------------------

    def lstat(self, root: int, rel: str) -> os.stat_result | None:
        """:func:`sandbox.store.agentread.lstat`, as it was when read."""
        if rel in self.stats:
            return self.stats[rel]
        return agentread.lstat(root, rel)

    def listdir(self, root: int, rel: str) -> list[str]:
        """:func:`sandbox.store.agentread.listdir`, as it was when read."""
        found = self.names.get(rel)
        if found is None:
            return agentread.listdir(root, rel)
        if isinstance(found, list):
            return list(found)
        raise found

    def readlink(self, root: int, rel: str) -> bytes:
        """:func:`sandbox.store.agentread.readlink`, as it was when read."""
        found = self.links.get(rel)
        if found is None:
            return agentread.readlink(root, rel)
        if isinstance(found, bytes):
            return found
        raise found

    def read_file(
        self,
        root: int,
        rel: str,
        seen: os.stat_result | None = None,
        *,
        limit: int = agentread.DEFAULT_LIMIT,
        deadline: float = agentread.DEFAULT_DEADLINE,
    ) -> agentread.Blob:
        """:func:`sandbox.store.agentread.read_file`, as it was when read (the same file, same bound)."""
        found = self.blobs.get(rel)
        if found is None or limit != self.limit or (seen is not None and seen is not self.stats.get(rel)):
            return agentread.read_file(root, rel, seen, limit=limit, deadline=deadline)
        if isinstance(found, agentread.Blob):
            return found
        raise found
