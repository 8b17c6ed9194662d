"""``sandbox exec`` through the process hosting the run: the command's call recorded over its socket.

When the repository's host (``sandbox serve``, :mod:`sandbox.agent.host`) lives, it already has the
repository open and a watcher on the worktree. ``sandbox exec`` then only has to ask it to start the call (durable when
the answer comes), run the command, and ask it to finish the call with what its watcher saw. The start is
asked for in a thread while the command is made ready (its sandbox's command line, seccomp program,
cgroups): the host's fsyncs and that work overlap, and the command's process starts once the answer came. That
path imports neither pygit2 nor pydantic (a third of a second of start-up), like the hooks do: a
whole ``sandbox exec`` costs the command plus about the cost of two hooks.

Only the standard library, :mod:`sandbox.agent.hookproto`, :mod:`sandbox.agent.wire`,
:mod:`sandbox.store.layout`, :mod:`sandbox.confine.spawn` and :mod:`sandbox.confine.foreign` are imported
here. The host's replies are structured (the call, its status, its file count): nothing is parsed out of a
message. When no host answers, :func:`run_hosted` returns None and the caller records the call in its own
process. The host's answer to the start says whether the run holds events from another clone: the command
then runs with the worktree's agent settings masked (:mod:`sandbox.confine.foreign`). A command to run
unconfined beside such settings is left to the full path, which knows whose they are before recording.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from sandbox.agent import hookproto, recorder, wire
from sandbox.agent.outputs import open_channels
from sandbox.confine import foreign, spawn
from sandbox.confine.policy import policy_for
from sandbox.errors import SandboxError
from sandbox.run.output import OUTPUT_TEXT, Tail
from sandbox.store import layout


class CannotStartError(SandboxError):
    """The command could not be started at all (no such program, not executable); ``exit_code`` as a shell's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def cannot_start(argv: Sequence[str], cwd: str) -> CannotStartError | None:
    """Why ``argv`` cannot be started in ``cwd``, found before anything runs (None: it can, as far as is known).

    Looked up as the child would be (``PATH`` for a bare name, ``cwd`` for a path), so a confined
    command, which a shell starts inside its sandbox, is told apart from a command exiting 127 itself.
    """
    if not argv or not argv[0]:
        return CannotStartError("The command is empty.", 127)
    prog = argv[0]
    if "/" not in prog:
        if shutil.which(prog) is None:  # the PATH the child inherits (Popen looks it up the same way)
            return CannotStartError(f"{prog}: command not found.", 127)
        return None
    full = os.path.join(cwd, prog)
    if not os.path.exists(full):
        return CannotStartError(f"{prog}: no such file.", 127)
    if os.path.isdir(full):
        return CannotStartError(f"{prog}: is a directory.", 126)
    if not os.access(full, os.X_OK):
        return CannotStartError(f"{prog}: permission denied (it is not executable).", 126)
    return None


@dataclass
class HostedOutcome:
    """What the host recorded: the call, its final status, how many files it changed."""

    call_id: str
    status: str
    files: int | None
    returncode: int
    message: str
    #: The command could not start: why (it is recorded as the call's error).
    cannot_start: str | None = None
    #: The call's changes could not be recorded: why (it ended failed with that reason).
    unrecorded: str | None = None
    #: What the command did not see, to tell the user: a run from elsewhere's agent settings, masked
    #: (:func:`sandbox.confine.foreign.said`); None: nothing masked.
    masked: str | None = None


def locate(base_dir: str, run_id: str | None) -> hookproto.Location | None:
    """The run meant by ``run_id`` (exactly) or by ``base_dir`` (inside its worktree); None if unsure.

    Anything this cannot settle at once (a prefix of a run id, the only run of a repository,
    ``GIT_DIR`` in the environment) is left to the full path, which resolves it the usual way.
    """
    if os.environ.get("GIT_DIR") or os.environ.get("GIT_COMMON_DIR"):
        return None
    if run_id is None:
        return layout.locate(base_dir)
    if not layout.valid_run_id(run_id):
        return None
    common = layout.common_dir_of(base_dir)
    if common is None:
        return None
    place = layout.place_of(common, run_id)
    loc = hookproto.Location(common, run_id, place.worktree, place.git_dir)
    if not (os.path.isdir(loc.run_dir) and os.path.isfile(os.path.join(loc.worktree, ".git"))):
        return None
    return loc


