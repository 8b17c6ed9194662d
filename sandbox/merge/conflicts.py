"""Conflicts explained: for each path an apply would refuse, the three versions side by side.

An apply refuses a path when your file is neither what the agent started from nor what it made.
To decide what to do you need all three: the **base** (the file before the selected calls), the
**agent**'s version (after them) and **yours** (on disk now). For text files on all three sides
they are shown as ``git merge-file --diff3`` shows them: each region where the sides disagree
with the base between ``||||||| base`` and ``=======``, yours above, the agent's below, labelled
``yours``, ``base`` and ``agent`` as ``apply --3way`` labels the markers it writes. Other cases
(deleted on one side, binary, a symlink, a directory in the way) are described side by side.

Read-only: nothing is written to your tree (the merge runs on temporary copies).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TypedDict

from sandbox.merge import planning, threeway
from sandbox.run.run import Run
from sandbox.store import convert, objects
from sandbox.store.objects import MODE_EXEC, MODE_FILE, MODE_LINK

#: Lines of unchanged text shown around each conflicting region.
CONTEXT = 3
_MARKERS = ("<<<<<<< yours", "||||||| base", "=======", ">>>>>>> agent")


class SideJSON(TypedDict):
    """One version of a conflicting path as plain data: blob id, mode (six octal digits), a few words."""

    oid: str | None
    mode: str | None
    describe: str


class RegionJSON(TypedDict):
    """One conflicting region of the diff3 merge as plain data."""

    line: int
    lines: list[str]


class ConflictJSON(TypedDict):
    """One conflict as ``sandbox conflicts --json`` prints it."""

    path: str
    reason: str
    hint: str
    calls: list[str]
    base: SideJSON
    agent: SideJSON
    yours: SideJSON
    obstacle: bool
    regions: list[RegionJSON]


@dataclass
class Side:
    """One of the three versions of a path."""

    label: str
    oid: str | None
    mode: int | None
    data: bytes | None = None

    @property
    def text(self) -> bool:
        """A regular file whose bytes have no NUL (git's own test for text)."""
        return self.data is not None and self.mode in (MODE_FILE, MODE_EXEC) and b"\0" not in self.data[:8000]

    def describe(self) -> str:
        """A few words on this version (absent, a symlink, binary, N lines)."""
        if self.mode is None:
            return "absent"
        if self.mode == MODE_LINK:
            return "a symlink" + (f" to {self.data.decode(errors='replace')}" if self.data is not None else "")
        if self.mode == 0o040000:
            return "a directory"
        if self.data is None:
            return "present"
        if not self.text:
            return f"binary, {len(self.data)} bytes"
        count = len(self.data.splitlines())
        return f"{count} line{'s' if count != 1 else ''}"


@dataclass
class Region:
    """One conflicting region of a diff3 merge: the first line's number and the lines (markers too)."""

    line: int
    lines: list[str]


@dataclass
class Conflict:
    """One path an apply would refuse, with its three versions."""

    path: str
    reason: str
    hint: str
    calls: list[str]
    base: Side
    agent: Side
    yours: Side
    obstacle: bool = False
    #: The diff3 merge's conflicting regions with context (text on all three sides), else empty.
    regions: list[Region] = field(default_factory=list)

    def to_json(self) -> ConflictJSON:
        """The conflict as plain data (``sandbox conflicts --json``)."""

        def side(s: Side) -> SideJSON:
            return {"oid": s.oid, "mode": f"{s.mode:06o}" if s.mode else None, "describe": s.describe()}

        return {
            "path": self.path,
            "reason": self.reason,
            "hint": self.hint,
            "calls": self.calls,
            "base": side(self.base),
            "agent": side(self.agent),
            "yours": side(self.yours),
            "obstacle": self.obstacle,
            "regions": [{"line": r.line, "lines": r.lines} for r in self.regions],
        }


def explain(run: Run, calls: list[str] | None = None, paths: list[str] | None = None) -> list[Conflict]:
    """The paths applying ``calls``/``paths`` of the run (all by default) would refuse, explained."""
    result = planning.plan(run, calls, paths)
    repo = run.repo
    root = run.user_workdir
    conv = convert.for_tree(root)
    out = []
    for p in result.conflicts:
        base = Side("base", p.base.oid if p.base else None, p.base.mode if p.base else None)
        agent = Side("agent", p.agent.oid if p.agent else None, p.agent.mode if p.agent else None)
        user = p.user.entry
        yours = Side("yours", user.oid if user else None, user.mode if user else None)
        if p.user.kind == "dir":
            yours.mode = 0o040000
        for s in (base, agent):
            if s.oid is not None and s.mode != 0o160000:
                s.data = objects.read_blob(repo, s.oid)
        if user is not None and p.user.kind == "file":
            with open(os.path.join(root, p.path), "rb") as fh:
                yours.data = conv.clean_bytes(p.path, fh.read())
        elif user is not None and p.user.kind == "link":
            yours.data = os.fsencode(os.readlink(os.path.join(root, p.path)))
        c = Conflict(p.path, p.reason, p.hint, p.calls, base, agent, yours, obstacle=p.obstacle)
        if agent.text and yours.text and (base.text or base.mode is None):
            merged, _n = threeway.merge_text(run.project, yours.data or b"", base.data or b"", agent.data or b"", True)
            c.regions = regions(merged.decode(errors="replace"))
        out.append(c)
    return out


def regions(merged: str, context: int = CONTEXT) -> list[Region]:
    """The conflict blocks of a ``merge-file --diff3`` result with ``context`` lines around each
    (overlapping blocks are joined). ``line`` is the line number in *your* file of the first line shown."""
    lines = merged.splitlines()
    # yours_line[k]: the line number in your file that merged line k stands for (or the next one).
    yours_line: list[int] = []
    n, section = 1, ""
    for line in lines:
        yours_line.append(n)
        if line in _MARKERS:
            section = {"<<<<<<< yours": "yours", "||||||| base": "base", "=======": "agent", ">>>>>>> agent": ""}[line]
        elif section in ("", "yours"):
            n += 1
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if lines[i] == _MARKERS[0]:
            j = i
            while j < len(lines) and lines[j] != _MARKERS[3]:
                j += 1
            lo, hi = max(0, i - context), min(len(lines), j + 1 + context)
            if spans and lo <= spans[-1][1]:
                spans[-1] = (spans[-1][0], hi)
            else:
                spans.append((lo, hi))
            i = j
        i += 1
    return [Region(yours_line[lo], lines[lo:hi]) for lo, hi in spans]
