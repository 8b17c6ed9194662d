"""``sandbox rewind RUN --to CALL|CHECKPOINT``: files and conversation back to just before a call, together.

1. **Files**: the run's worktree goes back to the automatic checkpoint at CALL's start (the run's
   head just before CALL ran), through ``rollback --files`` (:func:`sandbox.recovery.actions.rollback_files`):
   a forward event that moves the run's head, shown by ``log``; nothing is erased. Right after it,
   ``sandbox undo`` takes it back and ``sandbox redo`` does it again (:mod:`sandbox.recovery.rewind_undo`);
   ``undo_to`` in the report names the checkpoint an undo goes back to.
2. **Conversation**: the agent's transcript (stored first, :mod:`sandbox.agent.transcripts`) is
   copied, cut just before the message that asked for CALL, into a *new* session of the agent
   (:meth:`sandbox.agent.sessions.AgentSessions.fork`); the agent's original is never edited. The fork
   is stored with the run too, and a ``note`` event (``rewind``) names it, so ``resume --continue``
   and ``rewind --continue`` continue it.
3. **Side effects**: the calls at and after CALL that may have acted outside the worktree
   (commands, external tools) are listed with their compensation: a rewind puts files back, it
   cannot unsend an e-mail.

CHECKPOINT (a runtime checkpoint, or ``auto_<event>``) rewinds to just before the first call that
started after it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.agent import sessions, transcripts
from sandbox.errors import SandboxError
from sandbox.models import CallStatus, EventKind, LedgerEntry
from sandbox.recovery.actions import RollbackFilesReport, rollback_files
from sandbox.run.checkpoint import CheckpointStore

if TYPE_CHECKING:
    from sandbox.run.run import Run

#: Tools whose effects may reach outside the worktree (besides those recorded with side effects).
COMMAND_TOOLS = frozenset({"Bash", "run_shell_command", "run_command", "shell", "exec", "exec_command", "sandbox_exec"})


class RewindError(SandboxError):
    """The rewind cannot be done (no such call, or nothing to rewind to)."""


@dataclass
class SideEffect:
    """A call after the rewind point whose effects the rewind does not take back."""

    call_id: str
    tool_name: str
    summary: str | None
    hint: str


@dataclass
class RewindReport:
    """What ``rewind`` did."""

    call_id: str
    checkpoint: str
    undo_to: str | None
    files: RollbackFilesReport | None
    session: str | None = None
    from_session: str | None = None
    transcript: str | None = None
    side_effects: list[SideEffect] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def prompt(self) -> str:
        """The next user message of the agent continued on the fork (``rewind --continue``)."""
        lines = [
            f"The sandbox rewound this session to just before call {self.call_id}: the files are back as they "
            "were then, and the conversation continues from that point."
            if self.session is not None
            else f"The sandbox put the files back as they were just before call {self.call_id}; the calls after it "
            "may still be in your conversation, but their changes to the files are undone.",
        ]
        if self.side_effects:
            shown = ", ".join(f"{s.call_id} ({s.tool_name})" for s in self.side_effects[:10])
            lines.append(f"Calls after that point may have acted outside the files and were not undone: {shown}.")
        lines.append("Continue the task from here.")
        return " ".join(lines)


def call_after_checkpoint(run: Run, target: str) -> str:
    """The first call that started after checkpoint ``target``."""
    item = CheckpointStore(run).find(target)
    tip = item.checkpoint.tool_ledger.tip
    seen = tip is None
    for oid, event in run.events_read():
        if seen and event.kind == EventKind.call_started and event.call_id:
            return event.call_id
        seen = seen or oid == tip
    raise RewindError(f"No call of run {run.run_id} started after checkpoint {target}; there is nothing to rewind.")


def _side_effects(run: Run, entries: list[LedgerEntry]) -> list[SideEffect]:
    out = []
    for entry in entries:
        if entry.status == CallStatus.not_run:
            continue
        if not (entry.side_effects or entry.compensation or entry.tool_name in COMMAND_TOOLS):
            continue
        if entry.compensation:
            hint = f"it registered a compensation: 'sandbox compensate {run.run_id} {entry.call_id}'"
        else:
            hint = "whatever it did outside the worktree is not undone by the rewind; check it yourself"
        out.append(SideEffect(entry.call_id, entry.tool_name, entry.summary, hint))
    return out


def rewind(run: Run, call_id: str, homes: Mapping[str, Sequence[str]], subdir: str = "") -> RewindReport:
    """Rewind ``run`` to just before call ``call_id`` (steps 1-3 of the module docstring).

    ``homes``: each agent's candidate configuration homes; ``subdir``: where in the worktree the
    agent will be started (where its forked session must be found).
    """
    state = run.state()
    entry = state.calls.get(call_id)
    if entry is None:
        raise RewindError(f"Run {run.run_id} has no call {call_id!r}; see 'sandbox log {run.run_id}'.")
    store = CheckpointStore(run)
    autos = store.auto()
    at_start = [a for a in autos if a.checkpoint.label == f"call_started {call_id}"]
    if not at_start:
        raise RewindError(
            f"Call {call_id} of run {run.run_id} never started, so there is no state just before it to go back to."
        )
    undo_to = autos[-1].checkpoint.id if autos else None
    report = RewindReport(call_id, at_start[0].checkpoint.id, undo_to, None)
    transcripts.capture(run, homes, f"rewind to {call_id}")  # before the files move: the evidence first
    report.files = rollback_files(run, at_start[0].checkpoint.id, f"to just before #{entry.seq} ({entry.tool_name})")
    report.messages.append(report.files.message)
    after = state.order[state.order.index(call_id) :]
    report.side_effects = _side_effects(run, [state.calls[c] for c in after])
    _fork_conversation(run, entry, homes, subdir, report)
    head = run.state().head
    run.record(
        EventKind.note,
        reason=f"rewound to just before call {call_id}",
        data={
            "rewind": {
                "to": call_id,
                "checkpoint": report.checkpoint,
                # What 'sandbox undo' needs to take the rewind back (sandbox.recovery.rewind_undo).
                "undo_to": report.undo_to,
                "head": head,
                "session": report.session,
                "from_session": report.from_session,
                "side_effects": [s.call_id for s in report.side_effects],
            }
        },
        epoch=run.state().epoch,
    )
    return report


def _fork_conversation(
    run: Run, entry: LedgerEntry, homes: Mapping[str, Sequence[str]], subdir: str, report: RewindReport
) -> None:
    """Fork the agent's conversation just before ``entry``'s tool use, when the run holds it."""
    old = entry.agent_session
    report.from_session = old
    stored = transcripts.latest(run, old) if old else None
    agent = sessions.agents().get(stored.index.agent) if stored is not None else None
    if stored is None or agent is None or old is None:
        report.messages.append(
            f"The run holds no conversation for call #{entry.seq}; only the files were rewound (a continue "
            "starts a new session)."
        )
        return
    if not agent.forks:
        report.messages.append(
            f"Only the files were rewound: {agent.no_fork}; a continue goes on in session {old}, whole, told that "
            f"the files went back to just before call #{entry.seq}."
        )
        return
    data = transcripts.load(run, stored)
    own = agent.own_call(data, entry.call_id, transcripts.recorded_calls(run, old, entry.call_id))
    if own is None:
        report.messages.append(
            f"Call #{entry.seq} is not a tool use of the stored conversation; only the files were rewound."
        )
        return
    new = agent.new_session()
    try:
        forked = agent.fork(data, own, new)
    except KeyError:
        # Not a transcript the agent's fork understands (a fetched run's copy is anybody's text).
        report.messages.append(
            f"The stored conversation does not read as {agent.name}'s own, so it was not forked; "
            "only the files were rewound."
        )
        return
    cwd = os.path.join(run.worktree, subdir) if subdir else run.worktree
    report.transcript = transcripts.write_for_agent(agent, homes.get(agent.name, ()), cwd, new, forked)
    transcripts.store(run, agent.name, new, forked, agent.calls(forked), f"rewind to {entry.call_id}")
    report.session = new
    report.messages.append(
        f"The conversation was forked just before call #{entry.seq} as {agent.name} session {new} "
        f"(session {old} is left as it was)."
    )
