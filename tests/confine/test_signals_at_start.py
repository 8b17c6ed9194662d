"""A signal sent to a confined command the moment it starts kills it, every time (sandbox.confine.spawn).

The shim (``sh -c 'trap : INT TERM HUP QUIT; "$@"; exit $?'``) traps the signals so that it lives to
turn a death by signal N into 128+N. Its child inherits the trap between the shell's fork and its
exec: a signal that lands there runs ``:`` and is gone, and the command ran on. Before the command
has started at all (bubblewrap still setting up) there was nothing to send it to. So
:meth:`Confined.send_signal` holds a signal until the command runs (exec'd): these tests send it
right at the start, many times, at staggered moments.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from sandbox.confine import spawn
from tests.agent.test_confine import isolation, needs_bwrap
from tests.conftest import scaled

ROUNDS = 12


def _dies_by(tmp_path: Path, signum: int, delay: float) -> int | None:
    policy = spawn.Policy(writable=(str(tmp_path),), protected=())
    proc = spawn.spawn(isolation(), policy, ["sleep", "30"], str(tmp_path))
    try:
        if delay:
            time.sleep(delay)  # staggered: before bubblewrap forks, in the shim, between its fork and exec
        proc.send_signal(signum)
        deadline = time.monotonic() + scaled(15)
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return proc.poll()
    finally:
        if proc.poll() is None:
            proc.proc.kill()  # bubblewrap: --die-with-parent's pdeathsig takes the rest
            proc.discard()


@needs_bwrap
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_right_at_the_start_always_kills_the_command(tmp_path: Path, signum: int) -> None:
    codes = [_dies_by(tmp_path, signum, (i % 6) * 0.004) for i in range(ROUNDS)]
    assert codes == [128 + signum] * ROUNDS, codes
