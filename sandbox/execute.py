"""Running a command in a run's worktree as one recorded call (``sandbox exec``)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.models import LedgerEntry
from sandbox.run import Run


@dataclass
class ExecOutcome:
    """The recorded call and the command's exit code."""

    entry: LedgerEntry
    returncode: int


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
) -> ExecOutcome:
    """Run ``argv`` in the worktree as one call; file changes come from ``watcher`` or a scan.

    The ``started`` event is durable before the command starts. The call is ``succeeded`` when the
    command exits 0 and ``failed`` otherwise (the exit code is in the result).
    """
    input_value = {"argv": list(argv)}
    with run.tool_call(
        tool_name,
        input_value,
        call_id=call_id,
        step_id=step_id,
        idempotency=idempotency,
        replay=replay,
        summary=" ".join(argv)[:500],
        watcher=watcher,
    ) as call:
        call.note_unknown_changes()
        returncode = _run(list(argv), run.worktree)
        call.result = {"exit_code": returncode}
        if returncode != 0:
            # Recorded as failed without raising, so the exit code can be passed through.
            call.failed_with = f"exit code {returncode}"
    assert call.entry is not None
    return ExecOutcome(call.entry, returncode)


def _run(argv: list[str], cwd: str) -> int:
    try:
        proc = subprocess.Popen(argv, cwd=cwd)
    except FileNotFoundError:
        return 127
    except PermissionError:
        return 126
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            # The child got the same SIGINT from the terminal; wait for it to finish.
            continue
    if code < 0:
        return 128 + (-code if -code in set(signal.Signals) else 0)
    return code
