"""Git's content conversions: what ``git add`` stores for a file, and what checkout writes for a blob.

A working tree's bytes and the blob git stores for them differ when ``core.autocrlf``,
``core.eol`` or ``.gitattributes`` (``text``, ``eol``, ``ident``, ``filter``) say so. The sandbox
compares and records *blobs*, so wherever it reads a file it must first convert it as ``git add``
would ("clean"), and wherever it writes one, as checkout would ("smudge"): otherwise a CRLF
checkout is recorded as every line changed and an untouched file conflicts on apply.

* Built-in conversions (end of lines, ``ident``) run in-process with libgit2's filter lists,
  which read the same attributes and config as git (the working tree's ``.gitattributes``, the
  repository's ``info/attributes`` and config). Measured: ~0.15 ms per path to learn that nothing
  applies, microseconds to convert.
* Filter drivers (``filter=<name>`` with ``filter.<name>.clean``/``smudge``/``process`` in the
  config, e.g. git-lfs) are run by git itself, because libgit2 knows none of them:
  ``git hash-object -w --path`` cleans and ``git cat-file --filters --path`` smudges, ~3 ms per
  file, paid only for such paths.

A :class:`Converter` belongs to one working tree (the user's, or a run's worktree): conversions
use that tree's attributes, as git does for its own checkout and ``add``. Paths for which no
conversion applies cost one filter-list lookup and are otherwise untouched (the hot path).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import FilterMode
from pygit2.filter import FilterList

from sandbox.errors import SandboxError
from sandbox.store import agentread, gitfiles, objects
from sandbox.store.gitcli import git
from sandbox.store.journal import Probe, State
from sandbox.store.objects import MODE_EXEC, MODE_FILE, Entry

if TYPE_CHECKING:
    from sandbox.store.preread import Reader
    from sandbox.store.rulemirror import RuleMirror

_REGULAR = (MODE_FILE, MODE_EXEC)


class _Live:
    """Reads now (:mod:`sandbox.store.agentread`); :mod:`sandbox.store.preread` is not loaded for apply."""

    readlink = staticmethod(agentread.readlink)
    read_file = staticmethod(agentread.read_file)


_LIVE = _Live()


class ConversionError(SandboxError):
    """A filter driver the repository requires failed; nothing was recorded or written for the path."""


class Converter:
    """Clean and smudge files of one working tree the way git would."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self._repo: pygit2.Repository | None = None
        self._opened = False
        #: The bytes on disk behind a cleaned probe: (path, cleaned entry) -> entry of the raw bytes.
        self._raw: dict[tuple[str, Entry], Entry] = {}
        self._user_repo: pygit2.Repository | None = None
        #: (common dir, run) of a run's worktree with a home (its Git LFS storage: sandbox.store.lfsstore).
        self._run: tuple[str, str] | None = None
        #: (common dir, run) of any run's worktree, a run made before homes included.
        self._located: tuple[str, str] | None = None
        #: A run's worktree: the host's copies of its attribute rules (sandbox.store.rulemirror).
        self._mirror: RuleMirror | None = None

    @property
    def repo(self) -> pygit2.Repository | None:
        """The working tree's repository (None when it cannot be opened: then nothing is converted)."""
        if not self._opened and not gitfiles.repository_plain(self.workdir):
            return None  # a FIFO where libgit2 reads: opening would hang (sandbox.store.gitfiles)
        if not self._opened:
            self._opened = True
            try:
                self._repo = pygit2.Repository(self.workdir)
            except pygit2.GitError:
                self._repo = None
        return self._repo

    def _trusted(self) -> pygit2.Repository | None:
        """For a run's worktree, the user's repository: filter drivers run with its config only.

        The run's own git dir is the agent's to write: a ``filter.<name>.clean`` it configured
        there would otherwise be run by this (unconfined) process. None for the user's own tree.
        """
        if self._user_repo is None:
            from sandbox.store import layout

            loc = layout.locate(self.workdir)
            if loc is not None and not layout.place_of(loc.common_dir, loc.run_id).legacy:
                self._run = (loc.common_dir, loc.run_id)
            if loc is not None:
                self._located = (loc.common_dir, loc.run_id)
                try:
                    self._user_repo = pygit2.Repository(loc.common_dir)
                except pygit2.GitError:
                    raise ConversionError(
                        f"Cannot open the repository of the run at {self.workdir}; nothing was converted."
                    ) from None
        return self._user_repo

    # -- what applies ---------------------------------------------------------------------------

    def _plain(self, rel: str) -> bool:
        """True when the files libgit2 reads to know what applies to ``rel`` are plain files.

        Checked on every lookup, not once: the agent may plant a FIFO in a run's worktree or git
        dir at any time, and this converter lives as long as the host (:mod:`sandbox.store.gitfiles`).
        Where one is not, no conversion applies, as git ignores a ``.gitattributes`` it cannot read.
        """
        return gitfiles.repository_plain(self.workdir, gitfiles.ATTRIBUTE_FILES) and gitfiles.path_rules_plain(
            self.workdir, rel, (".gitattributes",)
        )

    def _mirrored(self, rel: str) -> RuleMirror | None:
        """For a run's worktree (the agent's to write), the host's mirror of its attribute rules, synced for
        ``rel`` (:mod:`sandbox.store.rulemirror`: libgit2 and git open none of the agent's files by name);
        None for another tree. OSError when the worktree is gone."""
        if self._trusted() is None or self._located is None:
            return None
        if self._mirror is None:
            from sandbox.store import rulemirror  # not on apply's start

            self._mirror = rulemirror.for_run(*self._located, self.workdir)
        self._mirror.for_path(rel, ".gitattributes")
        return self._mirror

    def _rules(self, rel: str) -> pygit2.Repository | None:
        """The repository whose attribute rules (and config) decide what applies to ``rel``: a run's
        worktree's mirror (:meth:`_mirrored`); another tree's own repository, checked first."""
        try:
            mirror = self._mirrored(rel)
        except OSError:  # the worktree is gone: nothing to convert
            return None
        if mirror is not None:
            return mirror.repo
        repo = self.repo
        return repo if repo is not None and self._plain(rel) else None

    def _driver(self, rel: str, repo: pygit2.Repository | None) -> bool:
        """True when a configured filter driver applies to ``rel`` (git must run it); ``repo``: :meth:`_rules`."""
        if repo is None:
            return False
        try:
            name = repo.get_attr(rel, "filter")
        except (pygit2.GitError, ValueError):
            return False
        if not isinstance(name, str) or not name:
            return False
        config = repo.config
        return any(f"filter.{name}.{key}" in config for key in ("clean", "smudge", "process"))

    def _filters(self, rel: str, mode: FilterMode, repo: pygit2.Repository | None) -> FilterList | None:
        if repo is None:
            return None
        try:
            return repo.load_filter_list(rel, mode)
        except (pygit2.GitError, ValueError):
            return None

    def applies(self, rel: str) -> bool:
        """True when git would convert ``rel`` between the working tree and the object store."""
        rules = self._rules(rel)  # read once: for a run, the rule files along rel are read anew each time
        return self._driver(rel, rules) or self._filters(rel, FilterMode.TO_ODB, rules) is not None

    # -- clean: working tree -> blob ------------------------------------------------------------

    def _git(self, repo: pygit2.Repository | None, rel: str, args: list[str], data: bytes | None = None) -> bytes:
        """Run a filter driver through git on this tree, against ``repo``'s object store and config.

        A run's worktree has a git dir of its own (objects through alternates); a driver run there
        would keep what it stores (git-lfs's content) in the run's git dir, where a later smudge in
        the user's tree cannot find it. So drivers run against the user's repository, with this
        tree's attributes.

        Not in a run's worktree itself: git and git-lfs read its ``.gitattributes`` and ``.lfsconfig``
        by name, and the agent, writing there while the host records, can swap one for a FIFO after
        any check (the driver then blocks for ever: measured). They run in a work tree of the host's
        holding copies of the ``.gitattributes``, read by descriptor (:meth:`_work_tree`).
        """
        store = getattr(repo, "sandbox_store", None)  # a run's repository: what a smudge may need is there
        if repo is None:
            repo = self._trusted()
        options, env = self._lfs(store)
        tree = self._work_tree(rel)
        where = ["--git-dir", repo.path, "--work-tree", tree] if repo is not None else []
        proc = git([*options, *where, *args], cwd=tree, env=env, input=data, check=False)
        if proc.returncode != 0:
            what = "clean" if args[0] == "hash-object" else "smudge"
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            raise ConversionError(
                f"The {what} filter for {rel!r} failed ({detail[-1] if detail else proc.returncode}); "
                "fix the filter driver in your git config, then try again."
            )
        return proc.stdout

    def _work_tree(self, rel: str) -> str:
        """The work tree a driver for ``rel`` runs in: this tree, or for a run's worktree (the agent's to
        write) the root of the host's mirror of its rules, holding copies of the ``.gitattributes`` along
        ``rel``'s path, each read beneath the worktree by descriptor (:meth:`_mirrored`); one that is not a
        regular file is left out, as git leaves out a symlinked ``.gitattributes``.

        The agent's ``.lfsconfig`` is not copied: git-lfs reads it with ``git config --includes``, which
        opens whatever path an ``[include]`` names, a FIFO in the worktree included (the host's clean
        blocked for ever: measured). Offline, none of its keys git-lfs honours changes what a clean
        stores; git-lfs reads your repository's own (your index's ``.lfsconfig``) instead."""
        mirror = self._mirrored(rel)
        return self.workdir if mirror is None else mirror.root

    def _lfs(self, store: str | None) -> tuple[list[str], dict[str, str]]:
        """Where git-lfs stores and finds contents for a driver run here (:mod:`sandbox.store.lfsstore`): a
        run's worktree, the run's own storage (never your ``.git/lfs``, which every run reads); your tree,
        your storage, finding a run's contents beside its ``store`` (an apply links them into yours)."""
        from sandbox.store import lfsstore  # only for a filter driver's path: not on apply's start

        if self._trusted() is not None and self._run is not None:
            return lfsstore.driver(*self._run)
        return [], lfsstore.reference_env(store) if store is not None else {}

    def clean(self, rel: str, data: bytes, repo: pygit2.Repository | None = None) -> bytes:
        """The blob content ``git add`` would store for ``data`` at ``rel`` (``repo``: the object store)."""
        rules = self._rules(rel)
        if self._driver(rel, rules):
            oid = self._git(repo, rel, ["hash-object", "-w", f"--path={rel}", "--stdin"], data).decode().strip()
            store = repo if repo is not None else self._trusted() or self.repo
            assert store is not None
            return objects.read_blob(store, oid)
        filters = self._filters(rel, FilterMode.TO_ODB, rules)
        return filters.apply_to_buffer(data) if filters is not None else data

    def read_file(
        self,
        rel: str,
        root: int,
        st: os.stat_result,
        repo: pygit2.Repository,
        limit: int | None = None,
        reader: Reader | None = None,
    ) -> tuple[Entry, bytes] | None:
        """The entry ``git add`` would store for the file or symlink ``rel`` beneath the directory
        descriptor ``root`` (None: a FIFO, socket or directory), with the blob's bytes.

        Read once, through a checked descriptor (:mod:`sandbox.store.agentread`: no link followed, a
        bounded read; ``reader`` may have read it already, see :mod:`sandbox.store.preread`); then
        cleaned where a conversion applies.
        """
        mode = objects.mode_of(st)
        if mode is None or mode == objects.MODE_TREE:
            return None
        if mode == objects.MODE_LINK:
            target = (reader or _LIVE).readlink(root, rel)
            return Entry(mode, str(pygit2.hash(target))), target
        bound = agentread.DEFAULT_LIMIT if limit is None else limit
        blob = (reader or _LIVE).read_file(root, rel, st, limit=bound)
        mode = objects.mode_of(blob.st) or mode
        if not self.applies(rel):
            return Entry(mode, blob.oid), blob.data
        data = self.clean(rel, blob.data, repo)
        return Entry(mode, str(pygit2.hash(data))), data

    def clean_probe(self, root: str, rel: str, probe: Probe) -> Probe:
        """``probe`` of a file at ``rel`` below ``root``, its entry the cleaned blob (raw one remembered)."""
        if probe.kind != "file" or probe.entry is None or not self.applies(rel):
            return probe
        try:
            fd = agentread.open_root(root)
        except OSError:
            return probe
        try:
            data = agentread.read_file(fd, rel).data
        except (OSError, agentread.AgentReadError):
            return probe
        finally:
            os.close(fd)
        cleaned = Entry(probe.entry.mode, str(pygit2.hash(self.clean(rel, data))))
        self._raw[(rel, cleaned)] = probe.entry
        return dataclasses.replace(probe, entry=cleaned)

    def on_disk(self, rel: str, state: State) -> State:
        """The raw state on disk behind a state :meth:`clean_probe` returned (for journals)."""
        if state is None:
            return None
        return self._raw.get((rel, state), state)

    def clean_bytes(self, rel: str, data: bytes) -> bytes:
        """``data`` read from ``rel`` in this tree, as a blob (for merges)."""
        return self.clean(rel, data) if self.applies(rel) else data

    # -- smudge: blob -> working tree -----------------------------------------------------------

    def smudge(self, rel: str, oid: str, repo: pygit2.Repository) -> bytes:
        """What checkout would write at ``rel`` for the blob ``oid``."""
        rules = self._rules(rel)
        if self._driver(rel, rules):
            return self._git(repo, rel, ["cat-file", "--filters", f"--path={rel}", oid])
        data = objects.read_blob(repo, oid)
        filters = self._filters(rel, FilterMode.TO_WORKTREE, rules)
        if filters is None:
            return data
        own = self.repo
        assert own is not None
        blob = own.get(oid)
        out: bytes = filters.apply_to_blob(blob) if isinstance(blob, pygit2.Blob) else filters.apply_to_buffer(data)
        return out

    def to_disk(self, rel: str, state: State, repo: pygit2.Repository) -> State:
        """The state to write at ``rel`` for the blob state ``state``: its smudged bytes, stored as a blob.

        Identity (the same state) where no conversion applies. The smudged blob is stored so that a
        journal can name it and an interrupted write can be finished from it.
        """
        if state is None or state.mode not in _REGULAR or not self.applies(rel):
            return state
        data = self.smudge(rel, state.oid, repo)
        if str(pygit2.hash(data)) == state.oid:
            return state
        objects.enable_fsync()  # a journal will name this blob: it must survive a crash
        smudged = Entry(state.mode, objects.write_blob(repo, data))
        self._raw[(rel, state)] = smudged
        return smudged


_CONVERTERS: dict[str, Converter] = {}
_GUARD = threading.Lock()


def for_tree(workdir: str) -> Converter:
    """The process's converter for one working tree."""
    key = os.path.realpath(workdir)
    with _GUARD:
        conv = _CONVERTERS.get(key)
        if conv is None:
            conv = _CONVERTERS[key] = Converter(key)
        return conv
