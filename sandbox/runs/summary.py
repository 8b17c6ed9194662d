"""Short summaries of runs for ``list`` and ``status``."""

from __future__ import annotations

from sandbox.errors import SandboxError
from sandbox.fast import foldjson, renamepairs, views
from sandbox.fast.foldjson import fetched_json, state_json
from sandbox.run.run import Run
from sandbox.runs.remote import fetched_from
from sandbox.store import objects
from sandbox.store.integrity import LedgerDamagedError
from sandbox.store.project import Project


def summarize(
    run: Run, disk: bool = False, git_activity: bool = False, disk_limit: int | None = None
) -> foldjson.RunRowJson:
    """A run as a plain dict: ids, counts by status, changed paths and (optionally) disk use (of at
    most ``disk_limit`` entries) and what the agent did with the run's own git (``agent_git``:
    branches, tags, stash, commits).

    Built by :func:`sandbox.fast.views.summary` from the fold as JSON data, as the fast read path
    (:mod:`sandbox.fast.foldcache`) builds it from the fold cache.
    """
    state = run.state()
    info = state.run
    assert info is not None
    fetched = fetched_from(run.project, run.run_id)
    repo = run.repo
    changes = objects.diff_trees(repo, objects.commit_tree(repo, run.base), objects.commit_tree(repo, run.head()))
    changed, renamed = renamepairs.count(
        ((c.path, c.old, c.new) for c in changes), lambda oid: objects.read_blob(repo, oid)
    )
    row = views.summary(
        run.run_id,
        state_json(state.model_dump(mode="json")),
        common_dir=run.project.common_dir,
        place=run.place,
        changed_paths=changed,
        renamed_paths=renamed,
        fetched=fetched_json(fetched.model_dump(mode="json")) if fetched is not None else None,
        disk=disk,
        disk_limit=disk_limit,
    )
    if git_activity:
        from sandbox.fast import agentgit

        exists = row["worktree_exists"]
        row["agent_git"] = (
            agentgit.read(run.git_dir, run.run_id, info.base) if exists and not run.place.legacy else None
        )
    return row


def summarize_runs(project: Project, disk: bool = False, disk_limit: int | None = None) -> list[foldjson.RunRowJson]:
    """Every run's summary, oldest first; a damaged run is listed with its error. ``disk_limit``: at
    most that many entries of each run's home counted for its disk use (``disk_complete`` says where
    the count stopped; None: all of them, which grows with runs x repository)."""
    rows: list[foldjson.RunRowJson] = []
    for run_id in project.run_ids():
        try:
            run = Run.open(project, run_id)
            rows.append(summarize(run, disk=disk, disk_limit=disk_limit))
            run.seal_cache()
        except SandboxError as exc:
            rows.append(
                foldjson.RunRowJson(
                    run=run_id,
                    label=None,
                    created_at=None,
                    worktree_exists=False,
                    calls=0,
                    changed_paths=0,
                    disk_bytes=0,
                    error=exc.message,
                    damaged=isinstance(exc, LedgerDamagedError),
                )
            )
    rows.sort(key=lambda r: r["created_at"] or "")
    return rows
