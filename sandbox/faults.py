"""Named fault-injection points for crash tests.

The library calls :func:`point` at every step where a crash matters. Nothing happens unless a
point was armed with :func:`arm` (the CLI arms the one named in ``SANDBOX_FAULT``); an armed point
makes the process SIGKILL itself there, exactly as a power cut or ``kill -9`` would.
"""

from __future__ import annotations

import os

_armed: str | None = None
_skip = 0
#: What :func:`arm` was last given (``name@N`` whole).
_given: str | None = None

#: Every point the code defines, for the crash-matrix tests (kept in sync by a test).
POINTS: set[str] = set()


def arm(name: str | None) -> None:
    """Arm one point; ``name@N`` fires on the N-th time it is reached (1-based)."""
    global _armed, _skip, _given
    _given = name or None
    if not name:
        _armed, _skip = None, 0
        return
    if "@" in name:
        name, _, count = name.partition("@")
        _skip = max(int(count) - 1, 0)
    else:
        _skip = 0
    _armed = name


def arm_once(name: str | None) -> None:
    """:func:`arm`, unless that same point is armed already: what an early part of a command reached of
    it stays counted (``sandbox start`` arms before its click edge does: :mod:`sandbox.cli.earlystart`)."""
    if (name or None) != _given:
        arm(name)


def point(name: str) -> None:
    """A crash point: SIGKILL this process here if the point is armed."""
    global _skip
    if _armed is None or _armed != name:
        return
    if _skip > 0:
        _skip -= 1
        return
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
