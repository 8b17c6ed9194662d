"""Giving a run a worktree in this repository when it has none yet (a run fetched from elsewhere).

A run's refs travel (``sandbox push`` / ``fetch``, or plain git); its home does not: it is made per
repository, from the repository the command runs in (:func:`sandbox.store.layout.place_of`). A run
that arrived by fetch has no home here. Commands that only read the record (``log``, ``diff``,
``apply``, ``undo``, ``status``) work without one; commands that need files (``exec``, ``run``,
``path``, ``hooks install``, ``resume``) call :func:`ensure`, which makes the home from the run's
head and says so in one line.

Crash safety: under the run's lock, a marker ``materializing`` is written in the run's directory
*before* the home is recorded and created, and removed once the worktree is complete. A command
killed in between leaves the marker: the next :func:`ensure` (or ``sandbox gc``) removes the half-made
home, which holds nothing but a checkout of a recorded commit, and (for ``ensure``) makes it again.
"""

from __future__ import annotations

import contextlib
import os

from sandbox import faults
from sandbox.run.run import Run
from sandbox.store import layout, worktree
from sandbox.store.fsutil import atomic_write

faults.POINTS.update({"materialize.after_marker", "materialize.after_place"})


def _marker(run: Run) -> str:
    return layout.materializing_marker(run.project.common_dir, run.run_id)


def has_place_here(run: Run) -> bool:
    """True when the run has (or had) a home or a legacy worktree in this repository."""
    return layout.has_place(run.project.common_dir, run.run_id)


def interrupted(run: Run) -> bool:
    """True when a home was being made for the run and the command making it did not finish."""
    return os.path.exists(_marker(run))


def discard_interrupted(run: Run) -> int:
    """Remove a half-made home (the caller holds the run's lock); bytes freed."""
    home = layout.recorded_home(run.project.common_dir, run.run_id)
    freed = 0
    if home is not None:
        freed = worktree.remove_place(run.project.common_dir, layout.home_place(home))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run.dir, layout.PLACE_FILE))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_marker(run))
    run.set_place(run.project.place(run.run_id))
    return freed


def ensure(run: Run) -> str | None:
    """Make the run's worktree here from its head when the run has none in this repository.

    Returns the one line to show the user when a worktree was made, else None. A run whose home
    exists but is broken (its worktree deleted by hand, say) is left to ``sandbox resume``, which
    reports what was there: the caller's usual "worktree missing" refusal still applies to it.
    """
    # Hooks and hosts inside the worktree find the user's tree from this note, never from the record.
    run.project.remember_workdir(run.run_id)
    if run.worktree_exists() and not interrupted(run):
        return None
    with run.lock():
        if interrupted(run):
            discard_interrupted(run)
        elif run.worktree_exists() or has_place_here(run):
            return None
        head = run.head()
        os.makedirs(run.dir, exist_ok=True)
        atomic_write(_marker(run), b"")
        faults.point("materialize.after_marker")
        place = run.make_place(head)
        restored = _agent_git(run, place, head)
        faults.point("materialize.after_place")
        from sandbox.run import include

        report = include.populate(run.user_workdir, place.worktree, run.dir)
        os.unlink(_marker(run))
    line = f"run {run.run_id} had no worktree in this repository; made one at its head {head[:12]} in {place.worktree}"
    if report.copied:
        line += f" (copied {', '.join(report.copied[:5])})"
    if restored:
        line += f"; the agent's own git came along ({restored} branch(es) and tag(s))"
    return line + "."


def _agent_git(run: Run, place: layout.Place, head: str) -> int:
    """Give the new git dir the agent's branches, tags and HEAD commit that travelled with the run.

    They arrived as ``refs/sandbox/<run>/git/...`` in the user's repository (``sandbox fetch``), with
    their objects, which the run's git dir reaches through its alternates. The worktree keeps the
    run's recorded files; the run's branch moves to the agent's HEAD commit with ``git reset``
    (mixed: index only), so ``git status`` there shows what the agent had not committed, as it did
    on the machine the run came from. Returns how many refs were restored.
    """
    from sandbox.runs.remote import AGENT_PREFIX
    from sandbox.store.gitcli import git

    prefix = layout.ref_prefix(run.run_id) + AGENT_PREFIX
    refs = {n[len(prefix) :]: str(run.repo.references[n].target) for n in run.repo.references if n.startswith(prefix)}
    agent_head = refs.pop("HEAD", None)
    own = f"refs/heads/{layout.run_branch(run.run_id)}"
    count = 0
    for name, oid in sorted(refs.items()):
        if name.startswith(("refs/heads/", "refs/tags/")) and name != own:
            git(["update-ref", name, oid], cwd=place.worktree)
            count += 1
    if agent_head is not None and agent_head != head:
        from sandbox.store import lfsstore

        # The index refresh cleans the worktree's LFS files: git-lfs kept off the run's .lfsconfig.
        options, env = lfsstore.host_checkout(place.git_dir, run.project.common_dir, run.run_id)
        git([*options, "reset", "-q", "--mixed", agent_head], cwd=place.worktree, env=env)
    return count
