"""The run page's Conflicts section: each refused path's three versions, its diff3 regions with the
markers styled (yours, base, the agent's), and what to do in the page's own actions.

The library's hints name the CLI's flags (``--3way``, ``--exclude PATH``, ``--call``, ``'sandbox
conflicts'``); on the page they name what the page offers instead (the "Apply with 3-way merge"
button, the paths and calls boxes, this section, the Undo button), so the advice is never a flag the
page has no control for. :func:`page_hint` is that one translation; the apply's refusals go through it too.
"""

from __future__ import annotations

import re
from html import escape
from typing import TYPE_CHECKING

from sandbox.ui import names

if TYPE_CHECKING:
    from sandbox.merge.conflicts import Region
    from sandbox.run.run import Run

THREE_WAY = "the 'Apply with 3-way merge' button"

#: The CLI's words in a hint and the page's for the same action, in order (the most specific first).
_PAGE_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"see base, agent and yours with 'sandbox conflicts'"), "see base, agent and yours below"),
    (re.compile(r"with 'sandbox conflicts'"), "in the Conflicts section"),
    (re.compile(r"'sandbox conflicts'"), "the Conflicts section"),
    (re.compile(r"'sandbox undo'"), "the Undo button"),
    (re.compile(r"\(apply --hunks\)"), "(picked hunks)"),
    (re.compile(r"^--3way merges only"), "A 3-way merge takes only"),
    (re.compile(r"\(--3way\)"), f"({THREE_WAY})"),
    (re.compile(r"--3way"), THREE_WAY),
    (re.compile(r"\(--exclude [^)]*\)"), "(':!PATH' in the paths box)"),
    (re.compile(r"\(--call\)"), "(in the calls box)"),
    (re.compile(r"with '--call [^']*'"), "by adding them to the calls box"),
    (re.compile(r", or use --with-deps"), ""),
    (re.compile(r"\(--with-deps adds (it|them)\)"), r"(add \1 to the calls box)"),
)


def page_hint(hint: str, path: str) -> str:
    """A library hint in the page's own actions (see the module docstring); ``PATH`` becomes ``path``."""
    for pattern, words in _PAGE_WORDS:
        hint = pattern.sub(words, hint)
    return hint.replace("':!PATH'", repr(":!" + path))


_SIDES = {"<<<<<<< yours": "yours", "||||||| base": "base", "=======": "agent", ">>>>>>> agent": ""}


def region(r: Region) -> str:
    """One diff3 region: the marker lines styled apart, each side's lines in its colour, numbered as
    in your file (the lines of base and the agent's, not in your file, carry no number)."""
    out = ["<pre class='diff conflict-region'>"]
    n, side = r.line, ""
    for line in r.lines:
        if line in _SIDES:
            side = _SIDES[line]
            out.append(f"<span class='marker' data-ln='      '>{escape(line)}</span>")
            continue
        number = " data-ln='      '"  # the gutter kept, empty: the line is not in your file
        if side in ("", "yours"):
            number = f" data-ln='{n:>5} '"
            n += 1
        text, hidden = names.content(line)
        kind = (side or "ctx") + (" hidden-chars" if hidden else "")
        out.append(f"<span class='{kind}'{number}>{text or ' '}</span>")
    out.append("</pre>")
    return "".join(out)


def conflicts(run: Run) -> str:
    """For each path an apply would refuse: why, what to do on this page, base / agent / yours, and
    the regions where both changed the same lines."""
    from sandbox.merge.conflicts import explain
    from sandbox.merge.planning import NothingToApplyError

    try:
        found = explain(run)
    except NothingToApplyError:
        return "<p class='muted'>Nothing left to apply.</p>"
    if not found:
        return "<p class='muted'>No conflicts: everything would apply.</p>"
    out = [
        "<p><button data-action='apply-3way'>Apply with 3-way merge</button> "
        "<span class='muted'>takes the agent's changes into your edited files as git merges them: "
        "conflict markers where both of you changed the same lines (undo takes it back).</span></p>"
    ]
    for c in found:
        sides = " · ".join(f"{s.label}: {escape(s.describe())}" for s in (c.base, c.agent, c.yours))
        regions = "".join(region(r) for r in c.regions)
        reason = escape(page_hint(c.reason, c.path))
        out.append(
            f"<div class='conflict'><h3>{names.name(c.path)}</h3><p class='refused'>{reason}</p>"
            f"<p>what to do: {escape(page_hint(c.hint, c.path))}</p><p class='muted'>{sides}</p>{regions}</div>"
        )
    return "".join(out)
