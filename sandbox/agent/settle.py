"""Ending the calls an agent left started, on the evidence; and the calls of a sandbox session that is gone.

An agent that moves on (its turn or session ended) without a call's result leaves the call started:
:func:`settle_call` ends it on what the worktree and the agent's transcript say (the recorder, on a
settle payload; ``sandbox run``, as the session ends). A ``sandbox run`` session killed under its calls
leaves them started for ``sandbox resume``; the next ``sandbox run`` of the run first marks them
``uncertain`` (:func:`mark_gone_sessions`), so that no other session's hook settles them as never run:
only ``resume`` (or the session that started them) decides a call of another session (issue 33).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from sandbox.models import LedgerEntry
    from sandbox.run.run import Run


def settle_call(
    run: Run, entry: LedgerEntry, seen: list[str] | None, *, ran: str | None, never: str | None
) -> LedgerEntry | None:
    """End a call still started whose agent moved on without its result, on the evidence.

    ``seen``: the paths a watcher saw change during the call (None: unknown; the paths a file
    tool names, or for a command the whole worktree, are compared with the head). A call that
    changed something, or that ``ran`` says ran (why: Ctrl-C stopped the session under it, its
    processes were left running), or whose agent's transcript says it had started
    (:func:`sandbox.agent.adapters.claude_code.call_evidence`), is ``interrupted`` with those
    files: it must never be offered again. Otherwise it never ran: ``not_run`` with the reason
    ``never``, or left as it is when ``never`` is None (``sandbox resume`` then reports it).
    Returns the entry when it ended.
    """
    from sandbox.models import CallStatus

    changed = changed_paths(run, candidates_of(run, entry, seen))
    if not changed and not ran:
        from sandbox.agent.adapters import claude_code

        # The hooks say nothing of a Bash the user stopped with Esc; Claude Code's transcript does.
        if claude_code.call_evidence(run.dir, entry.agent_session, entry.call_id) == "ran":
            ran = "the agent's transcript says it was stopped after it started (no hook reported its end)"
    if changed or ran:
        why = ran or f"it was running (it changed {len(changed)} path(s)) when the agent went on without its result"
        return run.finish_call(
            entry.call_id, CallStatus.failed, paths=changed, error=f"interrupted: {why}", mark="interrupted"
        )
    if never is None:
        return None
    return run.not_run(entry.call_id, never)


def candidates_of(run: Run, entry: LedgerEntry, seen: list[str] | None) -> list[str] | None:
    """The paths a started call may have changed: none for a read, what the watch saw, the paths a
    file tool names, else None (every path: scan)."""
    from sandbox.agent import adapters

    kind = adapters.kind_of(entry.tool_name)
    if kind in ("read", "external"):
        return []
    if seen is not None:
        return seen
    if kind == "write":
        return _named_paths(run, entry)
    return None


def _named_paths(run: Run, entry: LedgerEntry) -> list[str]:
    """The worktree paths a file tool's input names."""
    from sandbox.store.paths import from_user

    value = entry.input if isinstance(entry.input, dict) else {}
    out = []
    for key in ("file_path", "notebook_path"):
        given = value.get(key)
        if isinstance(given, str) and given:
            with contextlib.suppress(SandboxError):
                out.append(from_user(run.worktree, given, run.worktree))
    return out


def changed_paths(run: Run, candidates: list[str] | None) -> list[str]:
    """Which of ``candidates`` (None: every path of the worktree) differ from the run's head."""
    from sandbox.store import objects
    from sandbox.store.capture import capture

    if candidates is not None and not candidates:
        return []
    head = run.state().head
    if head is None:
        return []
    head_tree = objects.commit_tree(run.repo, head)
    if candidates is None:
        from sandbox.store import scan

        candidates = sorted(scan.candidates(run.repo, run.worktree, head_tree, worker=run.scan_in_worker))
    cap = capture(run.repo, run.worktree, head_tree, candidates, run.is_ignored, run.is_private)
    return sorted(cap.changes)


class _NoLongerStarted(Exception):
    """The call ended meanwhile (its own session's last hook): it is not marked."""


def mark_gone_sessions(run: Run, current: str | None = None) -> list[str]:
    """Mark ``uncertain`` the calls left started by ``sandbox run`` sessions whose processes are all gone;
    their ids (``sandbox run`` does this before its own session's calls; see the module docstring).

    A call started outside any session (``sandbox exec``, hooks installed by hand), by a session that
    still runs, or by the ``current`` one (its token: an agent started before its run was opened, see
    :mod:`sandbox.agent.early`, may have ended already), is left as it is; so is everything where
    processes cannot be listed.
    """
    from sandbox.agent import procs
    from sandbox.models import CallStatus, EventKind, LedgerState

    state = run.state()
    started = [state.calls[c] for c in state.order if state.calls[c].status == CallStatus.started]
    bound = [e for e in started if e.session and e.session != current]
    if not bound or not procs.available():
        return []
    alive = {token for token, _proc in procs.find_any({e.session for e in bound if e.session})}
    marked = []
    for entry in bound:
        if entry.session in alive:
            continue

        def check(now: LedgerState, call_id: str = entry.call_id) -> None:
            if now.calls[call_id].status != CallStatus.started:
                raise _NoLongerStarted

        reason = "its sandbox session ended before its end was recorded; 'sandbox resume' decides it"
        with contextlib.suppress(_NoLongerStarted):
            run.record(EventKind.call_uncertain, entry.call_id, epoch=state.epoch, reason=reason, check=check)
            marked.append(entry.call_id)
    return marked
