"""Reclaiming what dropped or half-started runs left behind.

A run exists while its ledger ref exists. Anything else of the sandbox's without a live run is
garbage: refs of a start that crashed before its ledger was written, worktree directories and
git admin dirs of dropped runs, scratch directories. A run being started or dropped right now
holds its run lock, and gc skips it, so gc can race with start and drop safely.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field

from sandbox import faults, journal, packs, worktree
from sandbox.errors import LockedError
from sandbox.locks import file_lock, remove_locked_dir
from sandbox.project import Project
from sandbox.run import delete_run_refs

faults.POINTS.update({"gc.after_refs", "gc.after_worktree"})

#: A pack temp file this old belongs to no live writer (a write takes milliseconds).
TEMP_FILE_AGE = 3600.0


@dataclass
class GcReport:
    """What gc reclaimed."""

    runs: list[str] = field(default_factory=list)
    worktrees: list[str] = field(default_factory=list)
    admin_dirs: list[str] = field(default_factory=list)
    refs_deleted: int = 0
    #: Temp files of pack writes a killed process left (older than an hour).
    temp_files: int = 0
    #: Temporaries of file writes a killed apply, undo or redo left (their journal stays).
    write_temp_files: int = 0
    bytes_freed: int = 0
    skipped_busy: list[str] = field(default_factory=list)


def collect(project: Project) -> GcReport:
    """Remove the leftovers of dropped and interrupted runs; live runs are never touched."""
    report = GcReport()
    refs = project.ref_run_ids()
    live = {rid for rid, names in refs.items() if "ledger" in names}
    candidates: set[str] = {rid for rid in refs if rid not in live}
    for base in (project.worktrees_dir, project.runs_dir):
        with contextlib.suppress(OSError):
            candidates.update(n for n in os.listdir(base) if n not in live)
    for run_id in sorted(candidates):
        lock_path = os.path.join(project.run_dir(run_id), "lock")
        try:
            with file_lock(lock_path, f"Run {run_id}", timeout=0):
                if project.repo.references.get(f"refs/sandbox/{run_id}/ledger") is not None:
                    continue  # it finished starting while we looked
                names = refs.get(run_id, set())
                if names:
                    delete_run_refs(project.repo, run_id)
                    report.refs_deleted += len(names)
                faults.point("gc.after_refs")
                path = project.worktree_path(run_id)
                if os.path.lexists(path) or worktree.admin_dir_for(path):
                    report.bytes_freed += worktree.remove(project.common_dir, path)
                    report.worktrees.append(path)
                faults.point("gc.after_worktree")
                report.runs.append(run_id)
                # Last act under the lock: a start waiting on it re-takes it on a fresh file.
                with contextlib.suppress(OSError):
                    remove_locked_dir(project.run_dir(run_id))
        except LockedError:
            report.skipped_busy.append(run_id)
            continue
    objects_dir = os.path.join(project.common_dir, "objects")
    report.temp_files = packs.remove_leftovers(objects_dir, older_than=time.time() - TEMP_FILE_AGE)
    report.write_temp_files = len(journal.remove_write_leftovers(project))
    # Admin dirs of sandbox worktrees whose run is gone (git's own prune skips them: they are locked).
    for admin, wt in worktree.admin_dirs_pointing_into(project.common_dir, project.worktrees_dir).items():
        run_id = os.path.relpath(wt, project.worktrees_dir).split(os.sep)[0]
        if run_id in live or run_id in report.skipped_busy:
            continue
        shutil.rmtree(admin, ignore_errors=True)
        report.admin_dirs.append(admin)
    return report
