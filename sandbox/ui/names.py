"""What the agent named (a path, a label, a command) as the page shows it: through the one escape
of :mod:`sandbox.escape`, then HTML. A browser lays bidi text out by itself: ``invoice\\u202efdp.sh``
would read "invoicehs.pdf" and a zero-width space would make two names look alike, so a name that
held such a character is shown with it written out, and flagged."""

from __future__ import annotations

import re
from html import escape

from sandbox import escape as agent


def name(value: str) -> str:
    """A path or a name as ``<code>``, with a flag when it held invisible or control characters."""
    shown = f"<code>{escape(agent.path(value))}</code>"
    if not agent.suspicious(value):
        return shown
    return shown + " <span class='badge warn' title='control, bidi or zero-width characters'>hidden characters</span>"


def text(value: str) -> str:
    """A text of the agent's (a command, a label, a tool) for HTML: its line breaks kept."""
    return escape(agent.message(value))


_WORDS = re.compile(r"(\s+)")


def command(value: str, safe: bool = False) -> str:
    """A command for HTML (as :func:`text`; ``safe``: a command of our own, escaped for HTML only),
    each run of non-space characters in a ``<span class='w'>`` the style sheet keeps whole: a browser
    would break ``--max-fail=1`` at its hyphens, and a command must wrap only at its spaces."""
    shown = value if safe else agent.message(value)
    return "".join(
        part if not part or part.isspace() else f"<span class='w'>{escape(part)}</span>" for part in _WORDS.split(shown)
    )


#: What a line of content may hide from a reader: the bidi controls and zero-width characters (and the
#: other controls but tab and line ends) that :func:`sandbox.escape.text` writes as escapes.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)

#: The file-level warning above a diff whose lines hold such characters (as GitHub warns).
HIDDEN_NOTE = (
    "<p class='note warn hidden-chars'>This file's changes hold bidi or zero-width characters: each is "
    "written out (as <code>\\u202e</code>) and its line flagged. Text may read differently from what it does.</p>"
)


def hides(value: str) -> bool:
    """True when content holds a bidi, zero-width or control character (tabs and line ends aside)."""
    return _HIDDEN.search(value) is not None


def content(line: str) -> tuple[str, bool]:
    """A line of a file's content for HTML, and whether it hid characters: each bidi, zero-width or
    control character (tabs and line ends aside) written out through :func:`sandbox.escape.text` and marked."""
    if not _HIDDEN.search(line):
        return escape(line), False
    parts, last = [], 0
    for found in _HIDDEN.finditer(line):
        ch = found.group()
        parts.append(escape(line[last : found.start()]))
        parts.append(f"<span class='hc' title='hidden character U+{ord(ch):04X}'>{escape(agent.text(ch))}</span>")
        last = found.end()
    parts.append(escape(line[last:]))
    return "".join(parts), True
