"""Taking a rewind back with ``sandbox undo``, and doing it again with ``sandbox redo``.

A rewind (:mod:`sandbox.recovery.rewind`) moves the run's files back as a forward
``rollback_files`` event and names itself in a ``note`` event (``rewind``) that records the
automatic checkpoint just before it (``undo_to``). Right after a rewind, ``sandbox undo`` takes it
back: the run's files go forward again to that checkpoint (one more ``rollback_files`` event,
nothing erased) and a ``note`` (``rewind_undo``) says so and names the conversation the run goes on
in (the one before the rewind). ``sandbox redo`` then rewinds again to the same point (``rewind_redo``,
naming the fork). Only the run's worktree and ledger move: the user's repository is never written,
so an apply the user made stays theirs (the apply-level ``sandbox undo`` is the one for it).

"Right after" is checked on the ledger: once a call ran, an apply, undo or redo was made, or the
run's head moved otherwise since the rewind (or its undo), undo and redo are about that, not the
rewind. The agent's forked conversation is kept either way: it is evidence, and a redo reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.errors import SandboxError
from sandbox.models import EventKind
from sandbox.recovery.actions import RollbackFilesReport, rollback_files
from sandbox.store import journal

if TYPE_CHECKING:
    from sandbox.models import UndoReport
    from sandbox.run.run import Run

UNDO_NOTE = "rewind_undo"
REDO_NOTE = "rewind_redo"
#: Events after which the rewind is no longer the newest thing done to the run's files.
_MOVES = frozenset(
    {
        EventKind.call_started,
        EventKind.apply_started,
        EventKind.apply_finished,
        EventKind.undo,
        EventKind.redo,
        EventKind.head_moved,
        EventKind.rollback_files,
    }
)


@dataclass
class RewindStep:
    """The newest rewind, or undo or redo of one, with what taking it back or again needs."""

    #: "rewind", "undo" or "redo".
    op: str
    call_id: str
    #: The automatic checkpoint just before the rewind (an undo goes back to it).
    undo_to: str
    #: The automatic checkpoint at the call's start (the rewind's, and a redo's, target).
    checkpoint: str
    #: The run's head right after the step: the run must still be there.
    head: str | None
    session: str | None
    from_session: str | None


@dataclass
class RewindMove:
    """What ``undo``/``redo`` of a rewind did."""

    op: str
    call_id: str
    files: RollbackFilesReport
    session: str | None
    message: str


def last_step(run: Run) -> RewindStep | None:
    """The rewind step ``undo``/``redo`` acts on: the newest one, when nothing moved the files since."""
    if not any("rewind" in note for note in run.state().data.note):
        return None  # never rewound (the fold keeps every note): a plain undo reads no ledger events
    step: RewindStep | None = None
    moved = False
    for _oid, event in run.events_read():
        if event.kind in _MOVES:
            moved = True  # unless a note of ours follows: each step's own rollback_files comes just before it
            continue
        if event.kind != EventKind.note:
            continue
        made = event.data.get("rewind")
        if isinstance(made, dict):
            step, moved = _step("rewind", made), False
        elif step is not None and isinstance(note := event.data.get(UNDO_NOTE), dict):
            step.op, step.head, moved = "undo", note.get("head"), False
        elif step is not None and isinstance(note := event.data.get(REDO_NOTE), dict):
            step.op, step.head, moved = "redo", note.get("head"), False
    if step is None or moved or step.head != run.state().head or _pending(run):
        return None
    return step


def _step(op: str, made: dict[str, object]) -> RewindStep | None:
    undo_to, checkpoint, call_id = made.get("undo_to"), made.get("checkpoint"), made.get("to")
    if not (isinstance(undo_to, str) and isinstance(checkpoint, str) and isinstance(call_id, str)):
        return None  # recorded before rewinds could be taken back
    head, session, old = made.get("head"), made.get("session"), made.get("from_session")
    return RewindStep(
        op,
        call_id,
        undo_to,
        checkpoint,
        head if isinstance(head, str) else None,
        session if isinstance(session, str) else None,
        old if isinstance(old, str) else None,
    )


def _pending(run: Run) -> bool:
    """An interrupted apply, undo or redo is journaled: ``sandbox undo`` rolls that back first."""
    return any(journal.load(run.project, d) is not None for d in (run.user_workdir, run.worktree))


def undo_rewind(run: Run) -> RewindMove | None:
    """Take the newest rewind back (the files as they were just before it); None when it is not the newest step."""
    step = last_step(run)
    if step is None or step.op == "undo":
        return None
    return _move(run, step, "undo")


def redo_rewind(run: Run) -> RewindMove | None:
    """Rewind again after ``undo_rewind``; None when the newest step is not such an undo."""
    step = last_step(run)
    if step is None or step.op != "undo":
        return None
    return _move(run, step, "redo")


def _move(run: Run, step: RewindStep, op: str) -> RewindMove:
    target = step.undo_to if op == "undo" else step.checkpoint
    try:
        files = rollback_files(run, target)
    except SandboxError as exc:
        raise SandboxError(f"Cannot {op} the rewind to before call {step.call_id}: {exc.message}") from exc
    # The conversation the run goes on in: the one before the rewind, or the rewind's fork again.
    session = step.from_session if op == "undo" else (step.session or step.from_session)
    head = run.state().head
    what = "took back the rewind" if op == "undo" else "rewound again"
    run.record(
        EventKind.note,
        reason=f"{what} to just before call {step.call_id}",
        data={(UNDO_NOTE if op == "undo" else REDO_NOTE): {"to": step.call_id, "head": head, "session": session}},
        epoch=run.state().epoch,
    )
    if op == "undo":
        text = f"Took back the rewind to before call {step.call_id}: {len(files.files)} path(s) of the run's files "
        text += "are as they were before it; 'sandbox redo' rewinds again."
    else:
        text = f"Rewound again to before call {step.call_id}: {len(files.files)} path(s) of the run's files restored."
    return RewindMove(op, step.call_id, files, session, text)


def undo_report(run: Run, op: str) -> tuple[UndoReport, str] | None:
    """Undo (``op`` "undo") or redo the run's newest rewind when it is the newest thing done to the
    run's files: the report ``sandbox undo``/``redo`` give for it, and the line to show; None when
    the newest thing is not a rewind."""
    from sandbox.models import UndoReport

    moved = undo_rewind(run) if op == "undo" else redo_rewind(run)
    if moved is None:
        return None
    paths = [f.path for f in moved.files.files]
    report = UndoReport(
        op=op,
        run=run.run_id,
        call=moved.call_id,
        target="sandbox",
        target_dir=run.worktree,
        calls=[moved.call_id],
        head=run.state().head,
        **({"restored": paths} if op == "undo" else {"applied": paths}),
    )
    return report, moved.message
