"""Running a command in a run's worktree as one recorded call (``sandbox exec``).

Where the command's file changes come from, cheapest first:

1. a ``watcher`` given by the caller (anything with ``take()``, see :mod:`sandbox.agent.watcher`);
2. the run's live session service (:mod:`sandbox.agent.session`, hosted by ``sandbox run``): ``begin``
   before the command, ``end`` after it, O(changed paths);
3. otherwise a scan of the worktree at finish (``git status`` plus a tree diff, see
   :mod:`sandbox.store.scan`). A watcher started in this process for the one command (``local_watcher=
   True``) was measured against it as a whole ``sandbox exec`` on a 100k-file worktree: about 10%
   faster while the worktree's index is racily clean (git re-hashes those files on every status),
   20% slower once that index is refreshed; it also takes one of the user's 128 inotify instances
   and ~10k of their watches per exec. So the scan is the default.

Whatever the source, :mod:`sandbox.store.capture` confirms every candidate path by content hash, and a
source that cannot vouch for the call (the service died, its watcher lost events) falls back to 3.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.agent import confine
from sandbox.agent.hosted import command_input, run_command
from sandbox.models import LedgerEntry
from sandbox.run.ids import new_call_id
from sandbox.run.run import Run


@dataclass
class ExecOutcome:
    """The recorded call, the command's exit code, and where its changes were learnt from."""

    entry: LedgerEntry
    returncode: int
    #: "session", "watcher" or "scan"
    source: str = "scan"


def execute(
    run: Run,
    argv: Sequence[str],
    *,
    tool_name: str = "run_command",
    idempotency: str = "conditional",
    replay: str = "ask",
    step_id: str | None = None,
    call_id: str | None = None,
    watcher: Any = None,
    use_session: bool = True,
    local_watcher: bool = False,
    isolation: confine.Isolation | None = None,
) -> ExecOutcome:
    """Run ``argv`` in the worktree as one call; file changes come from a watcher, the session or a scan.

    The ``started`` event is durable before the command starts. The call is ``succeeded`` when the
    command exits 0 and ``failed`` otherwise (the exit code is in the result). ``isolation`` says
    how the command is confined (:mod:`sandbox.agent.confine`; None: not at all); it is part of the
    call's recorded input, and confinement that cannot be had is refused before anything is recorded.
    """
    confined = None
    if isolation is not None and isolation.enabled:
        confine.check(isolation)
        policy = confine.policy_for(
            isolation,
            common_dir=run.project.common_dir,
            run_id=run.run_id,
            worktree=run.worktree,
            user_workdir=run.info.user_workdir,
        )
        confined = (isolation, policy)
    call_id = call_id or new_call_id()
    client = None
    own_watcher = None
    if watcher is None and use_session:
        from sandbox.agent import session

        client = session.client_for(run)
    if watcher is None and client is None and local_watcher:
        from sandbox.agent.watcher import Watcher

        own_watcher = watcher = Watcher(run.worktree, take_window=True)
        own_watcher.start()
    input_value = command_input(argv, isolation)
    source = "scan"
    try:
        with run.tool_call(
            tool_name,
            input_value,
            call_id=call_id,
            step_id=step_id,
            idempotency=idempotency,
            replay=replay,
            summary=shlex.join(argv)[:500],  # as the shell needs it typed
            watcher=watcher,
        ) as call:
            begun = client is not None and client.begin(call_id) is not None
            refused: confine.ConfinementError | None = None
            try:
                returncode = run_command(list(argv), run.worktree, confined)
            except confine.ConfinementError as exc:
                refused, returncode = exc, 126
            call.result = {"exit_code": returncode}
            if returncode != 0:
                # Recorded as failed without raising, so the exit code can be passed through.
                call.failed_with = refused.message if refused else f"exit code {returncode}"
            changed = client.end(call_id) if client is not None and begun else None
            if changed is not None:
                call.touched.update(changed)
                source = "session"
            else:
                call.note_unknown_changes()  # the watcher's take, or a scan when it cannot vouch
        if source == "scan" and watcher is not None and getattr(watcher, "vouching", True):
            source = "watcher"
    finally:
        if own_watcher is not None:
            own_watcher.stop()
    if refused is not None:
        raise refused
    assert call.entry is not None
    return ExecOutcome(call.entry, returncode, source)
