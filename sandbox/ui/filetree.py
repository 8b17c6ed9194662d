"""The run page's file tree: the changed files of the shown diff page by directory, each directory a
``<details>`` the reader folds, each file a link to its diff.

A file's "viewed" mark is the tab's, not the server's: the page's script keeps it in the tab's
``sessionStorage`` under the run, with the file's content revision (``data-rev``, its blob ids before
and after), so a live update keeps the mark while the file is as it was viewed and drops it when the
agent changes the file again (as a pull request's "viewed" does). A viewed file is shown folded.
"""

from __future__ import annotations

from html import escape

from sandbox.escape import path as agent_path
from sandbox.ui import names


def revision(before: str | None, after: str | None) -> str:
    """The content revision a "viewed" mark holds to: the blob ids before and after (or ``-``)."""
    return f"{(before or '-')[:12]}..{(after or '-')[:12]}"


def tree(paths: list[str]) -> str:
    """The paths as a tree of folding directories (a directory of one child stays on its own line)."""
    if not paths:
        return ""
    root: dict[str, object] = {}
    for p in paths:
        node = root
        parts = p.split("/")
        for part in parts[:-1]:
            child = node.setdefault(part + "/", {})
            assert isinstance(child, dict)
            node = child
        node[parts[-1]] = p
    body = _level(root, "")
    return (
        f"<details id='tree' data-dir='' open><summary>Files ({len(paths)})</summary>"
        f"<nav class='tree' aria-label='changed files'>{body}</nav></details>"
    )


def _level(node: dict[str, object], at: str) -> str:
    out = ["<ul>"]
    for key in sorted(node, key=lambda k: (not k.endswith("/"), k)):
        value = node[key]
        if isinstance(value, dict):
            label = escape(agent_path(key))
            where = escape(at + key, quote=True)
            out.append(
                f"<li class='dir'><details data-dir='{where}' open><summary>{label}</summary>"
                f"{_level(value, at + key)}</details></li>"
            )
        else:
            path = str(value)
            out.append(
                f"<li class='leaf'><a href='#' class='tree-file' data-path='{escape(path, quote=True)}'>"
                f"{names.name(key)}</a></li>"
            )
    out.append("</ul>")
    return "".join(out)


def controls() -> str:
    """A file heading's own controls: fold it, mark it viewed (the script keeps the mark per tab)."""
    return (
        "<span class='fcontrols'><label class='viewed'><input type='checkbox' class='viewed'> viewed</label>"
        "<button type='button' class='fold' aria-expanded='true' title='fold this file'>fold</button></span>"
    )
