"""The command tool of ``sandbox mcp``: ``run_command``, and what stops a running command.

``run_command`` is one ``run_command`` call, its command confined exactly as ``sandbox exec``
confines one (:mod:`sandbox.confine.spawn`), its changes learnt from the repository's host when one
is up, else from a scan; a non-zero exit, a timeout or a refused sandbox is ``failed`` with the
reason. Inside the sandbox of ``sandbox run`` the host records the call and the command runs in the
sandbox the server is in (:mod:`sandbox.mcp.hosted`).

A call whose client went away while it ran (the stdio pipe closed) is abandoned as a crash
abandons it: the command is stopped and nothing is recorded after ``started``, so ``sandbox
resume`` reports the call ``uncertain``; every command runs with the server's process-session
token, so a resume after the server itself was killed finds (and waits for, or stops) what it left.
A request the client cancels is different: the client is still there, so the command is killed and
the call is recorded ``failed`` with what it changed until then.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import IO, TypedDict

from sandbox.confine import envfilter, spawn
from sandbox.confine.policy import policy_for_run
from sandbox.errors import SandboxError, UsageError
from sandbox.mcp.find import sendable
from sandbox.mcp.hosted import HostLedger
from sandbox.mcp.state import MAX_OUTPUT_CHARS, Abandoned, InFlight, WorkspaceState, kill
from sandbox.models import CallStatus
from sandbox.run.output import OUTPUT_TEXT, Tail
from sandbox.run.run import Run

MAX_TIMEOUT = 3_600.0
#: How often a running command looks whether its client went away.
_POLL = 0.05


class _CommandOutcome(TypedDict):
    call_id: str
    status: str
    exit_code: int | None
    timed_out: bool
    files_changed: list[str]
    output: str
    output_truncated: bool


class CommandAnswer(_CommandOutcome, total=False):
    """``run_command``'s answer as JSON (:meth:`CommandResult.to_json`): ``error`` only when it failed."""

    error: str


@dataclass
class CommandResult:
    """What ``run_command`` answers: the recorded call, the exit code and the (bounded) output."""

    call_id: str
    status: str
    exit_code: int | None
    output: str
    output_truncated: bool
    files_changed: list[str]
    timed_out: bool = False
    error: str | None = None

    def to_json(self) -> CommandAnswer:
        """The answer as a JSON object."""
        answer: CommandAnswer = {
            "call_id": self.call_id,
            "status": self.status,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            # A path that is not UTF-8 (read as lone surrogates) shown as \xNN: one made the SDK fail
            # to encode the whole answer, and the server exited.
            "files_changed": [sendable(p) for p in self.files_changed],
            "output": sendable(self.output),
            "output_truncated": self.output_truncated,
        }
        if self.error:
            answer["error"] = self.error
        return answer


