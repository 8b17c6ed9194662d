"""How values read in the human output: local times with their zone, durations, commands, fitting.

Times are stored in UTC; a person reads them in their own zone, with the zone written out
(``2026-11-30 17:02:03 +0100``, git's ``--date=iso``), never a sliced ISO string. A command is
shown as a shell would need it typed (``shlex.join``), a multi-line input as its first line and
a marker saying how much was left out.
"""

from __future__ import annotations

import datetime
import shlex
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


_QUOTED = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
}


def quote_path(name: str) -> str:
    """A path as git shows it with ``core.quotePath=false``: as it is, unless it holds a control
    character, a double quote or a backslash; then C-quoted in double quotes.

    A path is the agent's to choose: a raw newline in one would print as more lines of a listing,
    so ``apply`` could seem to write paths it never wrote.
    """
    if not any(c in _QUOTED or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in name):
        return name
    out = []
    for c in name:
        if c in _QUOTED:
            out.append(_QUOTED[c])
        elif ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F:  # C1 too: a terminal may take U+009B for ESC [
            out.append("".join(f"\\{b:03o}" for b in c.encode()))
        elif "\udc80" <= c <= "\udcff":  # a byte of a non-UTF-8 name, as git writes it
            out.append(f"\\{ord(c) - 0xDC00:03o}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def visible(text: str, keep: str = "\n\t") -> str:
    """``text`` with every control character but those in ``keep`` written out (``\\x1b``).

    Commands, errors and summaries are the agent's words: printed raw, an escape sequence could
    move the cursor and overwrite what the user reads (``\\r``, ``ESC[2K``: a command shown as
    another), or act on the terminal (OSC 52 writes the clipboard). C0, DEL and C1 controls are
    shown, not sent.
    """
    if text.isprintable() and not any(c in text for c in "\x7f\x85\u2028\u2029"):
        return text
    out = []
    for c in text:
        code = ord(c)
        if c in keep or not (code < 0x20 or 0x7F <= code <= 0x9F):
            out.append(c)
        else:
            out.append(f"\\x{code:02x}")
    return "".join(out)


def first_line(text: str) -> str:
    """The first line of ``text``, with ``…(+N lines)`` when there are more (control characters
    written out: see :func:`visible`)."""
    lines = text.strip("\n").splitlines() or [""]
    more = len(lines) - 1
    return visible(lines[0], keep="\t") + (f" …(+{more} line{'s' if more != 1 else ''})" if more else "")


def command_of(tool: str, inputs: Any, summary: str | None) -> str:
    """What a call ran, as one line: an argv quoted for the shell, a shell command's first line, or
    the recorded summary."""
    if isinstance(inputs, dict):
        argv = inputs.get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            return first_line(shlex.join(argv))
        command = inputs.get("command")
        if isinstance(command, str) and command.strip():
            return first_line(command)
        path = inputs.get("path") or inputs.get("file_path")
        if isinstance(path, str) and not summary:
            return quote_path(path)
    return first_line(summary) if summary else ""


def fit(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` columns with ``…`` (whole when ``width`` is None: a pipe gets it all)."""
    if width is None or len(text) <= width:
        return text
    return text[: max(1, width - 1)] + "…"
