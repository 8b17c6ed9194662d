"""Short summaries of runs for ``list`` and ``status``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sandbox.errors import SandboxError
from sandbox.models import LedgerState
from sandbox.run.run import Run
from sandbox.store import worktree
from sandbox.store.integrity import LedgerDamagedError
from sandbox.store.project import Project


def iso_time(when: datetime) -> str:
    """``when`` as the JSON outputs write times: ISO 8601 in UTC with the zone (``Z``), as pydantic does."""
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def summarize(run: Run, disk: bool = False, git_activity: bool = False) -> dict[str, Any]:
    """A run as a plain dict: ids, counts by status, changed paths and (optionally) disk use and
    what the agent did with the run's own git (``agent_git``: branches, tags, stash, commits)."""
    state = run.state()
    info = state.run
    assert info is not None
    counts: dict[str, int] = {}
    for entry in state.calls.values():
        counts[entry.status.value] = counts.get(entry.status.value, 0) + 1
    exists = run.worktree_exists()
    from sandbox.run.materialize import has_place_here

    # A run fetched from elsewhere has no worktree here until a command needs one: none to show.
    here = exists or has_place_here(run)
    extra: dict[str, Any] = {}
    if git_activity:
        from sandbox.run import agentgit

        found = agentgit.activity(run.git_dir, run.run_id, info.base) if exists and not run.place.legacy else None
        extra["agent_git"] = found.to_json() if found is not None else None
    return {
        "run": run.run_id,
        "label": info.label,
        "created_at": iso_time(info.created_at),
        "worktree": run.worktree if here else None,
        "git_dir": run.git_dir if here else None,
        "worktree_exists": exists,
        "base": info.base,
        "user_head": info.head,
        "run_head": state.head,
        "calls": len(state.calls),
        "by_status": counts,
        "changed_paths": len(run.changed_paths()),
        "unapplied_calls": len(run.unapplied_calls()),
        "partly_applied_calls": _partly_applied(state),
        "epoch": state.epoch,
        # Where it came from: the machine it was started on, and the remote this clone fetched it from.
        "made_on": info.host,
        "fetched_from": _fetched(run),
        # A home holds the worktree and the run's own git dir (its index, the agent's objects).
        "disk_bytes": worktree.disk_usage(run.place.home or run.worktree) if disk and exists else 0,
        **extra,
    }


def _fetched(run: Run) -> dict[str, Any] | None:
    from sandbox.run.remote import fetched_from

    found = fetched_from(run.project, run.run_id)
    return found.model_dump(mode="json") if found is not None else None


def _partly_applied(state: LedgerState) -> list[str]:
    """Calls of which only some hunks were applied (``apply --hunks``; see sandbox.merge.select)."""
    out: set[str] = set()
    for record in state.data.user_paths.values():
        if record.partial is not None:
            out.update(c for c in record.partial.calls if c in state.calls and not state.calls[c].undone)
    return [c for c in state.order if c in out]


def summarize_runs(project: Project, disk: bool = False) -> list[dict[str, Any]]:
    """Every run's summary, oldest first; a damaged run is listed with its error."""
    rows = []
    for run_id in project.run_ids():
        try:
            rows.append(summarize(Run.open(project, run_id), disk=disk))
        except SandboxError as exc:
            rows.append(
                {
                    "run": run_id,
                    "label": None,
                    "created_at": None,
                    "worktree_exists": False,
                    "calls": 0,
                    "changed_paths": 0,
                    "disk_bytes": 0,
                    "error": exc.message,
                    "damaged": isinstance(exc, LedgerDamagedError),
                }
            )
    rows.sort(key=lambda r: r["created_at"] or "")
    return rows
