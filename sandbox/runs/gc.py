"""Reclaiming what dropped or half-started runs left behind.

A run exists while its ledger ref exists. Anything else of the sandbox's without a live run is
garbage: refs of a start that crashed before its ledger was written, homes (worktree and own git
dir) of dropped runs, legacy worktrees and their git admin dirs, scratch directories. A home is
removed only when its ``origin`` names this repository. A run being started or dropped right now
holds its run lock, and gc skips it, so gc can race with start and drop safely. A run whose ledger
ref vanished although it recorded work is not garbage: it is damage, kept until ``sandbox repair``
(or ``gc --force``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sandbox import faults
from sandbox.errors import LockedError
from sandbox.run.core import delete_run_refs
from sandbox.store import history, integrity, journal, layout, packs, runstore, worktree
from sandbox.store.locks import file_lock, remove_locked_dir
from sandbox.store.project import Project

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
    #: Runs made before homes existed, moved into a home: {run id: new worktree}.
    moved: dict[str, str] = field(default_factory=dict)
    #: Such runs left where they are this time: {run id: why}.
    not_moved: dict[str, str] = field(default_factory=dict)
    #: Runs whose ledger ref is missing but that hold recorded work: kept (see ``sandbox repair``).
    damaged: list[str] = field(default_factory=list)
    #: Runs made before stores given one of their own (:func:`sandbox.store.history.give_store`).
    stored: list[str] = field(default_factory=list)
    #: Such runs left without one this time: {run id: why}.
    not_stored: dict[str, str] = field(default_factory=dict)


class HostClaim(Protocol):
    """A held claim on hosting a run (the agent layer's host lock); released when gc is done with the run."""

    def release(self) -> None:
        """Let go of the claim."""


#: Takes the host lock for a run directory without waiting; None when a host (the repository's
#: ``sandbox serve``) is up. Passed in by the caller: hosts belong to the agent layer, above this one.
ClaimHost = Callable[[str], HostClaim | None]


def collect(
    project: Project,
    force: bool = False,
    *,
    claim_host: ClaimHost | None = None,
    progress: Callable[[str], None] | None = None,
) -> GcReport:
    """Remove the leftovers of dropped and interrupted runs; live runs are never touched.

    A run whose ledger ref is missing but that holds recorded work (it acknowledged a ledger tip,
    its head moved past its base, or it has checkpoints: :func:`sandbox.store.integrity.holds_work`) is
    kept and listed in ``damaged`` unless ``force``: its ledger ref vanished, it was not dropped.
    Live runs made before homes existed are moved into a home when ``claim_host`` is given (it
    keeps a host from starting on the old path meanwhile; the CLI passes the agent layer's).
    ``progress`` is told which run is being reclaimed.
    """
    report = GcReport()
    refs = project.ref_run_ids()
    live = {rid for rid, names in refs.items() if "ledger" in names}
    candidates: set[str] = {rid for rid in refs if rid not in live}
    homes = _own_homes(project)
    candidates.update(rid for rid in homes if rid not in live)
    for base in (project.worktrees_dir, project.runs_dir):
        with contextlib.suppress(OSError):
            candidates.update(n for n in os.listdir(base) if n not in live and layout.valid_run_id(n))
    for n, run_id in enumerate(sorted(candidates), 1):
        if progress is not None:
            progress(f"Reclaiming run {run_id} ({n}/{len(candidates)})")
        lock_path = layout.run_lock_path(project.common_dir, run_id)
        try:
            with file_lock(lock_path, f"Run {run_id}", timeout=0):
                if project.repo.references.get(layout.ref_name(run_id, "ledger")) is not None:
                    continue  # it finished starting while we looked
                if not force and integrity.holds_work(project.repo, run_id, project.run_dir(run_id)):
                    report.damaged.append(run_id)
                    continue
                names = refs.get(run_id, set())
                if names:
                    delete_run_refs(project.repo, run_id)
                    report.refs_deleted += len(names)
                faults.point("gc.after_refs")
                places = [project.place(run_id), layout.legacy_place(project.common_dir, run_id)]
                places += [layout.home_place(h) for h in homes.get(run_id, [])]
                done: set[str] = set()
                for place in places:
                    key = place.home or place.worktree
                    if key in done:
                        continue
                    done.add(key)
                    if os.path.lexists(key) or (place.legacy and worktree.admin_dir_for(place.worktree)):
                        report.bytes_freed += worktree.remove_place(project.common_dir, place)
                        report.worktrees.append(place.worktree)
                faults.point("gc.after_worktree")
                report.runs.append(run_id)
                runstore.retire(project.common_dir, run_id)  # its objects into yours, its store unlisted
                # Last act under the lock: a start waiting on it re-takes it on a fresh file.
                with contextlib.suppress(OSError):
                    remove_locked_dir(project.run_dir(run_id))
        except LockedError:
            report.skipped_busy.append(run_id)
            continue
    if progress is not None:
        progress("Removing leftover temp files")
    _remove_leftovers(project, live, report)
    # Admin dirs of sandbox worktrees whose run is gone (git's own prune skips them: they are locked).
    for admin, wt in worktree.admin_dirs_pointing_into(project.common_dir, project.worktrees_dir).items():
        run_id = os.path.relpath(wt, project.worktrees_dir).split(os.sep)[0]
        if run_id in live or run_id in report.skipped_busy or run_id in report.damaged:
            continue
        shutil.rmtree(admin, ignore_errors=True)
        report.admin_dirs.append(admin)
    _finish_interrupted_homes(project, sorted(live), report)
    if claim_host is not None:
        _move_legacy_runs(project, sorted(live), report, claim_host)
        _give_stores(project, sorted(live), report, claim_host)
    return report


def _remove_leftovers(project: Project, live: set[str], report: GcReport) -> None:
    """Temp files of killed pack writes (in your store and the live runs' own) and of killed file writes;
    stores the hub lists without a run (a crash inside a drop's last steps: :func:`runstore.sweep`)."""
    older_than = time.time() - TEMP_FILE_AGE
    report.temp_files = packs.remove_leftovers(os.path.join(project.common_dir, "objects"), older_than)
    for run_id in sorted(live):
        store = layout.run_store(project.common_dir, run_id)
        if os.path.isdir(store):
            report.temp_files += packs.remove_leftovers(store, older_than)
    runstore.sweep(project.common_dir)
    if not live:  # your committed history as runs see it: no run left to show it to (sandbox.store.history)
        report.bytes_freed += history.reclaim(project.common_dir)
    report.write_temp_files = len(journal.remove_write_leftovers(project))


def _finish_interrupted_homes(project: Project, live: list[str], report: GcReport) -> None:
    """Remove homes a killed command was making for a fetched run (the next command makes it again)."""
    from sandbox.run.run import Run
    from sandbox.runs import materialize

    for run_id in live:
        run = Run(project, run_id)
        if not materialize.interrupted(run):
            continue
        try:
            with file_lock(layout.run_lock_path(project.common_dir, run_id), f"Run {run_id}", timeout=0):
                if materialize.interrupted(run):
                    place = run.place
                    report.bytes_freed += materialize.discard_interrupted(run)
                    report.worktrees.append(place.worktree)
        except LockedError:
            report.skipped_busy.append(run_id)


def _move_legacy_runs(project: Project, live: list[str], report: GcReport, claim_host: ClaimHost) -> None:
    """Move live runs made before homes existed into a home (see :mod:`sandbox.runs.relocate`)."""
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run
    from sandbox.runs import relocate

    for run_id in live:
        try:
            run = Run(project, run_id)
            if not relocate.needs_move(run):
                continue
            host = claim_host(run.dir)  # held while moving: no host may start on the old path
            if host is None:
                report.not_moved[run_id] = "the repository's host (sandbox serve) is up; stop it and run gc again"
                continue
            try:
                with file_lock(layout.run_lock_path(project.common_dir, run_id), f"Run {run_id}", timeout=0):
                    pass  # busy right now (a call being recorded): next time
                moved = relocate.relocate(run)
            finally:
                host.release()
        except LockedError:
            report.not_moved[run_id] = "it is busy (a call is being recorded); run gc again"
            continue
        except (SandboxError, OSError) as exc:
            report.not_moved[run_id] = str(exc)
            continue
        if moved:
            report.moved[run_id] = moved


def _give_stores(project: Project, live: list[str], report: GcReport, claim_host: ClaimHost) -> None:
    """Give live runs made before stores (a home, no store) one of their own (:func:`history.give_store`)."""
    from sandbox.errors import SandboxError
    from sandbox.store import moved

    common = project.common_dir
    for run_id in live:
        place = layout.place_of(common, run_id)
        if place.legacy or not os.path.isdir(place.git_dir) or os.path.isdir(layout.run_store(common, run_id)):
            continue
        host = claim_host(project.run_dir(run_id))  # no host records into your objects meanwhile
        if host is None:
            report.not_stored[run_id] = "the repository's host (sandbox serve) is up; stop it and run gc again"
            continue
        try:
            with file_lock(layout.run_lock_path(common, run_id), f"Run {run_id}", timeout=0):
                if history.give_store(common, run_id):
                    moved.write_alternates(place.git_dir, common, run_id)  # its store first, as a new run's
                    report.stored.append(run_id)
        except LockedError:
            report.not_stored[run_id] = "it is busy (a call is being recorded); run gc again"
        except (SandboxError, OSError) as exc:
            report.not_stored[run_id] = str(exc)
        finally:
            host.release()


def _own_homes(project: Project) -> dict[str, list[str]]:
    """Homes of this repository's runs found in its homes directories: {run id: [home, ...]}."""
    out: dict[str, list[str]] = {}
    for base in {project.homes_dir, layout.fallback_homes_dir(project.common_dir)}:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            home = os.path.join(base, name)
            origin = layout.home_place(home).origin_file
            try:
                with open(origin or "", encoding="utf-8") as fh:
                    mine = os.path.realpath(fh.read().strip()) == project.common_dir
            except (OSError, UnicodeError):
                # An interrupted start may not have written it yet: the run's own record decides.
                mine = layout.recorded_home(project.common_dir, name) == home
            if mine and layout.valid_run_id(name):
                out.setdefault(name, []).append(home)
    return out


@dataclass
class OrphanHome:
    """A run's home in the data directory whose repository no longer exists (a deleted clone)."""

    home: str
    #: The repository's git directory the home names (its ``origin`` file): gone.
    origin: str
    bytes: int = 0


def orphan_homes(data_root: str) -> list[OrphanHome]:
    """Homes under ``data_root`` whose repository is gone: no ``gc`` in that repository can reach
    them any more. A home whose ``origin`` cannot be read, or names a directory that exists, is
    never listed (an interrupted start, a repository on a disk that is not mounted is still
    listed: the caller decides, see ``sandbox gc --orphans``)."""
    from sandbox.store.fsutil import disk_usage

    out = []
    repos = os.path.join(data_root, "repos")
    try:
        keys = sorted(os.listdir(repos))
    except OSError:
        return []
    for key in keys:
        try:
            names = sorted(os.listdir(os.path.join(repos, key)))
        except OSError:
            continue
        for name in names:
            home = os.path.join(repos, key, name)
            origin = layout.home_place(home).origin_file or ""
            if not layout.valid_run_id(name) or os.path.islink(home):
                continue
            try:
                with open(origin, encoding="utf-8") as fh:
                    common = fh.read(4096).strip()
            except (OSError, UnicodeError):
                continue
            if not common or not os.path.isabs(common) or os.path.lexists(common):
                continue
            out.append(OrphanHome(home, common, disk_usage(home)))
    return out


def remove_orphan_homes(orphans: list[OrphanHome]) -> int:
    """Remove the homes listed by :func:`orphan_homes` (checked again: a repository that came back
    keeps its runs); bytes freed."""
    from sandbox.store.fsutil import remove_tree

    freed = 0
    for orphan in orphans:
        if os.path.lexists(orphan.origin):
            continue
        remove_tree(orphan.home)
        freed += orphan.bytes
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(orphan.home))  # the repository's key directory, once empty
    return freed
