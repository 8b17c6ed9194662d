"""A call's life in the ledger: planned, started, finished (its files as one commit), refused, not run,
a violation, resolved after an uncertain end.

Each function takes the run's :class:`~sandbox.run.core.RunCore` and writes only through its
:meth:`~sandbox.run.core.RunCore.record` and :meth:`~sandbox.run.core.RunCore.move_head`;
:class:`~sandbox.run.run.Run` offers them as methods (``run.start_call(...)``). The parameters a
caller gives about a call are :class:`~sandbox.run.callspec.CallOptions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

import pygit2

from sandbox import faults
from sandbox.errors import SandboxError, StaleWriterError, UnknownCallError, UsageError
from sandbox.models import (
    Approval,
    CallFinishData,
    CallStatus,
    EventKind,
    FileChange,
    LedgerEntry,
    LedgerState,
    ProcessScope,
)
from sandbox.run.callspec import INLINE_LIMIT, CallOptions, prepare
from sandbox.run.core import RunCore
from sandbox.run.fold import FAILED_MARKS, TERMINAL_STATUSES
from sandbox.run.output import Tail, attach
from sandbox.store import layout, objects, trailers
from sandbox.store.ledger import StorageError
from sandbox.store.preread import LIVE, Reader

if TYPE_CHECKING:
    from sandbox.store.capture import Capturer

faults.POINTS.update(
    {
        "call.start.before",
        "call.start.after",
        "call.finish.before",
        "call.finish.after_capture",
        "call.finish.after_commit",
        "call.finish.after_ledger",
        "call.finish.after_head_ref",
    }
)

#: An error's one-line summary is at most this long; the whole text is kept beside it.
ERROR_LINE = 300
#: The key of a call's result naming the directories whose files were not recorded because each holds a
#: git repository of its own (the agent's ``git init sub``, staged or not): recorded as nothing, said so.
NESTED_KEY = "nested_repositories"


class RecordingFailedError(SandboxError):
    """A started call's changes could not be stored; the message says how it ended and what to do."""


class ErrorFields(TypedDict, total=False):
    """How an event keeps a call's error: one line, and the whole text inline or in a blob."""

    error: str | None
    error_detail: str
    error_ref: str


class _FinishFields(TypedDict, total=False):
    """The fields of a call's end event besides its kind, call, files and error (:class:`ErrorFields`)."""

    result_ref: str | None
    result: Any
    epoch: int
    data: CallFinishData


class _Settled(Exception):
    """The call already has its final state: recording another would add nothing."""


def plan_call(run: RunCore, tool_name: str, input: Any, options: CallOptions) -> str:
    """Record a planned call (for runtimes that ask before acting); returns its call id."""
    call_id, spec, attachments = prepare(tool_name, input, options)

    def check(state: LedgerState) -> None:
        if call_id in state.calls:
            raise UsageError(f"Run {run.run_id} already has a call {call_id!r}.")

    run.record_event(
        run.new_event(EventKind.call_planned, call_id, call=spec, epoch=run.state().epoch),
        attachments=attachments,
        check=check,
    )
    return call_id


def start_call(
    run: RunCore, tool_name: str, input: Any, options: CallOptions, procs: ProcessScope | None = None
) -> str:
    """Durably record that a call is starting; returns its call id (see :meth:`sandbox.run.run.Run.start_call`)."""
    call_id, spec, attachments = prepare(tool_name, input, options)
    faults.point("call.start.before")
    if not run.worktree_exists():
        raise SandboxError(
            f"The worktree of run {run.run_id} is missing; run 'sandbox resume {run.run_id}' to recreate "
            "it before recording calls."
        )
    existing: list[LedgerEntry] = []

    def check(state: LedgerState) -> None:
        entry = state.calls.get(call_id)
        if entry is None:
            return
        if entry.approval == Approval.denied:
            raise SandboxError(
                f"Call {call_id} was denied ({entry.denial_reason or 'no reason given'}); it must not run."
            )
        if entry.status in TERMINAL_STATUSES or entry.status == CallStatus.uncertain:
            raise SandboxError(f"Call {call_id} already ended as {entry.status.value}; use a new call id.")
        if entry.status == CallStatus.started:
            existing.append(entry)

    state = run.state()
    event = run.new_event(EventKind.call_started, call_id, call=spec, epoch=state.epoch, procs=procs)
    run.record_event(event, attachments=attachments, check=check)
    faults.point("call.start.after")
    return call_id


