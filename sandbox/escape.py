"""What the agent wrote, made safe for a person to read: one function (:func:`text`) and its forms.

Paths, tool names, commands, errors, labels, commit subjects and file contents come from the agent
(or from a run fetched from someone else). Printed as they are, a control character in one of them
can recolour or retitle the terminal, move the cursor to forge a line of output, or (OSC 52) write
to the user's clipboard; a newline fakes a line of ``sandbox log``; a bidi override shows
``invoice\\u202efdp.sh`` as "invoicehs.pdf"; a zero-width space makes two names look the same. So
every such string goes through :func:`text` (or :func:`path`, :func:`message`, :func:`terminal`,
which are built on it) before a person reads it: on the terminal, in a commit message ``sandbox
branch`` writes, on the review page (after HTML escaping):

- C0 controls, DEL, C1 controls (U+0080..U+009F) and the bytes of a name that are not UTF-8 (which
  Python holds as surrogate escapes) are written as escapes: ``\\n``, ``\\t``, ``\\033``, ``\\377``;
  any other lone surrogate (a JSON ``"\\ud800"`` from a hook) as ``\\ud800``;
- the bidi controls (U+202A..U+202E, U+2066..U+2069, U+200E/F, U+061C), the zero-width characters
  (U+200B..U+200D, U+2060, U+FEFF) and the line and paragraph separators as ``\\u202e``;
- a path that needed any escape, or holds a double quote or a backslash, is quoted as git quotes it
  (``"evil\\033[31m.txt"``, the way ``sandbox diff --stat`` shows it, from git); other non-ASCII
  text is left readable (git's ``core.quotePath=false``).

JSON output needs none of this: JSON escapes control characters itself (a JSON reader that shows a
string to a person escapes it then). Standard library only: the fast read commands use it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no re at run time until a string needs a look: the quick path's start
if TYPE_CHECKING:
    import re

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}
#: Bidi marks, embeddings, overrides and isolates, the zero-width characters, and the line and
#: paragraph separators: invisible, and they change how the rest of the line reads.
_INVISIBLE = (
    "\u061c\u200b\u200c\u200d\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff"
)
_UNSAFE = f"[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]"
_NEEDS_QUOTES = f'[\\x00-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}"\\\\]'
#: Every character :data:`_UNSAFE` matches is one ``str.isprintable`` refuses (control, surrogate,
#: format, line and paragraph separator: tests/test_escape.py checks every code point), so a
#: printable string needs no look, and the quick path's start pays for no :mod:`re`.


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _PATTERNS.get(pattern)
    if found is None:
        import re

        found = _PATTERNS[pattern] = re.compile(pattern)
    return found


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
    if value.isprintable() or not _compiled(_UNSAFE).search(value):
        return value
    return _compiled(_UNSAFE).sub(lambda m: _escaped(m.group()), value)


def path(value: str) -> str:
    """``value`` as git shows a path: as it is, or quoted with escapes when it needs any."""
    if (value.isprintable() and '"' not in value and "\\" not in value) or not _compiled(_NEEDS_QUOTES).search(value):
        return value
    inner = _compiled(_NEEDS_QUOTES).sub(
        lambda m: "\\" + m.group() if m.group() in '"\\' else _escaped(m.group()), value
    )
    return f'"{inner}"'


def lines(value: str) -> list[str]:
    """``value``'s lines, each made safe (a multi-line error or result shown line by line)."""
    return [text(line) for line in value.splitlines()]


def suspicious(value: str) -> bool:
    """True when :func:`text` would change ``value`` (a name to flag where it is shown)."""
    return not value.isprintable() and _compiled(_UNSAFE).search(value) is not None


def message(value: str) -> str:
    """A multi-line text (a commit message) with each line made safe; its line breaks kept."""
    return "\n".join(text(line) for line in value.split("\n"))


#: What a terminal is given as it is: line breaks, tabs, and colour (SGR) sequences, which is what
#: ``less -R`` passes too (it shows OSC 0/52 and other escapes inert; measured with less 590).
_KEPT = r"(\n|\t|\x1b\[[0-9;]*m)"


def terminal(value: str) -> str:
    """Content (a patch, coloured by git) for a terminal with no pager in between: colour kept,
    everything else :func:`text` escapes written as escapes. Through a pager the pager escapes it,
    as for git; to a file or a pipe it stays as it is (a patch must apply)."""
    if value.isprintable() or not _compiled(_UNSAFE).search(value):
        return value
    kept = _compiled(_KEPT)
    return "".join(part if kept.fullmatch(part) else text(part) for part in kept.split(value))
