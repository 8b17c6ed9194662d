"""The user's repository, as the sandbox sees it: where runs live and how to find them.

Layout (all under the repository's common git dir, so every worktree of the repository shares it)::

    <common>/sandbox/runs/<run>/        lock, ledger cache, per-run scratch files
    <common>/sandbox/worktrees/<run>/   the run's worktree (a locked, detached git worktree)
    <common>/sandbox/locks/             locks on the user's working trees (apply, undo)
    refs/sandbox/<run>/{base,head,ledger,checkpoints}
"""

from __future__ import annotations

import os
import re

import pygit2

from sandbox import objects
from sandbox.errors import NotARepositoryError, UnknownRunError

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


class Project:
    """A user's repository: its common git dir, its sandbox state dir and its runs."""

    def __init__(self, common_dir: str) -> None:
        self.common_dir = os.path.realpath(common_dir)
        try:
            self.repo = objects.open_repository(self.common_dir)
        except pygit2.GitError as exc:
            raise NotARepositoryError(f"{common_dir} is not a git repository ({exc}).") from exc
        self.state_dir = os.path.join(self.common_dir, "sandbox")
        self.runs_dir = os.path.join(self.state_dir, "runs")
        self.worktrees_dir = os.path.join(self.state_dir, "worktrees")
        self.locks_dir = os.path.join(self.state_dir, "locks")

    # -- discovery -----------------------------------------------------------------------------

    @classmethod
    def discover(cls, path: str) -> tuple[Project, str | None, str | None]:
        """Find the repository around ``path``.

        Returns the project, the user's working tree that ``path`` belongs to (None when ``path``
        is inside a run's worktree) and the run id when it is inside a run's worktree.
        """
        start = os.path.abspath(path)
        if not os.path.isdir(start):
            raise NotARepositoryError(f"{path} is not a directory.")
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
        project = cls(common_dir)
        workdir = os.path.realpath(repo.workdir)
        wt_root = os.path.realpath(project.worktrees_dir) + os.sep
        if (workdir + os.sep).startswith(wt_root):
            run_id = os.path.relpath(workdir, project.worktrees_dir).split(os.sep)[0]
            return project, None, run_id
        return project, workdir, None

    # -- runs ----------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        """The run's scratch directory (lock, caches)."""
        return os.path.join(self.runs_dir, run_id)

    def worktree_path(self, run_id: str) -> str:
        """Where the run's worktree is created."""
        return os.path.join(self.worktrees_dir, run_id)

    def ref_run_ids(self) -> dict[str, set[str]]:
        """Every run id that has refs, with the names of its refs (``base``, ``ledger``, ...)."""
        out: dict[str, set[str]] = {}
        for name in self.repo.references:
            if name.startswith("refs/sandbox/"):
                parts = name.split("/")
                if len(parts) >= 4:
                    out.setdefault(parts[2], set()).add("/".join(parts[3:]))
        return out

    def run_ids(self) -> list[str]:
        """Ids of the runs that exist, by id order: their ledger ref exists, or it vanished behind
        the sandbox's back (the run acknowledged a tip; see :mod:`sandbox.integrity`)."""
        from sandbox.integrity import vanished_run_ids

        live = {rid for rid, names in self.ref_run_ids().items() if "ledger" in names}
        return sorted(live | set(vanished_run_ids(self.repo, self.runs_dir)))

    def resolve_run_id(self, given: str | None, cwd_run: str | None = None) -> str:
        """The run meant by ``given`` (an id or unique prefix), or the run whose worktree we are in."""
        if not given:
            if cwd_run:
                return cwd_run
            ids = self.run_ids()
            if len(ids) == 1:
                return ids[0]
            if not ids:
                raise UnknownRunError("This repository has no sandbox runs; start one with 'sandbox start'.")
            raise UnknownRunError(
                f"This repository has {len(ids)} runs; name one (see 'sandbox list') or run from its worktree."
            )
        if not RUN_ID_RE.match(given):
            raise UnknownRunError(f"{given!r} is not a valid run id; see 'sandbox list'.")
        ids = self.run_ids()
        if given in ids:
            return given
        matches = [i for i in ids if i.startswith(given)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise UnknownRunError(f"Run id {given!r} is ambiguous: {', '.join(matches)}.")
        raise UnknownRunError(f"No run {given!r} in this repository; see 'sandbox list'.")