def run_hosted(
    base_dir: str,
    run_id: str | None,
    argv: Sequence[str],
    *,
    tool_name: str,
    idempotency: str,
    replay: str,
    call_id: str | None,
    isolation: Callable[[str | None], spawn.Isolation] | None = None,
    subdir: Callable[[str, str | None], str] | None = None,
) -> HostedOutcome | None:
    """Run ``argv`` as one call recorded by the run's host; None when no host answers (nothing ran).

    The start is durable (the host answered) before the command runs. If the host goes away while
    the command runs, the finish is recorded in this process (a scan finds the changes).
    ``isolation(user_workdir)`` says how to confine the command (None: not at all); confinement
    that cannot be had is refused before anything is recorded. ``subdir(worktree, user_workdir)``
    says where in the worktree the command runs (None: its root; it is recorded in the result).
    """
    loc = locate(base_dir, run_id)
    if loc is None or not wire.host_alive(loc.common_dir):
        return None
    user_workdir = user_workdir_of(loc.common_dir)
    iso = isolation(user_workdir) if isolation is not None else None
    where = subdir(loc.worktree, user_workdir) if subdir is not None else ""
    if _for_the_full_path(iso, loc.worktree, where):
        return None  # the full path knows whose the run is before it records anything (refused if not ours)
    confined = _confinement(iso, loc, user_workdir)
    call_id = call_id or f"call_{os.urandom(6).hex()}"  # secrets.token_hex(6), without its imports
    cwd = os.path.join(loc.worktree, where) if where else loc.worktree
    spec = command_input(argv, iso)
    start = _command_event("start", loc, tool_name, call_id, spec, idempotency=idempotency, replay=replay)
    # The host makes the start durable (its fsyncs) while the command is made ready here; the command
    # starts only once the host answered (``gate``).
    asked = _Asked(loc, start)
    refused: spawn.ConfinementError | None = None
    unstartable = cannot_start(argv, cwd)
    output: dict[str, Tail] = {}
    masked: str | None = None
    gate: Callable[[], None] = _Deeper(asked, iso, loc, where)
    try:
        if confined is not None and foreign.settings_paths(loc.worktree, where):
            # Whose the run is decides what the command sees: wait for the host's answer before making
            # its sandbox (only here: without agent settings where it starts, the answer rarely masks).
            asked.gate()
            gate = asked.gate
            if asked.foreign is not False:  # (None: a host too old to say; masked)
                confined, masked = _masked(confined, loc, where, asked.settings)
        if unstartable is not None:
            asked.gate()
            returncode = unstartable.exit_code
        else:
            try:
                returncode = run_command(list(argv), cwd, confined, output, gate=gate)
            except _Remask:  # nothing had started: made ready again, with the masks the answer calls for
                confined, masked = _remasked(confined, iso, loc, where, asked.settings)
                returncode = run_command(list(argv), cwd, confined, output, gate=asked.gate)
    except _NoHost:
        return None  # no live host: nothing ran, the caller records the call itself
    except spawn.ConfinementError as exc:
        try:
            asked.gate()  # refused while made ready: recorded as the host answered, as if it had started
        except _NoHost:
            return None
        refused, returncode = exc, 126
    error = refused.message if refused else None if returncode == 0 else f"exit code {returncode}"
    if unstartable is not None:
        error = f"the command could not start: {unstartable.message}"
    finish = _command_event(
        "finish",
        loc,
        tool_name,
        call_id,
        spec,
        status="succeeded" if returncode == 0 else "failed",
        error=error,
        result=with_output(command_result(returncode, where), output),
    )
    done = recorder.handle(finish)  # the host, or this process if the host went away meanwhile
    if refused is not None:
        raise refused
    if not done.ok and done.status != "failed":
        raise SandboxError(done.message)
    # Not ok but failed: its changes could not be recorded, and the call ended failed with that
    # reason; the command's exit code is still passed through.
    why = unstartable.message if unstartable else None
    unrecorded = None if done.ok else done.message
    status = done.status or finish.status
    return HostedOutcome(done.call or call_id, status, done.files, returncode, done.message, why, unrecorded, masked)


def _confinement(
    iso: spawn.Isolation | None, loc: hookproto.Location, user_workdir: str | None
) -> tuple[spawn.Isolation, spawn.Policy] | None:
    """The command's isolation and policy (None: unconfined); refused when it cannot be had."""
    if iso is None or not iso.enabled:
        return None
    spawn.check(iso)
    policy = policy_for(
        iso, common_dir=loc.common_dir, run_id=loc.run_id, worktree=loc.worktree, user_workdir=user_workdir
    )
    return iso, policy


