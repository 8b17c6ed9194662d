"""Running a command in a run's worktree as one recorded call (``sandbox exec``).

Where the command's file changes come from is a :class:`~sandbox.agent.changes.ChangeSource`, picked
by :func:`sandbox.agent.changes.pick`, cheapest first:

1. a source given by the caller, or an inotify watch (:mod:`sandbox.fast.inotify`) started in this
   process for the one command
   (``local_watcher=True``; measured against a scan as a whole ``sandbox exec`` on a 100k-file
   worktree: about 10% faster while the worktree's index is racily clean, 20% slower once that
   index is refreshed, and it takes one of the user's 128 inotify instances and ~10k of their
   watches per exec, so it is not the default);
2. the repository's live host (:mod:`sandbox.agent.host`): ``begin`` before the command, ``end``
   after it, O(changed paths);
3. otherwise a scan of the worktree at finish (``git status`` plus a tree diff, see
   :mod:`sandbox.store.scan`).

Whatever the source, :mod:`sandbox.store.capture` confirms every candidate path by content hash, and a
source that cannot vouch for the call (the host died, its watcher lost events) falls back to 3.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.agent import changes
from sandbox.agent.hosted import cannot_start, command_input, command_result, run_command
from sandbox.confine import foreign, settingstree, spawn
from sandbox.confine.policy import policy_for_run
from sandbox.models import CallStatus, LedgerEntry
from sandbox.run.calls import RecordingFailedError
from sandbox.run.ids import new_call_id
from sandbox.run.run import Run

if TYPE_CHECKING:
    from sandbox.fast.inotify import Inotify, Tree


@dataclass
class ExecOutcome:
    """The recorded call, the command's exit code, and where its changes were learnt from."""

    entry: LedgerEntry
    returncode: int
    #: "host", "watcher" or "scan": where the changes were learnt from
    source: str = "scan"
    #: The command could not start: why (it is recorded as the call's error).
    cannot_start: str | None = None
    #: The call's changes could not be recorded: why (it ended failed with that reason).
    unrecorded: str | None = None
    #: What the command did not see, to tell the user: a run from elsewhere's agent settings, masked
    #: (:func:`sandbox.confine.foreign.said`); None: nothing masked.
    masked: str | None = None


def execute(
    run: Run,
    argv: Sequence[str],
    *,
    tool_name: str = "run_command",
    idempotency: str = "conditional",
    replay: str = "ask",
    step_id: str | None = None,
    call_id: str | None = None,
    source: changes.ChangeSource | None = None,
    use_host: bool = True,
    local_watcher: bool = False,
    isolation: spawn.Isolation | None = None,
    subdir: str = "",
) -> ExecOutcome:
    """Run ``argv`` in the worktree as one call; its changes come from ``source`` (or as picked).

    The ``started`` event is durable before the command starts. The call is ``succeeded`` when the
    command exits 0 and ``failed`` otherwise (the exit code is in the result). ``isolation`` says
    how the command is confined (:mod:`sandbox.confine.spawn`; None: not at all); it is part of the
    call's recorded input, and confinement that cannot be had is refused before anything is recorded.
    ``subdir``: where in the worktree the command runs ("" for its root; recorded in the result when set).
    A command that cannot start at all (no such program, not executable) is recorded as failed with
    that reason, and its exit code is a shell's (127, 126).
    """
    if subdir and not os.path.isdir(os.path.join(run.worktree, subdir)):
        subdir = ""
    confined, masked = _confinement(run, isolation, subdir)
    # A scan's libgit2 status runs in a child killed at its deadline, as the host's does: a file the
    # agent swaps for a FIFO while it is read would block this process for ever (sandbox.store.scan).
    run.scan_in_worker = True
    call_id = call_id or new_call_id()
    source, own_watcher = _source(run, source, use_host, local_watcher)
    cwd = os.path.join(run.worktree, subdir) if subdir else run.worktree
    input_value = command_input(argv, isolation)
    unstartable = cannot_start(argv, cwd)
    learnt = "scan"
    unrecorded: str | None = None
    try:
        with run.tool_call(
            tool_name,
            input_value,
            call_id=call_id,
            step_id=step_id,
            idempotency=idempotency,
            replay=replay,
            summary=shlex.join(argv)[:500],  # as the shell needs it typed
        ) as call:
            source.begin(call_id)
            refused: spawn.ConfinementError | None = None
            try:
                returncode = (
                    unstartable.exit_code if unstartable else run_command(list(argv), cwd, confined, call.output)
                )
            except spawn.ConfinementError as exc:
                refused, returncode = exc, 126
            call.result = command_result(returncode, subdir)
            if returncode != 0:
                # Recorded as failed without raising, so the exit code can be passed through.
                call.failed_with = refused.message if refused else f"exit code {returncode}"
            if unstartable is not None:
                call.failed_with = f"the command could not start: {unstartable.message}"
            changed = source.end(call_id)
            if changed is not None:
                call.touched.update(changed)
                learnt = source.name
            else:
                call.note_unknown_changes()  # a scan
    except RecordingFailedError as exc:
        # Recording its changes failed (a tree too deep, a file that cannot be read safely): the call
        # was ended failed with the reason, and the command's exit code is still passed through.
        ended = run.state().calls.get(call_id)
        if ended is None or ended.status == CallStatus.started:
            raise
        call.entry, unrecorded = ended, exc.message
    finally:
        if own_watcher is not None:
            own_watcher[0].close()
    if refused is not None:
        raise refused
    assert call.entry is not None
    return ExecOutcome(call.entry, returncode, learnt, unstartable.message if unstartable else None, unrecorded, masked)


def _source(
    run: Run, given: changes.ChangeSource | None, use_host: bool, local_watcher: bool
) -> tuple[changes.ChangeSource, tuple[Inotify, Tree] | None]:
    """Where the call's changes come from (see the module docstring), and the watch this process made for
    it (``local_watcher``), to close when the call ends."""
    if given is not None:
        return given, None
    if local_watcher:
        own = _own_watcher(run)
        return changes.pick(tree=own[1]), own
    return changes.pick(host=(run.project.common_dir, run.run_id, run.dir) if use_host else None), None


def _confinement(
    run: Run, isolation: spawn.Isolation | None, subdir: str
) -> tuple[tuple[spawn.Isolation, spawn.Policy] | None, str | None]:
    """The confinement and policy of the command, and what to tell of the paths masked in it for a run
    holding anything from elsewhere (its worktree's agent settings, :mod:`sandbox.confine.foreign`,
    whatever the command); refused here (nothing recorded yet) when unavailable, or unconfined with such
    settings to mask."""
    masked: list[str] = []
    if run.state().foreign != 0:
        deeper = settingstree.recorded(run)  # where the run's recorded tree holds any (below subdir too)
        isolation, masked = foreign.for_foreign_run(isolation, run.worktree, subdir, run.run_id, deeper)
    if isolation is None or not isolation.enabled:
        return None, None
    spawn.check(isolation)
    told = foreign.said(run.worktree, masked, run.run_id) if masked else None
    return (isolation, policy_for_run(isolation, run)), told


def _own_watcher(run: Run) -> tuple[Inotify, Tree]:
    """An inotify instance of this process and its one tree, the worktree, for this one command.

    A tree that could not be watched whole does not vouch, and the call's changes are found by scanning.
    """
    from sandbox.fast.inotify import Inotify

    inotify = Inotify()
    return inotify, inotify.watch(run.worktree)
