"""The user's repository, as the sandbox sees it: its runs and where they live.

Every path and name comes from :mod:`sandbox.store.layout` (the one place that owns them): the run's
scratch directory and refs are in the user's repository, its worktree and own git directory in its
home (a per-user data directory keyed by repository).
"""

from __future__ import annotations

import os

import pygit2

from sandbox.errors import NotARepositoryError
from sandbox.store import layout, objects


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


class Project:
    """A user's repository: its common git dir, its sandbox state dir and its runs.

    ``data_root`` is the per-user data directory new runs get their home in (the CLI passes
    ``$XDG_DATA_HOME/sandbox`` or the ``data_dir`` of ``.sandbox.toml``); without one, homes are
    made under ``<common>/sandbox/homes``. Existing runs are found wherever they are.
    """

    def __init__(self, common_dir: str, data_root: str | None = None) -> None:
        self.common_dir = os.path.realpath(common_dir)
        try:
            self.repo = objects.open_repository(self.common_dir)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"{common_dir} is not a git repository ({exc}).") from exc
        self.data_root = data_root
        self.state_dir = layout.state_dir(self.common_dir)
        self.runs_dir = layout.runs_dir(self.common_dir)
        #: Where runs made before homes existed keep their linked worktrees.
        self.worktrees_dir = layout.legacy_worktrees_dir(self.common_dir)
        self.locks_dir = layout.locks_dir(self.common_dir)

    @property
    def homes_dir(self) -> str:
        """Where new runs of this repository get their home."""
        if self.data_root:
            return layout.homes_dir(self.data_root, self.common_dir)
        return layout.fallback_homes_dir(self.common_dir)

    # -- discovery -----------------------------------------------------------------------------

    @classmethod
    def discover(cls, path: str, data_root: str | None = None) -> tuple[Project, str | None, str | None]:
        """Find the repository around ``path``.

        Returns the project, the user's working tree that ``path`` belongs to (None when ``path``
        is inside a run's worktree) and the run id when it is inside a run's worktree. Inside a
        run's worktree the project is the user's repository the run belongs to, not the run's own.
        """
        start = os.path.abspath(path)
        if not os.path.isdir(start):
            raise NotARepositoryError(f"{path} is not a directory.")
        loc = layout.locate(start)
        if loc is not None:
            return cls(loc.common_dir, data_root), None, loc.run_id
        found = pygit2.discover_repository(start)
        if found is None:
            raise NotARepositoryError(
                f"{path} is not inside a git repository; run this in your repository or pass -C DIR."
            )
        try:
            repo = pygit2.Repository(found)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"The repository at {found} cannot be opened ({exc}).") from exc
        if repo.is_bare or repo.workdir is None:
            raise NotARepositoryError(
                f"{found} is a bare repository; the sandbox needs a working tree to snapshot and apply to."
            )
        gitdir = os.path.realpath(repo.path)
        common = _read_text(os.path.join(gitdir, "commondir"))
        common_dir = os.path.realpath(os.path.join(gitdir, common)) if common else gitdir
        return cls(common_dir, data_root), os.path.realpath(repo.workdir), None

    # -- runs ----------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        """The run's scratch directory (lock, caches)."""
        return layout.run_dir(self.common_dir, run_id)

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