def _for_the_full_path(iso: spawn.Isolation | None, worktree: str, subdir: str) -> bool:
    """Whether a command is left to the full path, which reads whose the run is before recording: one
    started unconfined beside agent settings a run from elsewhere would have masked, or beside such a
    path that is a link out of the worktree (refused there on a run from elsewhere)."""
    try:
        present = bool(foreign.settings_paths(worktree, subdir))
    except foreign.ForeignSettingsError:
        return True
    return present and (iso is None or not (iso.enabled or iso.inherited))


def _masked(
    confined: tuple[spawn.Isolation, spawn.Policy],
    loc: hookproto.Location,
    subdir: str,
    recorded: list[str] | None,
) -> tuple[tuple[spawn.Isolation, spawn.Policy], str | None]:
    """``confined`` for a run the host says holds events from elsewhere: its worktree's agent settings
    masked (:mod:`sandbox.confine.foreign`, whatever the command; ``recorded``: where the host says its
    recorded tree holds them), and what to tell the user of it."""
    iso, policy = confined
    paths = foreign.settings_paths(loc.worktree, subdir, recorded or ())
    if not paths:
        return confined, None
    masked = foreign.mask(iso, paths, loc.worktree, loc.run_id)
    assert masked is not None
    told = foreign.said(loc.worktree, paths, loc.run_id)
    return (masked, dataclasses.replace(policy, masked=(*policy.masked, *paths))), told


def _remasked(
    confined: tuple[spawn.Isolation, spawn.Policy] | None,
    iso: spawn.Isolation | None,
    loc: hookproto.Location,
    subdir: str,
    recorded: list[str] | None,
) -> tuple[tuple[spawn.Isolation, spawn.Policy] | None, str | None]:
    """:func:`_masked` for a command the host's answer says has settings to mask deeper in the run's recorded
    tree; refused when it runs unconfined (:func:`sandbox.confine.foreign.mask`: nothing could hide them)."""
    if confined is None:
        paths = foreign.settings_paths(loc.worktree, subdir, recorded or ())
        foreign.mask(iso, paths, loc.worktree, loc.run_id)  # raises: there are some, and no sandbox
        return None, None
    return _masked(confined, loc, subdir, recorded)


class _NoHost(Exception):
    """No host answered the call's start: nothing ran."""


class _Remask(Exception):
    """The host's answer names agent settings to mask the command was not made ready with: nothing ran."""


class _Deeper:
    """The gate of a command made ready without masks: the host's answer, then :class:`_Remask` when it says
    the run is from elsewhere and its recorded tree holds agent settings there now (deeper than the start
    directory, where nothing was found before asking), unless an enclosing sandbox of ours masks them."""

    def __init__(self, asked: _Asked, iso: spawn.Isolation | None, loc: hookproto.Location, subdir: str) -> None:
        self.asked, self.iso, self.loc, self.subdir = asked, iso, loc, subdir

    def __call__(self) -> None:
        self.asked.gate()
        if self.asked.foreign is False or not self.asked.settings or (self.iso is not None and self.iso.inherited):
            return
        if foreign.settings_paths(self.loc.worktree, self.subdir, self.asked.settings):
            raise _Remask


class _Asked:
    """The call's start, sent to the host in a thread of its own; :meth:`gate` waits for the answer."""

    def __init__(self, loc: hookproto.Location, start: hookproto.HookEvent) -> None:
        self._answer: hookproto.Outcome | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._ask, args=(loc, start), name="sandbox-start", daemon=True)
        self._thread.start()

    def _ask(self, loc: hookproto.Location, start: hookproto.HookEvent) -> None:
        try:
            self._answer = hookproto.forward(loc, start)
        except BaseException as exc:  # said in the caller's thread, by gate
            self._error = exc

    def gate(self) -> None:
        """Return once the host made the start durable; raise :class:`_NoHost` when none answered,
        :class:`~sandbox.errors.SandboxError` when it refused or denied the call (nothing runs then)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        answer = self._answer
        if answer is None:
            raise _NoHost
        if not answer.ok:
            raise SandboxError(answer.message)
        if answer.decision == "deny":
            raise SandboxError(answer.reason or answer.message)  # refused before it ran (a denial)

    @property
    def foreign(self) -> bool | None:
        """Whether the host says the run holds events from elsewhere (after :meth:`gate`)."""
        return None if self._answer is None else self._answer.foreign

    @property
    def settings(self) -> list[str] | None:
        """Where the host says the run's recorded tree holds agent settings (after :meth:`gate`)."""
        return None if self._answer is None else self._answer.settings