def finish_call(
    run: RunCore,
    call_id: str,
    status: CallStatus | str,
    *,
    paths: Iterable[str] | None = (),
    result: Any = None,
    error: str | None = None,
    mark: str | None = None,
    ran_ms: int | None = None,
    output: Mapping[str, Tail] | None = None,
) -> LedgerEntry:
    """Record a call's end, with its file changes as exactly one commit on the run's head (see
    :meth:`sandbox.run.run.Run.finish_call`)."""
    try:
        final = CallStatus(status)
    except ValueError:
        raise UsageError(f"Unknown status {status!r}; use succeeded or failed.") from None
    if final not in (CallStatus.succeeded, CallStatus.failed):
        raise UsageError(f"A call finishes as succeeded or failed, not {final.value}.")
    data = CallFinishData()
    if mark is not None:
        if mark not in FAILED_MARKS or final != CallStatus.failed:
            raise UsageError(f"A call is marked {mark!r} only as failed, and only interrupted or violation.")
        if mark == "interrupted":
            data["interrupted"] = True
        else:
            data["violation"] = True
    if ran_ms is not None and ran_ms >= 0:
        data["ran_ms"] = int(ran_ms)
    faults.point("call.finish.before")
    try:
        return _finish(run, call_id, final, paths, result, error, data, output)
    except StorageError as exc:
        _record_failure(run, call_id, final, error, exc)


def _record_failure(run: RunCore, call_id: str, final: CallStatus, error: str | None, exc: StorageError) -> NoReturn:
    """The call's changes could not be stored: end it as failed with the reason, or say how to finish it.

    Its ``started`` event is durable, so "nothing was recorded" would be false: the call either
    ends ``failed`` (one small event, which often still fits when a pack did not) or stays
    ``started``, and the message says which and what to do.
    """
    reason = exc.reason.rstrip(".")
    why = f"its changes could not be recorded ({reason})" + (f"; {error}" if error else "")
    try:
        state = run.state()
        event = run.new_event(EventKind.call_failed, call_id, error=why, epoch=state.epoch)
        run.record_event(event, check=lambda s: check_writer(run, s, s.calls[call_id]))
    except StorageError as again:
        raise RecordingFailedError(
            f"Call {call_id} of run {run.run_id} started (that is recorded), but neither its changes nor its "
            f"end could be recorded ({reason}); it stays started and its files stay in the worktree. Free some "
            f"space, then run 'sandbox call finish {run.run_id} {call_id} --status {final.value}' to record it."
        ) from again
    raise RecordingFailedError(
        f"Call {call_id} of run {run.run_id} started, but its changes could not be recorded ({reason}); it "
        "was recorded as failed with that reason, and its files stay in the worktree unrecorded "
        f"('sandbox resume {run.run_id}' reports them)."
    ) from exc


@dataclass
class _ReadFirst:
    """What a recording read of the agent's files before it takes the lock other runs need."""

    reader: Reader = LIVE
    #: The paths libgit2's status named (for a call whose paths only a scan can tell).
    status: set[str] | None = None
    #: Why the reading failed: raised where the capture would have failed (the call ends failed).
    error: Exception | None = None


