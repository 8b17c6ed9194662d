"""The first part of a start, in the standard library only: the run's lock, its home, and its two gits.

Most of ``sandbox start`` at 100k files is git's checkout of the user's HEAD into the run's worktree
(docs/design.md, "Worktree"). :func:`begin` takes a new run id's lock, records and makes the run's home
(its own git dir at the user's HEAD) and starts two gits in the background: the checkout, and the
snapshot's ``git add -A`` into a copy of the user's index (:mod:`sandbox.store.snapadd`).
:meth:`RunCore.start <sandbox.run.core.RunCore.start>` then takes the snapshot and makes the run. It
imports nothing but the standard library, so the ``sandbox`` command calls it before it imports click,
pygit2 and pydantic (:mod:`sandbox.cli.earlystart`): the checkout and the add run while the process
imports them.

The steps and their order are those of a start made in one piece: lock, ``place`` recorded, home made,
gits started. A start killed anywhere in them leaves a run directory and a home with no ledger ref, which
``sandbox gc`` removes (the crash matrix kills it at ``start.after_lock``, ``worktree.create.after_init``
and ``start.after_spawn``); the user's repository gets only the run directory and the objects ``git add``
writes, as before.
"""

from __future__ import annotations

import contextlib
import os

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.run.ids import new_run_id
from sandbox.store import layout, runstore, snapadd, worktree
from sandbox.store.fsutil import atomic_write
from sandbox.store.locks import remove_locked_dir, run_lock

TYPE_CHECKING = False  # no typing at run time: the command's start (sandbox.cli.earlystart)
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

faults.POINTS.update({"start.after_lock", "start.after_spawn"})


class Prestart:
    """A start's first part (:func:`begin`): the run's lock held, its home made, the checkout of the user's
    HEAD and the snapshot's ``git add -A`` running. Finished by ``RunCore.start``, else :meth:`abandon`."""

    def __init__(
        self,
        common_dir: str,
        git_dir: str,
        workdir: str,
        run_id: str,
        head: str | None,
        head_ref: str | None,
        lock: contextlib.ExitStack,
    ) -> None:
        self.common_dir = common_dir
        #: The user's git dir (a linked worktree's own) and working tree the snapshot is taken of.
        self.git_dir = git_dir
        self.workdir = workdir
        self.run_id = run_id
        #: The user's HEAD (None: no commit yet) and its branch (None: detached), read before the add began.
        self.head = head
        self.head_ref = head_ref
        self.place: layout.Place | None = None
        #: The checkout of ``head`` into the run's worktree (None without a commit to check out).
        self.checkout: subprocess.Popen[bytes] | None = None
        self.adding: snapadd.Adding | None = None
        self._lock = lock

    def matches(self, common_dir: str, workdir: str, homes_dir: str) -> bool:
        """True when this was begun for the repository, working tree and homes a command found since."""
        home = self.place.home if self.place is not None else None
        return (self.common_dir, self.workdir) == (common_dir, workdir) and (
            home is None or os.path.dirname(home) == homes_dir
        )

    def stop(self) -> None:
        """Stop both gits if they still run (what they made stays for ``sandbox gc``, as after a crash)."""
        if self.checkout is not None and self.checkout.returncode is None:
            with contextlib.suppress(OSError):
                self.checkout.kill()
            self.checkout.wait()
        if self.adding is not None:
            self.adding.stop()

    def release(self) -> None:
        """Let go of the run's lock (``RunCore.start`` holds it on its own by then: it is re-entrant)."""
        self._lock.close()

    def abandon(self) -> None:
        """Undo what was begun (a command that did not go on to make the run): the gits stopped, the home
        and the run's directory removed under its lock, then the lock let go."""
        try:
            self.stop()
            if self.place is not None:
                worktree.remove_place(self.common_dir, self.place)
            runstore.retire(self.common_dir, self.run_id)
            remove_locked_dir(layout.run_dir(self.common_dir, self.run_id))
        finally:
            self.release()


def begin(
    common_dir: str,
    git_dir: str,
    workdir: str,
    homes_dir: str,
    head: str | None,
    head_ref: str | None,
    progress: Callable[[str], None] | None = None,
) -> Prestart:
    """Begin a start of a new run of the repository ``common_dir`` from the working tree ``workdir`` (its git
    dir ``git_dir``, whose HEAD is ``head`` on ``head_ref``), its home under ``homes_dir``.

    ``progress`` gets git's progress meter of the checkout, line by line. On an error (or Ctrl-C) what was
    begun is undone (:meth:`Prestart.abandon`) before it is raised.
    """
    run_id = new_run_id()
    while os.path.exists(layout.run_dir(common_dir, run_id)) or os.path.lexists(os.path.join(homes_dir, run_id)):
        run_id = new_run_id()
    lock = contextlib.ExitStack()
    # Taking the lock makes the run's directory (again, if a concurrent gc removes it first).
    lock.enter_context(run_lock(layout.run_lock_path(common_dir, run_id), f"Run {run_id}").hold())
    started = Prestart(common_dir, git_dir, workdir, run_id, head, head_ref, lock)
    try:
        faults.point("start.after_lock")
        # Checking out the user's HEAD is most of a start at 100k files: it runs (in git) while the
        # snapshot is taken; then only the paths the snapshot changes are written on top.
        place = started.place = reserve(common_dir, run_id, layout.home_place(os.path.join(homes_dir, run_id)))
        runstore.create(common_dir, run_id)  # before anything is written for the run: its objects go there
        if head is not None:
            config, object_format = worktree.settings_of(common_dir)
            worktree.init(place, common_dir, head, run_id, config, object_format)
            started.checkout = worktree.start_checkout(place, progress, worktree.checkout_workers(config))
        started.adding = snapadd.begin(
            workdir, git_dir, layout.run_dir(common_dir, run_id), runstore.git_env(common_dir, run_id)
        )
        faults.point("start.after_spawn")
    except BaseException:
        started.abandon()  # what was made is this run's alone: removed now rather than left for gc
        raise
    return started


def reserve(common_dir: str, run_id: str, place: layout.Place) -> layout.Place:
    """Record ``place`` as the home of run ``run_id`` before anything is made there, so ``sandbox gc``
    finds what a killed command leaves; ``place``, not yet made."""
    assert place.home is not None
    if os.path.lexists(place.worktree) or os.path.lexists(place.git_dir):
        raise SandboxError(f"The home {place.home} of run {run_id} is in use already; run 'sandbox gc' and try again.")
    run_dir = layout.run_dir(common_dir, run_id)
    os.makedirs(run_dir, exist_ok=True)
    atomic_write(os.path.join(run_dir, layout.PLACE_FILE), (place.home + "\n").encode())
    return place