def with_output(result: CommandResult, output: dict[str, Tail]) -> dict[str, object]:
    """A command's result with its streams' tails as text, for the host's recorder to keep
    (:func:`sandbox.run.output.split`); undecodable bytes travel as surrogate escapes."""
    out: dict[str, object] = dict(result)
    for stream, tail in output.items():
        # Named as the recorder reads it: one channel for both streams travels as OUTPUT_TEXT.
        key = OUTPUT_TEXT if stream == "output" else stream
        out[key] = bytes(tail.kept).decode("utf-8", "surrogateescape")
        out[f"{key}_bytes"] = tail.total  # the tail travels, and how much the stream carried
    return out


def _command_event(
    phase: str, loc: hookproto.Location, tool: str, call_id: str, spec: CommandInput, **fields: Any
) -> hookproto.HookEvent:
    """One side of a hosted command call: what both sides carry, and ``fields``."""
    return hookproto.HookEvent(
        phase=phase, cwd=loc.worktree, tool=tool, call_id=call_id, input=spec, kind="command", agent="exec", **fields
    )


class _CommandResultBase(TypedDict):
    exit_code: int


class CommandResult(_CommandResultBase, total=False):
    """A command call's recorded result (see :func:`command_result`)."""

    cwd: str


def command_result(returncode: int, subdir: str) -> CommandResult:
    """A command call's recorded result: its exit code, and the worktree subdirectory it ran in (when
    not the root). Not in the input: a denial or approval of a command holds in every directory."""
    out = CommandResult(exit_code=returncode)
    if subdir:
        out["cwd"] = subdir
    return out


def user_workdir_of(common_dir: str) -> str | None:
    """The user's working tree of a repository's common git dir (None when bare)."""
    return os.path.dirname(common_dir) if os.path.basename(common_dir) == ".git" else None


class _CommandInputBase(TypedDict):
    argv: list[str]


class CommandInput(_CommandInputBase, total=False):
    """A command call's recorded input (see :func:`command_input`)."""

    isolation: str


def command_input(argv: Sequence[str], isolation: spawn.Isolation | None) -> CommandInput:
    """A command call's recorded input: its argv, and how it was confined when the caller said."""
    out = CommandInput(argv=list(argv))
    if isolation is not None:
        out["isolation"] = isolation.describe()
    return out


def run_command(
    argv: list[str],
    cwd: str,
    confined: tuple[spawn.Isolation, spawn.Policy] | None = None,
    output: dict[str, Tail] | None = None,
    gate: Callable[[], None] | None = None,
) -> int:
    """Run a command to its end in ``cwd``; its exit code (128+N for signal N, 127/126 as a shell).

    ``confined``: run it in a sandbox (:mod:`sandbox.confine.spawn`); a sandbox that cannot be set up
    raises :class:`~sandbox.confine.spawn.ConfinementError`, and the command never runs unconfined.
    ``output``: its output still goes to this process's stdout and stderr, and the tails of its
    streams are kept there (:mod:`sandbox.agent.outputs`). ``gate``: called just before the command's
    process starts (:func:`sandbox.confine.spawn.spawn`); what it raises is raised, nothing started.
    """
    channels = open_channels(output is not None)
    kept = output if output is not None else {}
    if confined is not None:
        try:
            jail = spawn.spawn(
                confined[0], confined[1], argv, cwd, stdout=channels.stdout, stderr=channels.stderr, gate=gate
            )
        except BaseException:
            channels.close()
            raise
        channels.started(kept)
        try:
            return jail.wait()
        finally:
            channels.drain()
    try:
        if gate is not None:
            gate()
    except BaseException:
        channels.close()
        raise
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=channels.stdout, stderr=channels.stderr)
    except FileNotFoundError:
        channels.close()
        return 127
    except PermissionError:
        channels.close()
        return 126
    except BaseException:
        channels.close()
        raise
    channels.started(kept)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            # The child got the same SIGINT from the terminal; wait for it to finish.
            continue
    channels.drain()
    if code < 0:
        return 128 + (-code if -code in set(signal.Signals) else 0)
    return code
