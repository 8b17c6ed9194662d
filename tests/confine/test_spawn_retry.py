"""A daemon's socket masked at the start that vanishes while bubblewrap starts (issue 31 leftovers).

:func:`sandbox.confine.spawn.spawn` masks the Unix sockets bound in the machine's read-only rest; one
removed in the milliseconds bubblewrap takes to start leaves it nothing to mount over (``/`` is read-only
there), and its set-up fails. The socket is made to vanish at that moment deterministically: the program
started as bubblewrap is a real script that removes it, then runs the real bubblewrap.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.confine import spawn

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed (make venv installs it)")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory in the machine's read-only rest (not /tmp, /run or a home), where a stray socket lies."""
    where = Path(tempfile.mkdtemp(prefix="sandbox-stray-", dir="/var/tmp"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def bwrap_that_first_removes(tmp_path: Path, victim: Path, *, every_time: bool = False) -> str:
    """A program that removes ``victim`` (once, or every time) and then runs the real bubblewrap."""
    script = tmp_path / "bwrap"
    once = "" if every_time else f'[ -e "{tmp_path}/done" ] || '
    script.write_text(f'#!/bin/sh\n{once}{{ touch "{tmp_path}/done"; rm -f "{victim}"; }}\nexec {BWRAP} "$@"\n')
    script.chmod(0o755)
    return str(script)


def isolation(program: str) -> spawn.Isolation:
    return spawn.Isolation(enabled=True, network=False, program=program, interactive=False)


def test_a_masked_socket_that_vanishes_while_bubblewrap_starts_is_retried(tmp_path: Path, outside: Path) -> None:
    daemon = socket.socket(socket.AF_UNIX)
    sock = outside / "daemon.sock"
    daemon.bind(str(sock))
    daemon.listen()
    try:
        policy = spawn.Policy(writable=(str(tmp_path),), protected=())
        program = bwrap_that_first_removes(tmp_path, sock)
        out = tmp_path / "out"
        argv = ["sh", "-c", f"echo ran > {out}"]
        assert spawn.spawn(isolation(program), policy, argv, str(tmp_path)).wait() == 0
        assert out.read_text() == "ran\n"
        assert (tmp_path / "done").exists()  # the socket did vanish under the first start
    finally:
        daemon.close()


def test_a_mount_that_is_not_there_is_named_in_one_sentence(tmp_path: Path, outside: Path) -> None:
    missing = outside / "gone"
    policy = spawn.Policy(writable=(str(tmp_path), str(missing)), protected=())
    proc = spawn.spawn(isolation(str(BWRAP)), policy, ["true"], str(tmp_path))
    with pytest.raises(spawn.ConfinementError) as caught:
        proc.wait()
    message = caught.value.message
    assert f"{missing} is not there, and the sandbox mounts it" in message
    assert message.count(". ") == 0 and message.endswith(".")
