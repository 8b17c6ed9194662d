"""What ``/proc/net`` shows inside (issue 31 leftovers): the sandbox's own network namespace with the
network off, the host's with ``--network on``, where it cannot be masked (docs/confinement.md, "What
--network on shows").

``/proc/net`` is a link to ``/proc/self/net``, which the kernel fills from the network namespace of the
process that reads it; a mount over ``/proc/<pid>/net/tcp`` covers that one pid's entry, never another
process's, and bubblewrap cannot even make it (it resolves the link at set-up). Shown with a real
listener on loopback and real bubblewrap.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.confine import spawn

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed (make venv installs it)")


@pytest.fixture
def listener() -> Iterator[str]:
    """A TCP listener on loopback; its port as ``/proc/net/tcp`` writes it (``:1F90``)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield f":{server.getsockname()[1]:04X} "
    finally:
        server.close()


def seen_inside(tmp_path: Path, network: bool) -> str:
    """``/proc/net/tcp`` and ``/proc/self/net/tcp`` as a confined child process reads them."""
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), network=network)
    isolation = spawn.Isolation(enabled=True, network=network, program=BWRAP, interactive=False)
    out = tmp_path / "seen"
    argv = ["sh", "-c", f"sh -c 'cat /proc/net/tcp /proc/self/net/tcp' > {out}"]
    assert spawn.spawn(isolation, policy, argv, str(tmp_path)).wait() == 0
    return out.read_text()


def test_with_the_network_off_proc_net_shows_none_of_the_hosts_connections(tmp_path: Path, listener: str) -> None:
    seen = seen_inside(tmp_path, network=False)
    assert "local_address" in seen  # readable: programs that read it keep working
    assert listener not in seen


def test_with_the_network_on_proc_net_is_the_hosts_and_cannot_be_masked(tmp_path: Path, listener: str) -> None:
    assert listener in seen_inside(tmp_path, network=True)  # the documented trade-off of --network on
    masked = subprocess.run(
        [str(BWRAP), "--ro-bind", "/", "/", "--proc", "/proc", "--ro-bind", "/dev/null", "/proc/net/tcp", "true"],
        capture_output=True,
        check=False,
    )
    assert masked.returncode != 0, "a mount over /proc/net/tcp can be made now: mask it (docs/confinement.md)"