class CommandTools(WorkspaceState):
    """The command tool (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    def run_command(
        self,
        command: str,
        timeout: float = 120.0,
        idempotency: str = "conditional",
        replay: str = "ask",
        request_id: str | int | None = None,
        call_id: str | None = None,
        agent_session: str | None = None,
    ) -> CommandResult:
        """Run ``command`` with ``/bin/sh -c`` in the worktree as one recorded call.

        Confined as ``sandbox exec`` confines a command (refused before anything is recorded when
        the confinement cannot be had). The output (stdout and stderr together) is kept in a
        temporary file and answered bounded: its head and its tail. ``timeout`` seconds: then the
        command is killed and the call is ``failed`` ("timed out"). Raises :class:`Abandoned` when
        the client went away meanwhile (the call stays ``started``).
        """
        if not command.strip():
            raise UsageError("The command is empty; give a shell command to run in the worktree.")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise UsageError(f"timeout must be between 0 and {MAX_TIMEOUT:.0f} seconds.")
        call_id = call_id or self.call_id_for(request_id)
        with self.lock:
            run = self.require_run()
            return self._run_command(run, command, timeout, idempotency, replay, call_id, agent_session)

    def cancel(self, call_id: str) -> bool:
        """The client cancelled a running call: its command is stopped and the call is recorded
        ``failed`` (the client is still there to be told; the changes made so far are recorded)."""
        flight = self.in_flight.get(call_id)
        if flight is not None:
            flight.cancelled.set()
        return flight is not None

    def _run_command(
        self,
        run: Run,
        command: str,
        timeout: float,
        idempotency: str,
        replay: str,
        call_id: str,
        agent_session: str | None = None,
    ) -> CommandResult:
        from sandbox.agent import changes
        from sandbox.agent.hosted import command_input

        if self.hosted is not None:
            return self._run_through_host(
                self.hosted, run, command, timeout, idempotency, replay, call_id, agent_session
            )
        isolation = self.settings.isolation(run.user_workdir) if self.settings.isolation else None
        if run.state().foreign != 0:  # a run from elsewhere: its worktree's agent settings masked, any command
            from sandbox.confine import foreign, settingstree

            deeper = settingstree.recorded(run)
            isolation, _masked = foreign.for_foreign_run(isolation, run.worktree, "", run.run_id, deeper)
        confined = None
        if isolation is not None and isolation.enabled:
            spawn.check(isolation)  # refused before anything is recorded
            policy = policy_for_run(isolation, run)
            confined = (isolation, policy)
        argv = ["/bin/sh", "-c", command]
        # A scan's libgit2 status in a child killed at its deadline (sandbox.store.scan): a file the agent
        # swaps for a FIFO while it is read would block this server, every tool, for ever.
        run.scan_in_worker = True
        source = changes.pick(host=(run.project.common_dir, run.run_id, run.dir))
        input_value = command_input(argv, isolation)
        self.refuse_if_denied(run, "run_command", input_value, call_id, agent_session, command[:500])
        run.start_call(
            "run_command",
            input_value,
            call_id=call_id,
            idempotency=idempotency,
            replay=replay,
            summary=command[:500],
            procs=self.scope,
            agent_session=agent_session,
        )
        flight = self.in_flight[call_id] = InFlight(call_id)
        try:
            source.begin(call_id)
            with tempfile.TemporaryFile() as out:
                try:
                    code, timed_out = self._spawn_and_wait(argv, run.worktree, confined, out, timeout, flight)
                    refused = None
                except spawn.ConfinementError as exc:
                    code, timed_out, refused = 126, False, exc
                output, truncated = _bounded_output(out)
                kept = {"output": Tail.of_file(out)}  # both streams, as the pipe got them
            error = refused.message if refused is not None else _command_error(flight, code, timed_out, timeout)
            changed = source.end(call_id)
            entry = run.finish_call(
                call_id,
                CallStatus.failed if error else CallStatus.succeeded,
                paths=changed,
                result={"exit_code": None if timed_out else code, "timed_out": timed_out},
                error=error,
                # The client's cancellation is its user's Ctrl-C or Esc: the call was interrupted.
                mark="interrupted" if flight.cancelled.is_set() else None,
                output=kept,
            )
        finally:
            self.in_flight.pop(call_id, None)
        return CommandResult(
            call_id=call_id,
            status=entry.status.value,
            exit_code=None if timed_out else code,
            output=output,
            output_truncated=truncated,
            files_changed=[f.path for f in entry.files],
            timed_out=timed_out,
            error=error,
        )

    def _run_through_host(
        self,
        hosted: HostLedger,
        run: Run,
        command: str,
        timeout: float,
        idempotency: str,
        replay: str,
        call_id: str,
        agent_session: str | None,
    ) -> CommandResult:
        """:meth:`_run_command` for a server inside a sandbox: the host records the call (its watcher's
        window between start and finish gives the paths), and the command runs right here, in the
        sandbox the server is in (no sandbox nests in another), as one of the agent session's processes."""
        from sandbox.agent.hosted import command_input

        argv = ["/bin/sh", "-c", command]
        spec = command_input(argv, None)  # confined by the sandbox around the server, not by one of its own
        hosted.start(
            "run_command",
            spec,
            call_id=call_id,
            kind="command",
            idempotency=idempotency,
            replay=replay,
            summary=command[:500],
            agent_session=agent_session,
        )
        flight = self.in_flight[call_id] = InFlight(call_id)
        try:
            with tempfile.TemporaryFile() as out:
                code, timed_out = self._spawn_and_wait(argv, run.worktree, None, out, timeout, flight)
                output, truncated = _bounded_output(out)
                kept = Tail.of_file(out)
            error = _command_error(flight, code, timed_out, timeout)
            done = hosted.finish(
                "run_command",
                spec,
                call_id=call_id,
                kind="command",
                succeeded=error is None,
                agent_session=agent_session,
                result={
                    "exit_code": None if timed_out else code,
                    "timed_out": timed_out,
                    # Both streams as the pipe got them: the host keeps the tail (sandbox.run.output.split).
                    OUTPUT_TEXT: bytes(kept.kept).decode("utf-8", "surrogateescape"),
                },
                error=error,
                interrupted=flight.cancelled.is_set(),
            )
        finally:
            self.in_flight.pop(call_id, None)
        return CommandResult(
            call_id=call_id,
            status=done.status or ("failed" if error else "succeeded"),
            exit_code=None if timed_out else code,
            output=output,
            output_truncated=truncated,
            files_changed=_recorded_files(run, call_id),
            timed_out=timed_out,
            error=error,
        )

    def _spawn_and_wait(
        self,
        argv: list[str],
        cwd: str,
        confined: tuple[spawn.Isolation, spawn.Policy] | None,
        out: IO[bytes],
        timeout: float,
        flight: InFlight,
    ) -> tuple[int, bool]:
        """(exit code, timed out). Polls so a client that went away stops the command at once."""
        env = dict(self.settings.command_env) if self.settings.command_env is not None else dict(os.environ)
        for name in envfilter.WITHHELD_ENV:  # the HTTP server's bearer token: never the model's command's
            env.pop(name, None)
        if self.hosted is None:  # inside a sandbox the agent session's own token stays: the host bound the call to it
            env["SANDBOX_SESSION"] = self.scope.token  # resume finds the command by it (sandbox.agent.procs)
        proc: subprocess.Popen[bytes]
        box: spawn.Confined | None = None
        if confined is not None:
            box = spawn.spawn(
                confined[0], confined[1], argv, cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
            proc = box.proc
        else:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            try:
                proc.wait(timeout=_POLL)
                break
            except subprocess.TimeoutExpired:
                pass
            if self.disconnected.is_set():
                kill(proc, box)
                self.abandoned.append(flight.call_id)  # said at the end, even once its flight is gone
                raise Abandoned(f"the client went away while {argv[-1][:80]!r} ran")
            if flight.cancelled.is_set():
                kill(proc, box)
                timed_out = False
                break
            if time.monotonic() >= deadline:
                timed_out = True
                kill(proc, box)
                break
        if box is not None:
            code = box.wait()
        else:
            code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return code, timed_out

    def abandon_all(self, wait: float = 5.0) -> list[str]:
        """The client went away: stop running commands, leave their calls unfinished; their ids."""
        self.disconnected.set()
        pending = list(self.in_flight)
        deadline = time.monotonic() + wait
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(_POLL)
        # A command that saw the client go away first has left in_flight already: it counts too.
        return list(dict.fromkeys(self.abandoned + pending))


def _bounded_output(fh: IO[bytes]) -> tuple[str, bool]:
    """The command's output: whole when short, else its head and its tail (the end matters most)."""
    size = fh.seek(0, os.SEEK_END)
    if size <= MAX_OUTPUT_CHARS:
        fh.seek(0)
        return fh.read().decode("utf-8", errors="replace"), False
    head_len, tail_len = MAX_OUTPUT_CHARS // 4, MAX_OUTPUT_CHARS - MAX_OUTPUT_CHARS // 4
    fh.seek(0)
    head = fh.read(head_len).decode("utf-8", errors="replace")
    fh.seek(size - tail_len)
    tail = fh.read(tail_len).decode("utf-8", errors="replace")
    return f"{head}\n[... {size - head_len - tail_len} bytes of output left out ...]\n{tail}", True


def _command_error(flight: InFlight, code: int, timed_out: bool, timeout: float) -> str | None:
    """Why a command's call failed (None: it succeeded)."""
    if flight.cancelled.is_set():
        return "cancelled by the client; the command was killed"
    if timed_out:
        return f"timed out after {timeout:g} s; the command was killed"
    return f"exit code {code}" if code != 0 else None


def _recorded_files(run: Run, call_id: str) -> list[str]:
    """The files the host recorded for a call, read from the ledger (read-only inside a sandbox)."""
    try:
        entry = run.state().calls.get(call_id)
    except (SandboxError, OSError):
        return []
    return [f.path for f in entry.files] if entry is not None else []
