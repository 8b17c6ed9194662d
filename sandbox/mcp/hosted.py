"""Recording the MCP tools' calls through the repository's host, for a server inside a sandbox.

An agent that ``sandbox run`` confines (Codex, whose only tools are ``sandbox mcp``'s) starts its
MCP server inside the same bubblewrap sandbox: there the run's worktree is writable, but the run's
directory, its ledger and the repository's objects are read-only. The server then records as the
hooks of Claude Code and Gemini CLI do: each changing tool call is a ``start`` and a ``finish``
event of the generic hook protocol (:mod:`sandbox.agent.hookproto`), sent to the repository's host
over its socket (the ``hook`` operation of :mod:`sandbox.agent.wire`, with the run's token, which
only this run's directory holds). The host records them with the same recorder as every hook:

* ``start`` is durable before the tool acts; a denied input (``sandbox deny``, a call that a
  ``resume --continue`` blocked, a ``[[tools]]`` rule) comes back as a refusal the host recorded
  ``not_run``, and the tool does nothing;
* ``finish`` commits exactly the path a file tool wrote, or for a command the paths the host's
  watcher saw between the two events (a scan when it cannot vouch);
* the call is bound to the ``sandbox run`` session of the connecting process (the host reads it
  from the server's ancestry, :func:`sandbox.agent.procs.session_of`), so ``sandbox resume`` finds
  a command this server left running by that session's token.

No host answering is a one-line refusal before the tool acts: nothing runs unrecorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.agent import hookproto, wire
from sandbox.errors import SandboxError


class HostUnreachableError(SandboxError):
    """No host answered for a call of a server that can record only through it."""


@dataclass(frozen=True)
class Recorded:
    """What the host answered for one event: the call's status and how many files its finish committed."""

    call_id: str
    status: str | None
    files: int | None


class HostLedger:
    """One run's calls recorded by the repository's host (see the module docstring).

    ``common_dir``, ``run_id``, ``run_dir`` and ``worktree`` name the run as the host knows it (the
    sandbox binds every path where it lies outside, so they are the same strings on both sides).
    """

    def __init__(self, common_dir: str, run_id: str, run_dir: str, worktree: str, *, timeout: float = 120.0) -> None:
        self.client = wire.Client(common_dir, timeout=timeout)
        self.run_id = run_id
        self.run_dir = run_dir
        self.worktree = worktree

    def reachable(self) -> bool:
        """True when the host answers and takes this run's token (asked once, at the server's start)."""
        reply = self.client.for_run(self.run_id, self.run_dir, "quiet", timeout=5.0, wait_start=wire.STARTING)
        return bool(reply and reply["ok"])

    def start(
        self,
        tool: str,
        spec: Any,
        *,
        call_id: str,
        kind: str,
        idempotency: str,
        replay: str,
        summary: str,
        agent_session: str | None,
        paths: list[str] | None = None,
    ) -> Recorded:
        """Record the call's start (durable when this returns); :class:`SandboxError` with the
        host's reason when it refused the call (recorded ``not_run``) or could not record it."""
        event = hookproto.HookEvent(
            phase="start",
            cwd=self.worktree,
            tool=tool,
            call_id=call_id,
            input=spec,
            kind=kind,
            paths=list(paths or []),
            idempotency=idempotency,
            replay=replay,
            agent="mcp",
            agent_session=agent_session,
            summary=summary,
        )
        outcome = self._send(event, "nothing was done")
        if outcome.denied:
            raise SandboxError(outcome.reason or f"The sandbox refused this {tool} call.")
        return Recorded(outcome.call or call_id, outcome.status, outcome.files)

    def finish(
        self,
        tool: str,
        spec: Any,
        *,
        call_id: str,
        kind: str,
        succeeded: bool,
        agent_session: str | None,
        paths: list[str] | None = None,
        result: Any = None,
        error: str | None = None,
        interrupted: bool = False,
    ) -> Recorded:
        """Record the call's end with what it changed; :class:`SandboxError` when the host could not
        (the call then stays ``started``: ``sandbox resume`` reports it uncertain). ``interrupted``: the
        client stopped it (its cancellation: the user's Ctrl-C or Esc)."""
        event = hookproto.HookEvent(
            phase="finish",
            cwd=self.worktree,
            tool=tool,
            call_id=call_id,
            input=spec,
            kind=kind,
            paths=list(paths or []),
            status="succeeded" if succeeded else "failed",
            error=error,
            result=result,
            interrupted=interrupted,
            agent="mcp",
            agent_session=agent_session,
        )
        outcome = self._send(event, f"call {call_id} ran and stays unfinished for 'sandbox resume {self.run_id}'")
        return Recorded(outcome.call or call_id, outcome.status, outcome.files)

    def _send(self, event: hookproto.HookEvent, consequence: str) -> hookproto.Outcome:
        reply = self.client.for_run(self.run_id, self.run_dir, "hook", wait_start=wire.STARTING, event=event.to_dict())
        if reply is None:
            raise HostUnreachableError(
                f"The repository's host did not answer, and this server (inside the sandbox of 'sandbox run') "
                f"records only through it: {consequence}. Restart the agent with 'sandbox run {self.run_id} -- AGENT'."
            )
        try:
            outcome = hookproto.Outcome.from_reply(reply)
        except (KeyError, TypeError, AttributeError):
            raise HostUnreachableError(f"The repository's host answered something unreadable: {consequence}.") from None
        if not outcome.ok:
            raise SandboxError(
                f"The run's host did not record the {event.tool} call ({outcome.message}); {consequence}."
            )
        return outcome
