"""A run: one agent session in its own worktree, with its refs and its ledger.

:class:`Run` is what the rest of the library and a runtime hold. Its state and its one write path
(making, reading, recording, moving the head, dropping) are :class:`~sandbox.run.core.RunCore`'s; the
operations on its calls live each in their own module below this one, and :class:`Run` names them:
a call's life in the ledger (:mod:`sandbox.run.calls`), one call recorded in-process
(:mod:`sandbox.run.recording`), approvals (:mod:`sandbox.run.approvals`) and checkpoints
(:mod:`sandbox.run.checkpoint`). Each takes the run and the same :class:`~sandbox.run.callspec.CallOptions`.
Those modules are imported on first use: a command that only reads a run does not pay for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sandbox.models import CallStatus, EventKind, LedgerEntry, ProcessScope
from sandbox.run.core import RunCore
from sandbox.store.project import Project

if TYPE_CHECKING:
    # typing has Unpack from Python 3.11 on; the library runs on 3.10 too.
    from typing_extensions import Unpack

    from sandbox.models import Checkpoint
    from sandbox.run.callspec import CallOptions
    from sandbox.run.output import Tail
    from sandbox.run.recording import PathsSeen, ToolCall


class Run(RunCore):
    """One run of an agent, opened from its project. Create runs with :meth:`Run.start`."""

    def __init__(self, project: Project, run_id: str) -> None:
        super().__init__(project, run_id)
        # O(1) per path: lets a resume attribute a crashed call's half-written files to it.
        self.before_write_hooks.append(_capture_before_write)

    # -- recording calls (sandbox.run.calls, sandbox.run.recording) ------------------------------

    def plan_call(self, tool_name: str, input: Any = None, **options: Unpack[CallOptions]) -> str:
        """Record a planned call (for runtimes that ask before acting); returns its call id."""
        from sandbox.run import calls

        return calls.plan_call(self, tool_name, input, options)

    def start_call(
        self,
        tool_name: str,
        input: Any = None,
        *,
        procs: ProcessScope | None = None,
        **options: Unpack[CallOptions],
    ) -> str:
        """Durably record that a call is starting; returns its call id.

        When this returns, the ``started`` event is on disk (fsync'd): the tool may run. A call id
        that was planned and approved continues; a denied one is refused. ``agent_session`` is
        the agent's own session id (its end settles the calls it never ran, see :meth:`not_run`).
        """
        from sandbox.run import calls

        return calls.start_call(self, tool_name, input, options, procs)

    def finish_call(
        self,
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
        """Record a call's end, with its file changes as exactly one commit on the run's head.

        ``paths`` are the candidate paths the call may have changed; ``None`` means unknown, and
        the worktree is scanned (correct, but costs O(repository)). Refused with
        :class:`~sandbox.errors.StaleWriterError` if the run was resumed since the call started.
        ``mark`` (``interrupted`` or ``violation``, with ``status`` failed) ends it so (see
        :class:`~sandbox.models.CallStatus`); ``ran_ms``: how long the tool itself ran, as the agent
        measured it (its start was after the agent's permission prompt); ``output``: the tails of the
        streams the call's command wrote (:mod:`sandbox.run.output`), kept with the call.
        """
        from sandbox.run import calls

        return calls.finish_call(
            self, call_id, status, paths=paths, result=result, error=error, mark=mark, ran_ms=ran_ms, output=output
        )

    def tool_call(
        self, tool_name: str, input: Any = None, *, watcher: PathsSeen | None = None, **options: Unpack[CallOptions]
    ) -> ToolCall:
        """A context manager recording one tool call; see :class:`sandbox.run.recording.ToolCall`."""
        from sandbox.run.recording import ToolCall

        return ToolCall(self, tool_name, input, options, watcher=watcher)

    def refuse_call(self, tool_name: str, input: Any, reason: str, **options: Unpack[CallOptions]) -> LedgerEntry:
        """Record a call the sandbox refused before it started (a denial): one ``not_run`` event.

        The agent asked for it, so it is one call in the ledger, with the refusal as its ``error``;
        a repeated refusal of the same call id is a no-op.
        """
        from sandbox.run import calls

        return calls.refuse_call(self, tool_name, input, reason, options)

    def not_run(self, call_id: str, reason: str) -> LedgerEntry:
        """Record that a planned, approved or started call never ran (the agent refused or skipped it).

        For evidence from the agent itself: its permission check refused the call, another hook
        blocked it, the user said no, or its turn ended with no result for the call. No files are
        captured (nothing ran); a call that already ended, or that a resume made uncertain, is left
        as it is. ``reason`` is kept as the call's ``error``.
        """
        from sandbox.run import calls

        return calls.not_run(self, call_id, reason)

    def violation(self, call_id: str, reason: str) -> LedgerEntry:
        """Record that the agent ran a call the sandbox had refused (``not_run``): it becomes a
        ``violation`` with ``reason`` as its error. No files are captured here (the next cut or
        call records what changed); a call already marked so is left as it is."""
        from sandbox.run import calls

        return calls.violation(self, call_id, reason)

    def resolve_call(self, call_id: str, status: CallStatus | str, reason: str | None = None) -> LedgerEntry:
        """Record the checked outcome of an uncertain call (succeeded or failed); no files are captured."""
        from sandbox.run import calls

        return calls.resolve_call(self, call_id, status, reason)

    def error_text(self, entry: LedgerEntry) -> str | None:
        """The full text of a call's error (its ``error`` is one line; the rest is kept beside it)."""
        from sandbox.run import calls

        return calls.error_text(self, entry)

    def note(self, data: dict[str, object]) -> None:
        """Record a fact about the run that is no call (e.g. how a session's agent was confined)."""
        self.record_event(self.new_event(EventKind.note, data=data, epoch=self.state().epoch))

    # -- checkpoints and approvals (sandbox.run.checkpoint, sandbox.run.approvals) ---------------

    def checkpoint(
        self,
        label: str | None = None,
        *,
        step_id: str | None = None,
        messages: Any = None,
        run_state: Any = None,
        approvals: Any = None,
        budget: Any = None,
        trace: Any = None,
        trace_ref: str | None = None,
    ) -> Checkpoint:
        """Save a runtime checkpoint (messages, state, budget...) and return it."""
        from sandbox.run.checkpoint import CheckpointStore, SessionState

        state = SessionState(messages, run_state, step_id, budget, approvals, trace, trace_ref)
        return CheckpointStore(self).save(state, label)

    def approve(self, call_id: str) -> LedgerEntry:
        """Approve a planned call; ``start_call`` with its id then continues it."""
        from sandbox.run import approvals

        return approvals.approve(self, call_id)

    def deny(self, call_id: str, reason: str | None = None) -> LedgerEntry:
        """Deny a planned call; it never starts, and the same tool and input are known denied."""
        from sandbox.run import approvals

        return approvals.deny(self, call_id, reason)


def _capture_before_write(run: RunCore, rel: str) -> None:
    # Imported on the first write, not with every Run: read-only commands never need it.
    from sandbox.run.beforewrite import capture_before_write

    capture_before_write(run, rel)