def _read_first(run: RunCore, paths: Iterable[str] | None) -> _ReadFirst:
    """Scan and read the call's files holding the run's lock only (:mod:`sandbox.store.preread`):
    in the host, one run's huge or many files cost that run's call, never another run's."""
    from sandbox.store import scan
    from sandbox.store.capture import MAX_DEPTH, skip
    from sandbox.store.preread import Preread

    out = _ReadFirst()
    with run.outside_shared_lock():
        try:
            if paths is None:  # in the host, in a worker: libgit2 reads by name, holding Python's lock
                status = scan.status_paths_in_worker if run.scan_in_worker else scan.status_paths
                out.status = status(run.worktree)
            pre = Preread(
                run.worktree,
                limit=run.max_read_bytes(),
                skip=lambda rel: skip(rel) or run.is_private(rel),
                is_ignored=run.is_ignored,
                max_depth=MAX_DEPTH,
            )
            pre.fill(paths if paths is not None else out.status or ())
            out.reader = pre
        except (SandboxError, pygit2.GitError, OSError, ValueError, RecursionError) as exc:
            out.error = exc
    return out


def _capture_call(
    run: RunCore, call_id: str, head_tree: str | None, paths: Iterable[str] | None, first: _ReadFirst
) -> tuple[Capturer, str | None]:
    """What the call changed in the worktree (``paths``, or a scan when None) and the tree it makes.

    Whatever stops the recording (a tree too deep, a name git refuses, a file that cannot be read
    safely, a scan libgit2 gives up on) is a :class:`StorageError` with its reason: the call then
    ends ``failed`` with it (:func:`_record_failure`), never stays ``started``.
    """
    from sandbox.store import scan
    from sandbox.store.capture import CallTooLargeError, capture

    try:
        if first.error is not None:
            raise first.error
        if paths is None:
            candidates = (first.status or set()) | scan.head_paths(run.repo, run.worktree, head_tree)
        else:
            candidates = set(paths)
        cap = capture(
            run.repo,
            run.worktree,
            head_tree,
            candidates,
            run.is_ignored,
            run.is_private,
            max_bytes=run.max_call_bytes(),
            max_read=run.max_read_bytes(),
            reader=first.reader,
        )
        faults.point("call.finish.after_capture")
        tree = objects.edit_tree(run.repo, head_tree, cap.changes) if cap.changes else head_tree
    except CallTooLargeError as exc:  # the call ends failed; its files stay in the worktree
        raise StorageError(f"Call {call_id} is too large ({exc.message}).", reason=exc.message) from exc
    except SandboxError as exc:
        why = exc.message
        raise StorageError(f"Could not record the changes of call {call_id} ({why})", reason=why) from exc
    except (pygit2.GitError, OSError, ValueError, RecursionError) as exc:
        raise StorageError(f"Could not record the changes of call {call_id} ({exc}).", reason=str(exc)) from exc
    return cap, tree


def _finish(
    run: RunCore,
    call_id: str,
    final: CallStatus,
    paths: Iterable[str] | None,
    result: Any,
    error: str | None,
    data: CallFinishData | None = None,
    output: Mapping[str, Tail] | None = None,
) -> LedgerEntry:
    result, tails = attach(result, output or {})  # the output's tails: blobs beside the result
    # The call's objects and its event are made durable together, in one pack (sandbox.store.packs).
    with run.lock():
        entry = run.state().calls.get(call_id)
        if entry is None:
            raise UnknownCallError(f"Run {run.run_id} has no call {call_id!r}; start it first.")
        check_writer(run, run.state(), entry)
        paths = None if paths is None else list(paths)  # read twice: here and by the capture
        first = _read_first(run, paths)
        return _finish_read(run, call_id, final, paths, first, result, tails, error, data)


