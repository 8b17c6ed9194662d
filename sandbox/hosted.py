"""``sandbox exec`` through the process hosting the run: the command's call recorded over its socket.

When ``sandbox serve`` (or ``sandbox run``) hosts a run, it already has the repository open and a
watcher on the worktree. ``sandbox exec`` then only has to ask it to start the call (durable when
the answer comes), run the command, and ask it to finish the call with what its watcher saw. That
path imports neither pygit2 nor pydantic (a third of a second of start-up), like the hooks do: a
whole ``sandbox exec`` costs the command plus about the cost of two hooks.

Only the standard library, :mod:`sandbox.hookproto` and :mod:`sandbox.layout` are imported here. When no host answers,
:func:`run_hosted` returns None and the caller records the call in its own process.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox import hookproto, layout
from sandbox.errors import SandboxError

_FINISHED = re.compile(r"^(\S+) (succeeded|failed), (\d+) file\(s\)$")


@dataclass
class HostedOutcome:
    """What the host recorded: the call, its final status, how many files it changed."""

    call_id: str
    status: str
    files: int | None
    returncode: int
    message: str


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
) -> HostedOutcome | None:
    """Run ``argv`` as one call recorded by the run's host; None when no host answers (nothing ran).

    The start is durable (the host answered) before the command runs. If the host goes away while
    the command runs, the finish is recorded in this process (a scan finds the changes).
    """
    loc = locate(base_dir, run_id)
    if loc is None or not os.path.exists(hookproto.socket_path(loc.run_dir)):
        return None
    call_id = call_id or f"call_{secrets.token_hex(6)}"
    common: dict[str, Any] = {
        "cwd": loc.worktree,
        "tool": tool_name,
        "call_id": call_id,
        "input": {"argv": list(argv)},
        "kind": "command",
    }
    start = hookproto.HookEvent(phase="start", idempotency=idempotency, replay=replay, agent="exec", **common)
    answer = hookproto.forward(loc, start)
    if answer is None:
        return None  # no live host: the caller records the call itself
    if not answer.ok:
        raise SandboxError(answer.message)
    if answer.decision == "deny":
        raise SandboxError(answer.reason or answer.message)  # refused before it ran (a denial)
    returncode = run_command(list(argv), loc.worktree)
    finish = hookproto.HookEvent(
        phase="finish",
        status="succeeded" if returncode == 0 else "failed",
        error=None if returncode == 0 else f"exit code {returncode}",
        result={"exit_code": returncode},
        agent="exec",
        **common,
    )
    done = hookproto.handle(finish)  # the host, or this process if the host went away meanwhile
    if not done.ok:
        raise SandboxError(done.message)
    found = _FINISHED.match(done.message)
    if found:
        return HostedOutcome(call_id, found.group(2), int(found.group(3)), returncode, done.message)
    return HostedOutcome(call_id, finish.status, None, returncode, done.message)


def run_command(argv: list[str], cwd: str) -> int:
    """Run a command to its end in ``cwd``; its exit code (128+N for signal N, 127/126 as a shell)."""
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
