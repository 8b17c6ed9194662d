"""The user's repository, as the sandbox sees it: its runs and where they live.

Every path and name comes from :mod:`sandbox.store.layout` (the one place that owns them): the run's
scratch directory and refs are in the user's repository, its worktree and own git directory in its
home (a per-user data directory keyed by repository).
"""

from __future__ import annotations

import contextlib
import os

import pygit2

from sandbox.errors import NotARepositoryError, SandboxError
from sandbox.store import layout, repository


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


class NoWorkingTreeError(SandboxError):
    """No working tree of this repository could be found for a command that writes one."""


class Project:
    """A user's repository: its common git dir, its sandbox state dir and its runs.

    ``data_root`` is the per-user data directory new runs get their home in (the CLI passes
    ``$XDG_DATA_HOME/sandbox`` or the ``data_dir`` of ``.sandbox.toml``); without one, homes are
    made under ``<common>/sandbox/homes``. Existing runs are found wherever they are.
    """

    def __init__(self, common_dir: str, data_root: str | None = None) -> None:
        self.common_dir = os.path.realpath(common_dir)
        self._run_repos: dict[str, pygit2.Repository] = {}
        try:
            self.repo = repository.open_repository(self.common_dir)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"{common_dir} is not a git repository ({exc}).") from exc
        # Every live run's store (sandbox.store.runstore): libgit2 follows a relative alternate only in the
        # repository's own file, not in the hub's, so they are added here.
        self._stores_seen: set[str] = set()
        for store in sorted(layout.listed_stores(self.common_dir)):
            self._see_store(store)
        self.data_root = data_root
        self.state_dir = layout.state_dir(self.common_dir)
        self.runs_dir = layout.runs_dir(self.common_dir)
        #: Where runs made before homes existed keep their linked worktrees.
        self.worktrees_dir = layout.legacy_worktrees_dir(self.common_dir)
        self.locks_dir = layout.locks_dir(self.common_dir)
        #: The user's working tree the command runs in (set by :meth:`discover`; None inside a run's
        #: worktree or when made from a git dir): what apply, undo and redo write to.
        self.workdir: str | None = None

    @property
    def homes_dir(self) -> str:
        """Where new runs of this repository get their home."""
        if self.data_root:
            return layout.homes_dir(self.data_root, self.common_dir)
        return layout.fallback_homes_dir(self.common_dir)

    # -- discovery -----------------------------------------------------------------------------

    @classmethod
    def discover(
        cls, path: str, data_root: str | None = None, git_dir: str | None = None, work_tree: str | None = None
    ) -> tuple[Project, str | None, str | None]:
        """Find the repository around ``path``.

        Returns the project, the user's working tree that ``path`` belongs to (None when ``path``
        is inside a run's worktree) and the run id when it is inside a run's worktree. Inside a
        run's worktree the project is the user's repository the run belongs to, not the run's own.
        ``git_dir`` and ``work_tree`` are git's ``GIT_DIR`` and ``GIT_WORK_TREE`` (the CLI reads the
        environment): the repository and tree named there, as git itself would take them.
        """
        start = os.path.abspath(path)
        if not os.path.isdir(start):
            raise NotARepositoryError(f"{path} is not a directory.")
        loc = layout.locate(start)
        if loc is not None:  # a run's worktree (whatever GIT_DIR an agent set there) is the run's
            return cls(loc.common_dir, data_root), None, loc.run_id
        if git_dir:
            return cls._from_git_dir(os.path.join(start, git_dir), start, work_tree, data_root)
        found = pygit2.discover_repository(start)
        if found is None:
            raise NotARepositoryError(
                f"{path} is not inside a git repository; run this in your repository or pass -C DIR."
            )
        try:
            # Opened from the directory, not from the git dir found: a git dir apart from its tree
            # (``clone --separate-git-dir``) knows its tree only from the ``.git`` file that led to it.
            repo = pygit2.Repository(start)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"The repository at {found} cannot be opened ({exc}).") from exc
        if repo.is_bare or repo.workdir is None:
            raise NotARepositoryError(
                f"{found} is a bare repository; the sandbox needs a working tree to snapshot and apply to."
            )
        project = cls(layout.common_of(os.path.realpath(repo.path)), data_root)
        project.workdir = os.path.realpath(repo.workdir)
        project.follow_move()
        return project, project.workdir, None

    @classmethod
    def _from_git_dir(
        cls, git_dir: str, cwd: str, work_tree: str | None, data_root: str | None
    ) -> tuple[Project, str | None, str | None]:
        """``GIT_DIR`` (and ``GIT_WORK_TREE``) as git takes them: the tree is ``GIT_WORK_TREE``, else
        the git dir's ``core.worktree``, else the current directory (git's rule)."""
        try:
            repo = pygit2.Repository(git_dir, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"GIT_DIR={git_dir} is not a git repository ({exc}).") from exc
        configured = None
        with contextlib.suppress(KeyError, pygit2.GitError, ValueError):
            configured = str(repo.config["core.worktree"])
        tree = work_tree or (os.path.join(git_dir, configured) if configured else None)
        if tree is None and repo.is_bare:
            raise NotARepositoryError(
                f"GIT_DIR={git_dir} is a bare repository without a working tree; set GIT_WORK_TREE too, "
                "or run the sandbox in a clone with a working tree."
            )
        tree = os.path.realpath(os.path.join(cwd, tree) if tree else cwd)
        if not os.path.isdir(tree):
            raise NotARepositoryError(f"The working tree {tree} (GIT_WORK_TREE) is not a directory.")
        project = cls(layout.common_of(os.path.realpath(repo.path)), data_root)
        if not project.owns_tree(tree):
            # Snapshots, apply and the in-progress checks find the repository from the tree, as git
            # does without GIT_DIR: a tree whose .git leads elsewhere (or nowhere) is refused.
            raise NotARepositoryError(
                f"{tree} is not a working tree of GIT_DIR={git_dir} (its .git does not lead there); the sandbox "
                "works in trees of their own repository: unset GIT_DIR/GIT_WORK_TREE and run it in the tree."
            )
        project.workdir = tree
        project.follow_move()
        return project, tree, None

    def follow_move(self) -> None:
        """Name the repository where it is now in its runs' homes, when it was moved since they last
        named it (:mod:`sandbox.store.moved`; one small read when nothing moved)."""
        from sandbox.store import moved

        moved.follow(self.common_dir)

    # -- runs ----------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        """The run's scratch directory (lock, caches)."""
        return layout.run_dir(self.common_dir, run_id)

    def run_repository(self, run_id: str) -> pygit2.Repository:
        """The repository a run's objects are read and written through: its own store's
        (:mod:`sandbox.store.runstore`), or :attr:`repo` for a run without one (made before stores, fetched).

        :attr:`repo` sees the store too from then on (a run started after it was opened, whose store
        libgit2 did not find through your alternates then)."""
        found = self._run_repos.get(run_id)
        if found is not None:
            return found
        store = layout.run_store(self.common_dir, run_id)
        if not layout.valid_run_id(run_id) or not os.path.isdir(store):
            return self.repo
        try:
            repo = repository.open_repository(self.common_dir, store)
        except pygit2.GitError as exc:
            raise SandboxError(f"The object store of run {run_id} cannot be opened ({exc}).") from exc
        self._see_store(os.path.realpath(store))
        self._run_repos[run_id] = repo
        return repo

    def _see_store(self, store: str) -> None:
        """Let :attr:`repo` read a run's store too (once)."""
        if store not in self._stores_seen and os.path.isdir(store):
            self.repo.odb.add_disk_alternate(store)
            self._stores_seen.add(store)

    def place(self, run_id: str) -> layout.Place:
        """Where the run's worktree and git dir are on this machine (see :func:`sandbox.store.layout.place_of`)."""
        return layout.place_of(self.common_dir, run_id)

    def new_place(self, run_id: str) -> layout.Place:
        """A fresh home for run ``run_id`` under :attr:`homes_dir`."""
        return layout.home_place(os.path.join(self.homes_dir, run_id))

    def worktree_path(self, run_id: str) -> str:
        """The run's worktree on this machine."""
        return self.place(run_id).worktree

    def ref_run_ids(self) -> dict[str, set[str]]:
        """Every run id that has refs, with the names of its refs (``base``, ``ledger``, ...)."""
        return layout.run_refs(self.repo.references)

    def has_ledger(self, run_id: str) -> bool:
        """True when run ``run_id`` has its ledger ref: :meth:`run_ids` for one whole id, without
        reading every run's acknowledged tip."""
        return layout.valid_run_id(run_id) and self.repo.references.get(layout.ref_name(run_id, "ledger")) is not None

    def run_ids(self) -> list[str]:
        """Ids of the runs that exist, by id order: their ledger ref exists, or it vanished behind
        the sandbox's back (the run acknowledged a tip; see :mod:`sandbox.store.integrity`)."""
        from sandbox.store.integrity import vanished_run_ids

        live = {rid for rid, names in self.ref_run_ids().items() if "ledger" in names}
        return sorted(live | set(vanished_run_ids(self.repo, self.runs_dir)))

    # -- the user's working tree -----------------------------------------------------------------

    def owns_tree(self, candidate: str) -> bool:
        """True when ``candidate`` is the top of a working tree of this repository: its own ``.git``
        (a directory, or a file naming a git dir) leads to this repository's common git dir.

        A parent's ``.git`` does not count, nor does a directory inside the git dir: a path from a
        run's record (which another clone wrote) is taken only when the repository says it is ours.
        """
        real = os.path.realpath(candidate)
        common = self.common_dir
        if real == common or real.startswith(common.rstrip(os.sep) + os.sep) or not os.path.isdir(real):
            return False
        dot_git = os.path.join(real, ".git")
        if os.path.islink(dot_git):
            return False
        if os.path.isdir(dot_git):
            return os.path.realpath(dot_git) == common
        if os.path.isfile(dot_git):
            gitdir = layout.gitdir_of(real)
            return gitdir is not None and os.path.isdir(gitdir) and layout.common_of(gitdir) == common
        return False

    def workdir_file(self, run_id: str) -> str:
        """Where this repository remembers the working tree a run was last used from (its own, never a record's)."""
        return os.path.join(self.run_dir(run_id), "workdir")

    def remember_workdir(self, run_id: str) -> None:
        """Note the working tree this command runs in for run ``run_id`` (hooks inside its worktree find it there)."""
        from sandbox.store.fsutil import atomic_write

        if self.workdir is None or not os.path.isdir(self.run_dir(run_id)):
            return
        with contextlib.suppress(OSError):
            if _read_text(self.workdir_file(run_id)) != self.workdir:
                atomic_write(self.workdir_file(run_id), (self.workdir + "\n").encode())

    def target_workdir(self, run_id: str, recorded: str | None) -> str:
        """The working tree a run's changes go to: always one of this repository's.

        The tree this command runs in (:attr:`workdir`); else (inside the run's worktree, a hook, a
        host) the tree this repository noted for the run, the one the run's record names, or the
        main working tree, each only if :meth:`owns_tree` says it belongs to this repository. A run
        fetched from another clone records that clone's tree: it is never written to from here.
        """
        if self.workdir is not None:
            return self.workdir
        main = os.path.dirname(self.common_dir) if os.path.basename(self.common_dir) == ".git" else None
        for candidate in (_read_text(self.workdir_file(run_id)), recorded, main):
            if candidate and os.path.isabs(candidate) and self.owns_tree(candidate):
                return os.path.realpath(candidate)
        raise NoWorkingTreeError(
            f"Run {run_id} has no working tree of this repository to act on from here; run the command in "
            "your working tree (or pass -C DIR)."
        )
