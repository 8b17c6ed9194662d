"""What the agent wrote, made safe to show on a terminal.

Paths, tool names, commands, errors, labels and commit subjects come from the agent (or from a run
fetched from someone else). Printed as they are, a control character in one of them can recolour
or retitle the terminal, move the cursor to forge a line of output, or (OSC 52) write to the user's
clipboard; a newline fakes a line of ``sandbox log``; a bidi override shows a name reversed. So
every such string goes through :func:`text` or :func:`path` before the CLI prints it:

- C0 controls, DEL, C1 controls (U+0080..U+009F) and the bytes of a name that are not UTF-8 (which
  Python holds as surrogate escapes) are written as escapes: ``\\n``, ``\\t``, ``\\033``, ``\\377``;
  any other lone surrogate (a JSON ``"\\ud800"`` from a hook) as ``\\ud800``;
- the bidi controls and the line and paragraph separators as ``\\u202e``;
- a path that needed any escape, or holds a double quote or a backslash, is quoted as git quotes it
  (``"evil\\033[31m.txt"``, the way ``sandbox diff --stat`` shows it, from git); other non-ASCII
  text is left readable (git's ``core.quotePath=false``).

JSON output needs none of this: JSON escapes control characters itself. Standard library only: the
fast read commands use it.
"""

from __future__ import annotations

import re

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}
#: Bidi embeddings, overrides and isolates, the line and paragraph separators, and the zero-width
#: no-break space: invisible, and they change how the rest of the line reads.
_INVISIBLE = "\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff"
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]")
_NEEDS_QUOTES = re.compile(f'[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}"\\\\]')


def _escaped(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\{code - 0xDC00:03o}"  # a byte of the name that is not UTF-8, as git writes it
    if code < 0x100:
        return f"\\{code:03o}"
    return f"\\u{code:04x}"


def text(value: str) -> str:
    """``value`` with every character a terminal would act on written as an escape (see the module)."""
    if not _UNSAFE.search(value):
        return value
    return _UNSAFE.sub(lambda m: _escaped(m.group()), value)


def path(value: str) -> str:
    """``value`` as git shows a path: as it is, or quoted with escapes when it needs any."""
    if not _NEEDS_QUOTES.search(value):
        return value
    inner = _NEEDS_QUOTES.sub(lambda m: "\\" + m.group() if m.group() in '"\\' else _escaped(m.group()), value)
    return f'"{inner}"'


def lines(value: str) -> list[str]:
    """``value``'s lines, each made safe (a multi-line error or result shown line by line)."""
    return [text(line) for line in value.splitlines()]
