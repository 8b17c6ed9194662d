"""Best-of-N: several runs from one snapshot, and runs forked from another run's state.

:func:`start_many` takes ONE snapshot of the user's working tree and makes N runs on it: N homes,
whose checkouts run as parallel git processes (as many at once as there are CPUs), then N ledgers.
The runs share the snapshot commit as their ``base``, so their patches are comparable path by path
(:mod:`sandbox.runs.compare`), and a ``group`` id in their start event, which ``sandbox drop
--all-but`` uses.

:func:`fork` starts a new run from another run's state (its head, the state after one of its calls,
or a checkpoint's). The fork has the same base (the same snapshot of the user's tree), and its first
call, ``fork``, records the source's changes up to that state, so the fork's patch, ``diff`` and
``apply`` cover everything the fork holds, exactly like any other run's.

Crash safety is :meth:`sandbox.run.run.Run.start`'s: each run's home is recorded before it is made,
and its ledger (which makes the run exist) is written last; ``sandbox gc`` reclaims what a kill
left of the runs whose ledger was not written.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator

from sandbox import faults
from sandbox.errors import SandboxError, UsageError
from sandbox.models import Event, EventKind, RunInfo
from sandbox.run.core import set_head_ref
from sandbox.run.fold import TERMINAL_STATUSES, fold_event
from sandbox.run.ids import new_run_id
from sandbox.run.run import Run
from sandbox.store import history, layout, objects, runstore, snapshot, trailers, worktree
from sandbox.store.ledger import new_event_id
from sandbox.store.project import Project

faults.POINTS.update({"many.after_checkouts", "many.after_ledger"})

#: The most runs one ``start --count`` makes (each is a full checkout).
MAX_COUNT = 32


def _fresh_id(project: Project, taken: set[str]) -> str:
    while True:
        run_id = new_run_id()
        if run_id in taken or os.path.exists(project.run_dir(run_id)):
            continue
        if os.path.lexists(project.new_place(run_id).home or ""):
            continue
        taken.add(run_id)
        return run_id


@contextlib.contextmanager
def _locked(runs: list[Run]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for run in runs:
            stack.enter_context(run.lock())
        yield


def start_many(project: Project, workdir: str, count: int, label: str | None = None) -> list[Run]:
    """Snapshot ``workdir`` once and make ``count`` runs on that snapshot (labels ``L-1`` ... ``L-N``)."""
    if not 1 <= count <= MAX_COUNT:
        raise UsageError(f"--count must be between 1 and {MAX_COUNT}; each run is a full checkout of your tree.")
    if label is not None:
        from sandbox.run.labels import check_label

        check_label(label, "run")
    objects.enable_fsync()
    taken: set[str] = set()
    runs = [Run(project, _fresh_id(project, taken)) for _ in range(count)]
    group = runs[0].run_id
    with _locked(runs):
        user_head = snapshot.user_head(workdir)
        places = [run.reserve_place() for run in runs]
        settings = runs[0].git_settings()
        start_at = user_head
        if start_at is not None:
            for run, place in zip(runs, places, strict=True):
                worktree.init(place, project.common_dir, start_at, run.run_id, *settings)
        ids = " ".join(r.run_id for r in runs)
        message = trailers.message(f"sandbox snapshot of {workdir}", [(trailers.RUNS, ids)])
        # The checkouts of the user's HEAD start now and overlap the snapshot (as in Run.start).
        pending = _Checkouts(places if start_at is not None else [])
        try:
            first = runs[0].run_id
            snap = snapshot.take(
                runs[0].repo, workdir, runs[0].dir, message, runstore.git_env(project.common_dir, first)
            )
            history.complete(project.common_dir, first, snap.commit, snap.tree, snap.head)
            for run in runs[1:]:  # one snapshot, in every run's own store
                runstore.share(project.common_dir, first, run.run_id)
            with objects.git_writes():
                for run in runs:
                    project.repo.references.create(layout.ref_name(run.run_id, "base"), snap.commit, force=True)
                    set_head_ref(project.repo, run.run_id, snap.commit)
            pending.finish()
        finally:
            pending.stop()
        for run, place in zip(runs, places, strict=True):
            if start_at is not None:
                worktree.advance(place, run.run_id, start_at, snap.commit)
            else:
                worktree.create(place, project.common_dir, snap.commit, run.run_id, *settings)
        faults.point("many.after_checkouts")
        from sandbox.run import include

        for i, (run, place) in enumerate(zip(runs, places, strict=True), 1):
            run.include_report = include.populate(workdir, place.worktree, run.dir)
            info = RunInfo(
                run_id=run.run_id,
                label=f"{label}-{i}" if label and count > 1 else label,
                base=snap.commit,
                head=snap.head,
                head_ref=snap.head_ref,
                worktree=place.worktree,
                user_workdir=workdir,
                submodules=snap.submodules,
                host=socket.gethostname(),
                group=group if count > 1 else None,
            )
            event = Event(
                event_id=new_event_id(), kind=EventKind.run_started, run_id=run.run_id, run=info, pid=os.getpid()
            )
            run.record_event(event, keep=[snap.commit])
            faults.point("many.after_ledger")
    return runs


class _Checkouts:
    """Checkouts of several homes, at most one per CPU at a time (each is one git process)."""

    def __init__(self, places: list[layout.Place]) -> None:
        self.waiting = list(places)
        self.running: list[subprocess.Popen[bytes]] = []
        self.width = max(1, os.cpu_count() or 1)
        self._fill()

    def _fill(self) -> None:
        while self.waiting and len(self.running) < self.width:
            self.running.append(worktree.start_checkout(self.waiting.pop(0)))

    def finish(self) -> None:
        """Wait for every checkout; :class:`sandbox.store.gitcli.GitCommandError` when one failed."""
        while self.running:
            proc = self.running.pop(0)
            worktree.finish_checkout(proc)
            self._fill()

    def stop(self) -> None:
        """Stop what still runs (the snapshot failed: gc reclaims the homes)."""
        self.waiting.clear()
        for proc in self.running:
            proc.kill()
            proc.wait()
        self.running.clear()


# -- fork --------------------------------------------------------------------------------------------


def state_at(source: Run, at: str | None) -> tuple[str, str | None]:
    """The commit of ``source``'s state to fork from, and what ``at`` named (call id or checkpoint)."""
    if not at:
        return source.head(), None
    from sandbox.errors import UnknownCallError
    from sandbox.run.names import resolve_call_id

    try:  # a call by any of its names (id, @~N, #N, prefix: sandbox.run.names), else a checkpoint
        call_id: str | None = resolve_call_id(source, at)
    except UnknownCallError:
        call_id = None
    if call_id is not None:
        at = call_id
        folded = source.new_state()
        for oid, event in source.events():
            fold_event(folded, event, oid)
            entry = folded.calls.get(at)
            if event.call_id == at and entry is not None and entry.status in TERMINAL_STATUSES:
                assert folded.head is not None
                return folded.head, at
        raise SandboxError(f"Call {at} of run {source.run_id} has not ended; fork from a call that has.")
    from sandbox.run.checkpoint import CheckpointNotFoundError, CheckpointStore

    try:
        found = CheckpointStore(source).find(at)
    except CheckpointNotFoundError:
        raise UsageError(
            f"Run {source.run_id} has no call or checkpoint {at!r}; see 'sandbox log {source.run_id}' "
            f"and 'sandbox checkpoints {source.run_id}'."
        ) from None
    return found.checkpoint.file_snapshot.commit, found.checkpoint.name


