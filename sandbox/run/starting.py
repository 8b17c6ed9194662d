"""_Making a run (:meth:`RunCore.start <sandbox.run.core.RunCore.start>`): its first part begun
(:mod:`sandbox.run.prestart`), then the snapshot, the worktree moved onto it, and the ledger's first event."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sandbox import faults
from sandbox.models import Event, EventKind, RunInfo
from sandbox.store import objects, trailers
from sandbox.store.ledger import new_event_id

if TYPE_CHECKING:
    import contextlib

    import pygit2

    from sandbox.run.prestart import Prestart
    from sandbox.store import layout
    from sandbox.store.project import Project


class _Making(Protocol):
    """What :func:`start` uses of the run it makes (a :class:`~sandbox.run.core.RunCore`)."""

    dir: str
    include_report: Any
    repo: pygit2.Repository

    def set_place(self, place: layout.Place) -> None: ...
    def set_start_refs(self, commit: str) -> None: ...
    def git_settings(self) -> tuple[list[tuple[str, str]], str | None]: ...
    def lock(self, timeout: float = ...) -> contextlib.AbstractContextManager[None]: ...
    def record_event(self, event: Event, *, keep: Iterable[str] = ...) -> object: ...


R = TypeVar("R", bound=_Making)

faults.POINTS.update({"start.after_refs", "start.after_worktree", "start.after_ledger"})


def start(
    make: Callable[[Project, str], R],
    project: Project,
    workdir: str,
    label: str | None,
    progress: Callable[[str], None] | None,
    begun: Prestart | None,
) -> R:
    """:meth:`RunCore.start <sandbox.run.core.RunCore.start>`; ``make`` opens the run object (the class)."""
    from sandbox.run import prestart
    from sandbox.run.labels import check_label
    from sandbox.store import snapshot

    if begun is not None and not begun.matches(project.common_dir, workdir, project.homes_dir):
        begun.abandon()
        begun = None
    try:
        if label is not None:
            check_label(label, "run")
        objects.enable_fsync()
        if begun is None:
            git_dir = snapshot.user_git_dir(workdir)
            head, head_ref = snapshot.head_of(git_dir)
            homes = project.homes_dir
            begun = prestart.begin(project.common_dir, git_dir, workdir, homes, head, head_ref, progress)
    except BaseException:
        if begun is not None:
            begun.abandon()
        raise
    try:
        return _finish(make, project, begun, label, progress)
    finally:
        begun.release()


def _finish(
    make: Callable[[Project, str], R],
    project: Project,
    begun: Prestart,
    label: str | None,
    progress: Callable[[str], None] | None,
) -> R:
    """What :func:`start` does once its first part is begun: the snapshot, the worktree moved to it, the ledger."""
    from sandbox.store import history, snapshot, worktree

    say = progress or (lambda _line: None)
    run_id, workdir, place = begun.run_id, begun.workdir, begun.place
    assert place is not None and begun.adding is not None
    run = make(project, run_id)
    run.set_place(place)
    with run.lock():  # held already by ``begun`` (the lock is re-entrant): taken again for the ledger's writes
        try:
            say("Taking a snapshot of your working tree")
            message = trailers.message(f"sandbox snapshot of {workdir}", [(trailers.RUN, run_id)])
            snap = snapshot.finish(run.repo, begun.adding, begun.head, begun.head_ref, message)
            history.complete(project.common_dir, run_id, snap.commit, snap.tree, snap.head)
            run.set_start_refs(snap.commit)
            faults.point("start.after_refs")
            if begun.checkout is not None and begun.head is not None:
                say("Checking out the run's worktree")
                worktree.finish_checkout(begun.checkout)
                worktree.advance(place, run_id, begun.head, snap.commit)
            else:
                worktree.create(place, project.common_dir, snap.commit, run_id, *run.git_settings())
        finally:
            begun.stop()  # when a step failed: the gits stopped (gc reclaims the home)
        path = place.worktree
        faults.point("start.after_worktree")
        from sandbox.run import include

        say("Finishing the worktree")
        run.include_report = include.populate(workdir, path, run.dir)
        info = RunInfo(
            run_id=run_id,
            label=label,
            base=snap.commit,
            head=snap.head,
            head_ref=snap.head_ref,
            worktree=path,
            user_workdir=workdir,
            submodules=snap.submodules,
            host=socket.gethostname(),
        )
        event = Event(event_id=new_event_id(), kind=EventKind.run_started, run_id=run_id, run=info, pid=os.getpid())
        run.record_event(event, keep=[snap.commit])
        faults.point("start.after_ledger")
    return run
