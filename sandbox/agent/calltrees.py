"""Which process started each open call, so that evidence sent from inside a call is known (issue 33).

A call's own command may connect to the host and send a hook payload about its call (``sandbox hook
generic`` with a forged JSON): "refused", and the call that wrote a file would read "never ran". The
host knows the process at the other end of every connection (``SO_PEERCRED``), so it keeps, per open
call, the process that started it: the one that sent the call's ``start`` (``sandbox exec``, ``sandbox
mcp``'s server, an agent's hook) or the ``begin`` of a call already started (``sandbox exec`` recording in
its own process). The command runs below that process; a payload whose sender descends from it (the
process itself excepted: it sends the call's finish) comes from inside the call, and is refused.

A process is named by its pid and start time (a pid reused later is not the same process). A start from
an agent's hook names the short-lived hook process: nothing descends from it once it exits, so the
agent's own hooks (siblings of its commands) are never refused. A session's ``begin`` (``sandbox run``,
the process above the agent) names no call and is not kept.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.agent import procs
from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from sandbox.agent.hookproto import HookEvent, Outcome
    from sandbox.agent.wire import Reply
    from sandbox.run.run import Run

#: How far up a sender's ancestry is looked (a hook is a few processes below its call's starter).
MAX_DEPTH = 64


@dataclass(frozen=True)
class Inside:
    """A payload's sender runs inside this open call: the call's run and id, the process that started it."""

    run_id: str
    call_id: str
    starter: int


class CallTrees:
    """The starting process of every open call the host was told of; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starters: dict[tuple[str, str], tuple[int, int]] = {}

    def opened(self, run_id: str, call_id: str, pid: int) -> None:
        """``pid`` started ``call_id`` of ``run_id`` (its command runs below it)."""
        start = procs.start_time(pid)
        if start is None:
            return
        with self._lock:
            self._starters.setdefault((run_id, call_id), (pid, start))

    def begun(self, run: Run, call_id: str, peer: tuple[int, int] | None) -> None:
        """A ``begin`` from ``peer``: kept when it names a call already started (``sandbox exec``
        recording in its own process); a session's window (no call) is not."""
        entry = run.state().calls.get(call_id)
        if peer is not None and entry is not None and entry.status.value == "started":
            self.opened(run.run_id, call_id, peer[0])

    def recorded(self, run_id: str, phase: str, outcome: Outcome, peer: tuple[int, int] | None) -> None:
        """A hook payload from ``peer`` was recorded: a call it started is open, one it ended is not."""
        if peer is None or not outcome.call:
            return
        if phase == "start" and outcome.status == "started":
            self.opened(run_id, outcome.call, peer[0])
        elif phase != "start" and outcome.status not in (None, "started"):
            self.closed(run_id, outcome.call)

    def closed(self, run_id: str, call_id: str) -> None:
        """The call ended: what runs below its starter is no longer inside it."""
        with self._lock:
            self._starters.pop((run_id, call_id), None)

    def inside(self, pid: int) -> Inside | None:
        """The open call whose starter ``pid`` descends from (``pid`` itself excepted), or None."""
        with self._lock:
            if not self._starters:
                return None
            starters = dict(self._starters)
        # A process starts after its parent, so the walk up stops at the first ancestor older than
        # every starter: nothing above it descends from one (a hook is then 2-3 reads, not one per level).
        oldest = min(start for _pid, start in starters.values())
        ancestors: set[int] = set()
        up = _stat(pid)[0]
        while up is not None and up > 1 and up not in ancestors and len(ancestors) < MAX_DEPTH:
            ancestors.add(up)
            parent, start = _stat(up)
            if start is None or start < oldest:
                break
            up = parent
        gone = []
        found: Inside | None = None
        for (run_id, call_id), (starter, start) in reversed(starters.items()):  # the latest call first
            if procs.start_time(starter) != start:
                gone.append((run_id, call_id))  # its starter exited: nothing descends from it any more
            elif starter in ancestors and found is None:
                found = Inside(run_id, call_id, starter)
        if gone:
            with self._lock:
                for key in gone:
                    if self._starters.get(key, (0, 0))[0] == starters[key][0]:
                        self._starters.pop(key, None)
        return found


def _stat(pid: int) -> tuple[int | None, int | None]:
    """(parent pid, start time in clock ticks) of ``pid`` from one read of its stat; Nones when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None, None
    fields = data[data.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None, None


def refuse(run: Run, event: HookEvent, inside: Inside, sender: int) -> Reply:
    """Record in ``run`` that a payload came from inside an open call (a violation, kept beside the
    call, which ends as it really ends), and the reply that refuses it."""
    what = f"{event.phase} payload for {event.call_id or 'no call'}"
    with contextlib.suppress(SandboxError, OSError):  # refused either way; the host outlives the note
        run.note(
            {
                "payload_from_inside_call": {
                    "call": inside.call_id,
                    "payload": what,
                    "sender": sender,
                    "command": procs.command(sender),
                    "why": "a hook payload was sent from inside the call's own command; it was refused, not applied",
                }
            }
        )
    return {
        "ok": False,
        "message": (
            f"This {what} was sent from inside call {inside.call_id}'s own command (process {sender}): "
            "a call's evidence comes from the agent or the sandbox, never from its command; nothing recorded."
        ),
        "call": inside.call_id,
    }
