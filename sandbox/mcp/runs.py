"""The run tools of ``sandbox mcp``: ``start_run``, ``open_run``, ``list_runs``.

``start_run`` makes a run (its own ``run_started`` event); ``open_run`` works on an existing one;
``list_runs`` reads the repository's runs and records nothing. A server pinned to one run
(``sandbox mcp --run``/``--new``) refuses to move to another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from sandbox.errors import SandboxError
from sandbox.mcp.hosted import HostLedger
from sandbox.mcp.state import WorkspaceState
from sandbox.run.run import Run


class Opened(TypedDict):
    """What ``start_run`` and ``open_run`` answer."""

    run_id: str
    worktree: str
    label: str | None
    created: bool
    calls: int


class RunListing(TypedDict, total=False):
    """One row of ``list_runs``: the fields of ``sandbox list`` a model needs (a damaged run has ``error``)."""

    run: str
    label: str | None
    created_at: str | None
    calls: int
    changed_paths: int
    worktree: str
    error: str
    open: bool


class RunTools(WorkspaceState):
    """The run tools (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    def open_run(self, run_id: str) -> Opened:
        """Work on an existing run (any unique prefix of its id)."""
        with self.lock:
            run = Run.open(self.project, self.resolve_own(run_id))
            run.load()
            return self._opened(run, created=False)

    def start_run(self, label: str | None = None) -> Opened:
        """Snapshot the user's working tree into a new run and work on it."""
        with self.lock:
            self.refuse_if_pinned(None)
            if self.user_workdir is None:
                raise SandboxError(
                    "This server was started inside a run's worktree; start it from your repository to make new runs."
                )
            run = Run.start(self.project, self.user_workdir, label=label)
            return self._opened(run, created=True)

    def _opened(self, run: Run, created: bool) -> Opened:
        self.run = run
        if self.settings.through_host:
            self.hosted = HostLedger(run.project.common_dir, run.run_id, run.dir, run.worktree)
        if self.settings.on_open is not None:
            self.settings.on_open(run)
        info = run.info
        return {
            "run_id": run.run_id,
            "worktree": run.worktree,
            "label": info.label,
            "created": created,
            "calls": len(run.entries()),
        }

    def list_runs(self) -> list[RunListing]:
        """The repository's runs: id, label, calls, changed paths, whether it is the open one; only its own
        for a server pinned to one (the others are other agents', not the model's to know of)."""
        from sandbox.runs.summary import summarize_runs

        with self.lock:
            rows = summarize_runs(self.project, disk=False)
        current = self.run.run_id if self.run is not None else None
        return [_listing(r, r["run"] == current) for r in rows if self.pinned is None or r["run"] == self.pinned]


#: The keys of a ``sandbox list`` row (:func:`sandbox.runs.summary.summarize_runs`) a model needs, in order.
_LISTED: tuple[Literal["run", "label", "created_at", "calls", "changed_paths", "worktree", "error"], ...] = (
    "run",
    "label",
    "created_at",
    "calls",
    "changed_paths",
    "worktree",
    "error",
)


def _listing(row: Mapping[str, Any], is_open: bool) -> RunListing:
    """The :data:`_LISTED` keys the row has, and whether it is the open run."""
    out: RunListing = {}
    for key in _LISTED:
        if key in row:
            out[key] = row[key]
    out["open"] = is_open
    return out