def _finish_read(
    run: RunCore,
    call_id: str,
    final: CallStatus,
    paths: Iterable[str] | None,
    first: _ReadFirst,
    result: Any,
    tails: Mapping[str, bytes],
    error: str | None,
    data: CallFinishData | None,
) -> LedgerEntry:
    """:func:`_finish` once the call's files are read: its objects and event made durable together."""
    with run.lock(), objects.batch(run.repo):
        state = run.state()
        entry = state.calls[call_id]
        check_writer(run, state, entry)
        head = state.head
        assert head is not None
        head_tree = objects.commit_tree(run.repo, head)
        cap, tree = _capture_call(run, call_id, head_tree, paths, first)
        result = _with_nested(result, cap.nested)
        result_data = layout.canonical_json(result) if result is not None else b""
        inline_result = result is not None and len(result_data) <= INLINE_LIMIT
        attachments = {"result.json": result_data} if result is not None and not inline_result else {}
        attachments.update(tails)
        kind = EventKind.call_succeeded if final == CallStatus.succeeded else EventKind.call_failed
        errors = error_fields(error, attachments)
        fields: _FinishFields = {
            "result_ref": str(pygit2.hash(attachments["result.json"])) if "result.json" in attachments else None,
            "result": result if inline_result else None,
            "epoch": state.epoch,
        }
        if data:
            fields["data"] = data

        def check(s: LedgerState) -> None:
            check_writer(run, s, s.calls[call_id])

        if tree is not None and tree != head_tree:
            msg = trailers.message(
                f"sandbox: {entry.tool_name} ({call_id})",
                [(trailers.RUN, run.run_id), (trailers.CALL, call_id), (trailers.STATUS, final.value)],
            )

            def files_of(commit: str) -> dict[str, list[FileChange]]:
                files = [
                    objects.file_change(rel, cap.before[rel], cap.changes[rel], f"{head}..{commit}", call_id)
                    for rel in sorted(cap.changes)
                ]
                return {"files": files}

            _commit, new_state = run.move_head(
                kind,
                call_id,
                tree=tree,
                parent=head,
                message=msg,
                attachments=attachments,
                check=check,
                fields_of=files_of,
                fault="call.finish",
                **errors,
                **fields,
            )
        else:
            new_state = run.record(kind, call_id, attachments=attachments, check=check, files=[], **errors, **fields)
            faults.point("call.finish.after_ledger")
        return new_state.calls[call_id]


def _with_nested(result: Any, nested: Iterable[str]) -> Any:
    """The call's result naming the nested repositories its capture left out (:data:`NESTED_KEY`)."""
    found = sorted(nested)
    if not found:
        return result
    base = dict(result) if isinstance(result, dict) else ({} if result is None else {"response": result})
    base[NESTED_KEY] = found
    return base


def nested_repositories(result: Any) -> list[str]:
    """The directories a call's result says were left out as repositories of their own."""
    found = result.get(NESTED_KEY) if isinstance(result, dict) else None
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def check_writer(run: RunCore, state: LedgerState, entry: LedgerEntry) -> None:
    """Refuse to end ``entry`` unless this process still owns it: started, in the run's current epoch."""
    if entry.status in TERMINAL_STATUSES:
        raise SandboxError(f"Call {entry.call_id} already ended as {entry.status.value}.")
    if entry.status == CallStatus.uncertain or entry.epoch != state.epoch:
        raise StaleWriterError(
            f"Run {run.run_id} was resumed after call {entry.call_id} started; this process no longer "
            "owns the run, so its changes were not committed (resume reports them as drift)."
        )
    if entry.status != CallStatus.started:
        raise SandboxError(f"Call {entry.call_id} is {entry.status.value}, not started; start it first.")


def not_run(run: RunCore, call_id: str, reason: str) -> LedgerEntry:
    """Record that a planned, approved or started call never ran (see :meth:`sandbox.run.run.Run.not_run`)."""

    def check(state: LedgerState) -> None:
        entry = state.calls.get(call_id)
        if entry is None:
            raise UnknownCallError(f"Run {run.run_id} has no call {call_id!r}; see 'sandbox log'.")
        if entry.status in TERMINAL_STATUSES or entry.status == CallStatus.uncertain:
            raise _Settled
        if entry.status == CallStatus.started and entry.epoch != state.epoch:
            raise _Settled  # a resume owns it now: it reports the call, not this process

    event = run.new_event(EventKind.call_not_run, call_id, epoch=run.state().epoch, **error_fields(reason, {}))
    try:
        return run.record_event(event, check=check).calls[call_id]
    except _Settled:
        return run.entry(call_id)