def fork(source: Run, at: str | None = None, label: str | None = None) -> Run:
    """A new run from ``source``'s state (its head, or the state after call / at checkpoint ``at``)."""
    objects.enable_fsync()
    if label is not None:
        from sandbox.run.labels import check_label

        check_label(label, "run")
    project = source.project
    target, named = state_at(source, at)
    info = source.info
    run = Run(project, _fresh_id(project, set()))
    origin = f"{source.run_id}@{named}" if named else source.run_id
    with run.lock():
        place = run.reserve_place()
        # The fork reads the source's objects (its snapshot, its calls' files up to ``target``): its store gets them.
        runstore.share(project.common_dir, source.run_id, run.run_id)
        worktree.create(place, project.common_dir, target, run.run_id, *run.git_settings())
        with objects.git_writes():
            project.repo.references.create(layout.ref_name(run.run_id, "base"), info.base, force=True)
            set_head_ref(project.repo, run.run_id, info.base)
        from sandbox.run import include

        run.include_report = include.populate(source.user_workdir, place.worktree, run.dir)
        started = RunInfo(
            run_id=run.run_id,
            label=label or _free_label(project, f"{info.label or source.run_id}-fork"),
            base=info.base,
            head=info.head,
            head_ref=info.head_ref,
            worktree=place.worktree,
            user_workdir=source.user_workdir,
            submodules=info.submodules,
            host=socket.gethostname(),
            group=info.group or source.run_id,
            forked_from=origin,
        )
        event = Event(
            event_id=new_event_id(), kind=EventKind.run_started, run_id=run.run_id, run=started, pid=os.getpid()
        )
        run.record_event(event, keep=[info.base])
        # The source's changes up to that state, as the fork's first call: diff and apply cover them.
        changes = objects.diff_trees(project.repo, source_tree(source, info.base), source_tree(source, target))
        paths = [c.path for c in changes]
        if paths:
            call_input = {"from": source.run_id, "at": named}
            call_id = run.start_call("fork", call_input, idempotency="idempotent", replay="auto")
            run.finish_call(call_id, "succeeded", paths=paths, result={"from": origin, "paths": len(paths)})
    return run


def _free_label(project: Project, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``-3``...: a label no run has (a label names a run on the command line)."""
    from sandbox.run.names import run_labels

    taken = set(run_labels(project).values())
    label, n = wanted, 1
    while label in taken:
        n += 1
        label = f"{wanted}-{n}"
    return label


def source_tree(source: Run, commit: str) -> str | None:
    """The root tree of one of ``source``'s commits."""
    return objects.commit_tree(source.repo, commit)


def group_of(project: Project, run: Run) -> list[str]:
    """The runs of ``run``'s group (started together, or forked from one another), ``run`` included."""
    info = run.info
    mine = {run.run_id, info.group} - {None}
    out = []
    for run_id in project.run_ids():
        if run_id == run.run_id:
            out.append(run_id)
            continue
        with contextlib.suppress(SandboxError):
            other = Run.open(project, run_id).info
            if other.group in mine or other.run_id in mine:
                out.append(run_id)
    return out
