"""Moving a run made before homes existed (a linked worktree of the user's repository) into a home.

Such a run keeps working where it is (:func:`sandbox.store.layout.place_of` finds it), but its worktree
shares the user's refs, config and hooks, and lives under ``.git``. ``sandbox gc`` moves it: a home
is made with the run's own git dir, the worktree's files are moved into it (a rename, so nothing is
copied on one file system), and git's admin dir of the old worktree is removed from the user's
repository. The agent's files, its index and its commits on the worktree's HEAD come along: commits
that only the old worktree's HEAD kept alive in the user's store are copied into the run's store.

Steps, each safe to repeat after a crash (:func:`relocate` picks up where it stopped):

1. the home's git dir is made (HEAD on the run's branch at the old worktree's HEAD, its index and
   reflog copied); the user's repository does not point at it yet, so a crash leaves a home
   :func:`relocate` makes again;
2. ``runs/<run>/place`` names the home (from here on the run lives there);
3. the worktree's files are renamed into the home (copied, then the copy renamed, across file
   systems), and its ``.git`` file rewritten to name the run's git dir;
4. the old admin dir is removed.
"""

from __future__ import annotations

import os
import shutil

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.run.run import Run
from sandbox.store import layout, worktree
from sandbox.store.fsutil import atomic_write
from sandbox.store.gitcli import git

faults.POINTS.update({"relocate.after_git_dir", "relocate.after_place", "relocate.after_move"})


def needs_move(run: Run) -> bool:
    """True when the run still has a legacy worktree to move, or a move to finish."""
    common = run.project.common_dir
    legacy = layout.legacy_place(common, run.run_id)
    if os.path.isfile(os.path.join(legacy.worktree, ".git")):
        return True
    recorded = layout.recorded_home(common, run.run_id)
    if recorded is None:
        return False
    place = layout.home_place(recorded)
    named = layout.gitdir_of(place.worktree)
    return (named is not None and named != os.path.realpath(place.git_dir)) or bool(
        worktree.admin_dirs_pointing_into(common, legacy.worktree)
    )


def relocate(run: Run) -> str | None:
    """Move the run's legacy worktree into a home; returns the new worktree path (None: nothing to move).

    The caller holds no host of the run (a watcher on the old path would lose track): ``sandbox gc``
    skips runs whose host is up. Runs under the run's lock.
    """
    common = run.project.common_dir
    legacy = layout.legacy_place(common, run.run_id)
    with run.lock():
        if not needs_move(run):
            return None
        recorded = layout.recorded_home(common, run.run_id)
        if recorded is None:
            place = run.project.new_place(run.run_id)
            assert place.home is not None
            if os.path.lexists(place.home):
                # A step-1 leftover: the user's repository never pointed at it, so nothing is lost.
                worktree.remove_place(common, place)
            _make_git_dir(run, place, legacy)
            faults.point("relocate.after_git_dir")
            atomic_write(os.path.join(run.dir, layout.PLACE_FILE), (place.home + "\n").encode())
            faults.point("relocate.after_place")
        else:
            place = layout.home_place(recorded)
        _move_files(legacy.worktree, place)
        faults.point("relocate.after_move")
        worktree.remove(common, legacy.worktree)
        run.set_place(place)
    return place.worktree


def _make_git_dir(run: Run, place: layout.Place, legacy: layout.Place) -> None:
    admin = worktree.admin_dir_for(legacy.worktree) or legacy.git_dir
    found = git(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=legacy.worktree, check=False)
    head = found.stdout.decode().strip()
    if found.returncode != 0 or len(head) not in (40, 64):
        raise SandboxError(
            f"The old worktree of run {run.run_id} has no HEAD commit; it was left where it is "
            f"({legacy.worktree}). Check it with 'git -C {legacy.worktree} status'."
        )
    worktree.create(place, run.project.common_dir, head, run.run_id, *run.git_settings(), checkout=False)
    # The index keeps git's stat cache valid after the rename; the reflog is the agent's history.
    for rel in ("index", os.path.join("logs", "HEAD")):
        src = os.path.join(admin, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(place.git_dir, rel)), exist_ok=True)
            shutil.copyfile(src, os.path.join(place.git_dir, rel))
    _keep_agent_commits(run, place, head)


def _keep_agent_commits(run: Run, place: layout.Place, head: str) -> None:
    # Commits the agent made on the old worktree's detached HEAD live in the user's store, kept alive
    # only by that HEAD: once the old worktree is gone, the user's gc could prune them. Copy what no
    # ref of the user's repository (the run's refs included) reaches into the run's own store.
    common = run.project.common_dir
    tips = git(["for-each-ref", "--format=%(objectname)"], cwd=common).stdout.decode().split()
    revs = "\n".join([head, *(f"^{t}" for t in sorted(set(tips)))]) + "\n"
    listed = git(["rev-list", "--objects", "--stdin"], cwd=common, input=revs.encode()).stdout
    if not listed.strip():
        return
    pack_base = os.path.join(place.git_dir, "objects", "pack", "pack")
    os.makedirs(os.path.dirname(pack_base), exist_ok=True)
    # pack-objects in the user's repository (read-only there): the objects are written to the run's store.
    git(["pack-objects", "-q", pack_base], cwd=common, input=listed)


def _move_files(old: str, place: layout.Place) -> None:
    if os.path.isdir(old) and not os.path.lexists(place.worktree):
        try:
            os.rename(old, place.worktree)
        except OSError as exc:
            if exc.errno != 18:  # EXDEV: the data root is on another file system
                raise
            staging = place.worktree + ".moving"
            if os.path.lexists(staging):
                shutil.rmtree(staging)
            shutil.copytree(old, staging, symlinks=True)
            os.rename(staging, place.worktree)
            shutil.rmtree(old, ignore_errors=True)
    elif os.path.isdir(old):
        shutil.rmtree(old, ignore_errors=True)  # moved by a run that crashed before removing the old copy
    atomic_write(os.path.join(place.worktree, ".git"), f"gitdir: ../{os.path.basename(place.git_dir)}\n".encode())
