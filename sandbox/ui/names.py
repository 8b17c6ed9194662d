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
