"""How values read in the human output: local times with their zone, durations, commands, fitting.

Times are stored in UTC; a person reads them in their own zone, with the zone written out
(``2026-11-30 17:02:03 +0100``, git's ``--date=iso``), never a sliced ISO string. A command is
shown as a shell would need it typed (``shlex.join``, as :func:`quote` writes it), a multi-line
input as its first line and a marker saying how much was left out.
"""

from __future__ import annotations

import datetime

from sandbox.cli import escape

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from typing import Any


def local_time(when: datetime.datetime | str | None) -> str:
    """``when`` in the local time zone, with the zone: ``YYYY-MM-DD HH:MM:SS +HHMM`` ("" for None)."""
    if when is None or when == "":
        return ""
    if isinstance(when, str):  # pydantic's JSON ends UTC times with Z, which Python 3.10 does not read
        when = datetime.datetime.fromisoformat(when[:-1] + "+00:00" if when.endswith("Z") else when)
    if when.tzinfo is None:  # stored times are UTC; an old record may lack the marker
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


def duration(start: datetime.datetime | None, end: datetime.datetime | None) -> str:
    """How long a call took, short (``0.12s``, ``3.4s``, ``2m05s``, ``1h02m``); "" when not finished."""
    if start is None or end is None:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 1:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def first_line(text: str) -> str:
    """The first line of ``text``, with ``…(+N lines)`` when there are more."""
    lines = text.strip("\n").splitlines() or [""]
    more = len(lines) - 1
    return lines[0] + (f" …(+{more} line{'s' if more != 1 else ''})" if more else "")


def command_of(tool: str, inputs: Any, summary: str | None) -> str:
    """What a call ran, as one line: an argv quoted for the shell, a shell command's first line, or
    the recorded summary; safe to print (:func:`sandbox.cli.escape.text`: it is the agent's)."""
    return escape.text(_command_of(inputs, summary))


def _command_of(inputs: Any, summary: str | None) -> str:
    if isinstance(inputs, dict):
        argv = inputs.get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            return first_line(" ".join(quote(a) for a in argv))
        command = inputs.get("command")
        if isinstance(command, str) and command.strip():
            return first_line(command)
        path = inputs.get("path") or inputs.get("file_path")
        if isinstance(path, str) and path:  # what the call touched, never a summary that says otherwise
            return path
    return first_line(summary) if summary else ""


#: What ``shlex.quote`` leaves unquoted: ``[\\w@%+=:,./-]`` with ``re.ASCII``.
_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def quote(arg: str) -> str:
    """``shlex.quote(arg)``, without :mod:`re` (which :mod:`shlex` imports: ``log`` is a quick command;
    tests/fast/test_no_re.py holds the two equal)."""
    if not arg:
        return "''"
    if _SHELL_SAFE.issuperset(arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def fit(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` columns with ``…`` (whole when ``width`` is None: a pipe gets it all)."""
    if width is None or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"


def call_numbers(seqs: dict[str, int], call_ids: list[str]) -> str:
    """Calls named as ``log`` numbers them, runs of numbers shortened: ``#3``, ``#1-#4, #7`` (an id
    the ledger does not know is shown as it is)."""
    numbers = sorted({seqs[c] for c in call_ids if c in seqs})
    parts: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        parts.append(f"#{numbers[i]}" if i == j else f"#{numbers[i]}-#{numbers[j]}")
        i = j + 1
    parts += [escape.text(c) for c in call_ids if c not in seqs]
    return ", ".join(parts)