def violation(run: RunCore, call_id: str, reason: str) -> LedgerEntry:
    """Record that the agent ran a call the sandbox had refused (see :meth:`sandbox.run.run.Run.violation`)."""

    def check(state: LedgerState) -> None:
        entry = state.calls.get(call_id)
        if entry is None:
            raise UnknownCallError(f"Run {run.run_id} has no call {call_id!r}; see 'sandbox log'.")
        if entry.status != CallStatus.not_run:
            raise _Settled

    event = run.new_event(
        EventKind.call_failed,
        call_id,
        epoch=run.state().epoch,
        data={"violation": True},
        **error_fields(reason, {}),
    )
    try:
        return run.record_event(event, check=check).calls[call_id]
    except _Settled:
        return run.entry(call_id)


def refuse_call(run: RunCore, tool_name: str, input: Any, reason: str, options: CallOptions) -> LedgerEntry:
    """Record a call the sandbox refused before it started (see :meth:`sandbox.run.run.Run.refuse_call`)."""
    call_id, spec, attachments = prepare(tool_name, input, options)

    def check(state: LedgerState) -> None:
        if call_id in state.calls:
            raise _Settled

    event = run.new_event(
        EventKind.call_not_run, call_id, call=spec, epoch=run.state().epoch, **error_fields(reason, {})
    )
    try:
        return run.record_event(event, attachments=attachments, check=check).calls[call_id]
    except _Settled:
        return run.entry(call_id)


def error_text(run: RunCore, entry: LedgerEntry) -> str | None:
    """The full text of a call's error (its ``error`` is one line; the rest is kept beside it)."""
    if entry.error_ref:
        try:
            return objects.read_blob(run.repo, entry.error_ref).decode("utf-8", "replace")
        except (KeyError, ValueError, pygit2.GitError):
            return entry.error_detail or entry.error
    return entry.error_detail or entry.error


def resolve_call(run: RunCore, call_id: str, status: CallStatus | str, reason: str | None = None) -> LedgerEntry:
    """Record the checked outcome of an uncertain call (succeeded or failed); no files are captured."""
    try:
        final = CallStatus(status)
    except ValueError:
        raise UsageError(f"Unknown status {status!r}; use succeeded or failed.") from None
    if final not in (CallStatus.succeeded, CallStatus.failed):
        raise UsageError(f"An uncertain call resolves as succeeded or failed, not {final.value}.")

    def check(state: LedgerState) -> None:
        entry = state.calls.get(call_id)
        if entry is None:
            raise UnknownCallError(f"Run {run.run_id} has no call {call_id!r}; see 'sandbox log'.")
        if entry.status != CallStatus.uncertain:
            raise SandboxError(
                f"Call {call_id} is {entry.status.value}, not uncertain; only uncertain calls are resolved."
            )

    event = run.new_event(
        EventKind.call_resolved,
        call_id,
        reason=reason,
        **error_fields(reason if final == CallStatus.failed else None, {}),
        data={"status": final.value},
        epoch=run.state().epoch,
    )
    return run.record_event(event, check=check).calls[call_id]


def error_summary(text: str) -> str:
    """The one-line summary of an error text: its first non-empty line, shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "error"
    if len(first) > ERROR_LINE:
        first = first[: ERROR_LINE - 1].rstrip() + "…"
    return first


def error_fields(error: str | None, attachments: dict[str, bytes]) -> ErrorFields:
    """``error`` (one line) and, when the text is longer, ``error_detail`` inline or ``error_ref``
    (then the text goes into ``attachments``)."""
    if error is None or not error.strip():
        return {"error": error}
    line = error_summary(error)
    if line == error:
        return {"error": line}
    data = error.encode("utf-8", "surrogateescape")
    if len(data) <= INLINE_LIMIT:
        return {"error": line, "error_detail": error}
    attachments["error.txt"] = data
    return {"error": line, "error_ref": str(pygit2.hash(data))}
