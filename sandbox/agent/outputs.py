"""Where a command's stdout and stderr go while the sandbox keeps their tails (``sandbox exec``).

The command's output still reaches this process's own stdout and stderr as it would have gone
straight; on the way each stream's tail is kept (:mod:`sandbox.run.output`). How:

- stdout and stderr lead to one place (a terminal, or ``--json``'s stderr): one channel for both,
  so the reader sees them in the order they were written, and the kept stream is ``output``; on a
  terminal that channel is a pseudo-terminal with the terminal's size, so the command still sees a
  terminal (colours, progress bars) and its newlines are not rewritten;
- otherwise two pipes, kept as ``stdout`` and ``stderr``.

What goes on to a terminal passes :class:`~sandbox.agent.termsafe.TerminalFilter` (colours and cursor
movement kept, OSC 52, titles, reports and other sequences a terminal acts on dropped); to a file or a
pipe it goes byte for byte. The kept tails are the command's own bytes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from typing import IO

from sandbox.agent.termsafe import TerminalFilter
from sandbox.run.output import Tail, tee

#: How long the output of an ended command is waited for: a process the command left behind may hold
#: the channel open.
DRAIN_SECONDS = 2.0


@dataclass
class Channels:
    """The command's ends (``stdout``/``stderr`` for :class:`subprocess.Popen`; None: this process's own)
    and, once started, the threads copying the other ends."""

    stdout: int | None = None
    stderr: int | None = None
    _ours: list[tuple[str, int, int]] = field(default_factory=list)  # (stream, our end, our fd to copy to)
    _pumps: list[threading.Thread] = field(default_factory=list)

    def started(self, output: dict[str, Tail]) -> None:
        """The command runs: close its ends here, copy ours, keeping each stream's tail in ``output``."""
        for fd in {self.stdout, self.stderr} - {None}:
            assert fd is not None
            os.close(fd)
        for stream, ours, to in self._ours:
            tail = output[stream] = Tail()
            # To a terminal the command draws but does not act (sandbox.agent.termsafe); a pipe or a
            # file gets its bytes exact.
            clean = TerminalFilter().feed if os.isatty(to) else None
            self._pumps.append(tee(ours, _sink(to), tail, clean))

    def close(self) -> None:
        """The command could not start: release every end."""
        for fd in [self.stdout, self.stderr, *(ours for _s, ours, _to in self._ours)]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._ours.clear()

    def drain(self) -> None:
        """Wait for the rest of the output (not long: see :data:`DRAIN_SECONDS`)."""
        for pump in self._pumps:
            pump.join(DRAIN_SECONDS)


def open_channels(keep: bool) -> Channels:
    """The channels of a command whose output is kept (``keep``), or the process's own ones."""
    if not keep:
        return Channels()
    if _same_place(1, 2):
        ours, theirs = _terminal_like(1) if os.isatty(1) else os.pipe()
        return Channels(theirs, theirs, [("output", ours, 1)])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    return Channels(out_w, err_w, [("stdout", out_r, 1), ("stderr", err_r, 2)])


def _same_place(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _terminal_like(like: int) -> tuple[int, int]:
    """A pseudo-terminal (ours, the command's) of ``like``'s size, its newlines left as written."""
    import fcntl
    import pty
    import termios

    ours, theirs = pty.openpty()
    try:
        attrs = termios.tcgetattr(theirs)
        attrs[1] &= ~termios.ONLCR  # the kept output is what the command wrote, not "\r\n"
        termios.tcsetattr(theirs, termios.TCSANOW, attrs)
        size = fcntl.ioctl(like, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(theirs, termios.TIOCSWINSZ, size)
    except OSError:
        pass  # a terminal without a size: the pty's default
    return ours, theirs


def _sink(fd: int) -> IO[bytes] | None:
    try:
        return open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115 (the copying thread's)
    except OSError:
        return None
