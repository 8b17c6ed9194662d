"""A process of the agent's that renames a FIFO and a plain file in turn over files the host reads by name.

Run as a script: ``python tests/fifo_swap.py SECONDS PATH...``. Each path's directory is made first; the
plain file's text (``*.txt text eol=crlf`` / ``*.log``) reads as an attributes and as an ignore file alike.
The tests of the host's readers start it beside the reader under test (tests/reliability/test_hostile_fifo.py,
tests/mcp/test_hostile_mcp.py): the reader must end, whatever it met.
"""

from __future__ import annotations

import os
import sys
import time

#: This file, to run with ``sys.executable``.
SCRIPT = os.path.abspath(__file__)


def swap(seconds: float, targets: list[str]) -> None:
    """Swap each of ``targets`` to a FIFO and back to a plain file, in turn, for ``seconds``."""
    for target in targets:
        os.makedirs(os.path.dirname(target), exist_ok=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for target in targets:
            spare = target + ".swap"
            os.mkfifo(spare)
            os.replace(spare, target)
            with open(spare, "w") as fh:
                fh.write("*.txt text eol=crlf\n*.log\n")
            os.replace(spare, target)


if __name__ == "__main__":
    swap(float(sys.argv[1]), sys.argv[2:])
