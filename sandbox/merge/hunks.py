"""Hunks: taking part of the agent's change to a file.

The diff of one path is computed in-process by libgit2 (pygit2) between the state the apply starts
from (the first selected call's before-state) and the agent's state, twice: with three lines of
context, as ``git diff`` shows it (a *hunk*), and with none (a *change*: one run of removed and
added lines; a hunk holds one or more, and splitting a hunk shows them one by one).

**Hunk ids** are stable: ``sha256(path NUL header NUL removed lines NUL added lines)``, cut to 16 hex
digits, where ``header`` is the ``@@ -a,b +c,d @@`` line of the hunk (or of the change) in that
diff. The same selection of calls and paths therefore gives the same ids in ``sandbox diff --json``
and in ``sandbox apply --hunks-from``, before and after some of them were taken. A file whose change
is not a text edit (added, deleted, binary, a symlink, a mode change) is one unit; its id (``file``)
is the hash of the path and both states, and naming it takes the whole file, as naming every hunk does.

Taking a subset writes ``base + chosen changes`` (a new blob); the apply (:mod:`sandbox.merge.partial`)
records it as a :class:`~sandbox.models.PartialApply` so that ``status``/``log`` say "partly applied",
a later apply can take the rest, and ``undo`` puts back exactly the base.

A file's parsed hunks are kept per process (:func:`file_hunks`), so listing them and then taking some
diffs the file once. On a file the user edited, each chosen change is placed by its window (its lines
and three of context) found in the user's file, as ``git apply`` finds a hunk (:func:`onto_yours`); the
user's change is diffed only when a window is not found (to name the lines in the way). See
docs/design.md, "Picked hunks: parsed once, placed by their windows".
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pygit2

from sandbox.errors import SandboxError, UsageError
from sandbox.store import objects
from sandbox.store.lru import Lru
from sandbox.store.objects import MODE_EXEC, MODE_FILE, Entry

if TYPE_CHECKING:
    from sandbox.store.journal import State

CONTEXT = 3
BINARY_SNIFF = 8000
NO_NEWLINE = b"\\ No newline at end of file\n"
#: The parsed hunks kept per process (:func:`file_hunks`): at most this many files, and lines in all.
CACHE_FILES = 64
CACHE_LINES = 200_000


class HunkSelectionError(SandboxError):
    """The hunks named for an apply do not exist (any more) or an edited hunk does not apply."""


@dataclass
class Change:
    """One run of removed and added lines (a zero-context hunk): old lines ``[start, start+count)``."""

    id: str
    header: str
    start: int
    count: int
    new: list[bytes]
    #: 0-based index of the first added line in the agent's file.
    new_start: int = 0


@dataclass
class Hunk:
    """A hunk with context, as ``git diff`` shows it, and the changes it is made of."""

    id: str
    header: str
    start: int
    count: int
    lines: list[tuple[str, bytes]]
    changes: list[Change] = field(default_factory=list)


@dataclass
class FileHunks:
    """The hunks of one path between ``before`` and ``after`` (``text`` False: one whole-file unit)."""

    path: str
    before: State
    after: State
    id: str
    text: bool
    old: list[bytes] = field(default_factory=list)
    hunks: list[Hunk] = field(default_factory=list)
    #: Ids taken by an earlier partial apply of this path (not offered again).
    taken: list[str] = field(default_factory=list)

    @property
    def changes(self) -> list[Change]:
        """Every change of the file, in order."""
        return [c for h in self.hunks for c in h.changes]

    def all_ids(self) -> set[str]:
        """Every id that names something in this file."""
        return {self.id} | {h.id for h in self.hunks} | {c.id for c in self.changes}


_parsed: Lru[tuple[str, State, State], FileHunks] = Lru(CACHE_FILES, CACHE_LINES, lambda fh: len(fh.old) + 1)


@dataclass
class Choice:
    """What to take: hunk, change or file ids, and edited hunks (hunk id -> the edited hunk's lines)."""

    ids: set[str] = field(default_factory=set)
    edits: dict[str, list[bytes]] = field(default_factory=dict)


@dataclass
class Taken:
    """What a choice takes from one file: the new blob's lines (None: the whole agent state)."""

    ids: list[str]
    headers: list[str]
    edited: bool
    whole: bool
    content: bytes | None = None
    #: The replacements made, in the base's lines: (first line, lines removed, lines added), one per id.
    parts: list[tuple[int, int, list[bytes]]] = field(default_factory=list)


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` (the last may lack it), as git and libgit2 count them (only ``\\n`` ends one)."""
    if b"\r" not in data:  # then bytes.splitlines ends lines where git does, in C
        return data.splitlines(keepends=True)
    parts = data.split(b"\n")
    out = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def hunk_id(path: str, header: str, old: list[bytes], new: list[bytes]) -> str:
    """The stable id of a hunk or change (see the module docstring)."""
    digest = hashlib.sha256()
    for part in (os.fsencode(path), header.encode(), b"".join(old), b"".join(new)):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def is_text(data: bytes) -> bool:
    """True when ``data`` has no NUL in its first bytes (git's test for a text file)."""
    return b"\0" not in data[:BINARY_SNIFF]


def _header(start: int, count: int, new_start: int, new_count: int) -> str:
    """The ``@@`` line as git writes it (a count of 1 is left out)."""

    def side(begin: int, n: int) -> str:
        return str(begin) if n == 1 else f"{begin},{n}"

    return f"@@ -{side(start, count)} +{side(new_start, new_count)} @@"


def _span(start: int, count: int) -> int:
    """0-based index of a hunk side's first line (git numbers an empty side by the line before it)."""
    return start if count == 0 else start - 1


def file_hunks(repo: pygit2.Repository, path: str, before: State, after: State) -> FileHunks:
    """The hunks and changes of ``path`` from ``before`` to ``after`` (blobs in ``repo``).

    Kept per process by ``(path, before, after)`` (blobs never change, and an id is a function of
    the path and the two blobs), so that an apply of hunks just listed (``diff --json``, the page,
    ``apply --hunks``) does not read and diff the file again; each caller gets its own
    :class:`FileHunks` (with nothing ``taken``) over the shared, never-modified hunks and lines.
    """
    key = (path, before, after)
    kept = _parsed.get(key)
    if kept is None:
        kept = _parse(repo, path, before, after)
        _parsed.put(key, kept)
    return FileHunks(kept.path, kept.before, kept.after, kept.id, kept.text, kept.old, list(kept.hunks))


def forget() -> None:
    """Drop every parsed file kept by :func:`file_hunks` (a benchmark's cold start; memory)."""
    _parsed.clear()


def _parse(repo: pygit2.Repository, path: str, before: State, after: State) -> FileHunks:
    whole_id = hunk_id(
        path,
        "file",
        [f"{before.mode:o} {before.oid}".encode() if before else b"absent"],
        [f"{after.mode:o} {after.oid}".encode() if after else b"absent"],
    )
    regular = (MODE_FILE, MODE_EXEC)
    if before is None or after is None or before.mode != after.mode or before.mode not in regular:
        return FileHunks(path, before, after, whole_id, text=False)
    old_data = objects.read_blob(repo, before.oid)
    new_data = objects.read_blob(repo, after.oid)
    if not (is_text(old_data) and is_text(new_data)):
        return FileHunks(path, before, after, whole_id, text=False)
    old = split_lines(old_data)  # the agent's lines are the hunks' own '+' lines: not split here
    result = FileHunks(path, before, after, whole_id, text=True, old=old)
    # One diff, with context; its changes are the runs of '-' and '+' lines in it, exactly the hunks of
    # a diff without context (xdiff makes one edit script and only groups it by the context asked for).
    changes: list[Change] = []
    for h in pygit2.Patch.create_from(old_data, new_data, context_lines=CONTEXT).hunks:
        start = _span(h.old_start, h.old_lines)
        header = _header(h.old_start, h.old_lines, h.new_start, h.new_lines)
        lines = [(line.origin, line.raw_content) for line in h.lines if line.origin in " +-"]
        removed = [c for o, c in lines if o in " -"]
        added = [c for o, c in lines if o in " +"]
        hunk = Hunk(hunk_id(path, header, removed, added), header, start, h.old_lines, lines)
        hunk.changes = _changes_of(path, lines, start, _span(h.new_start, h.new_lines), old)
        changes += hunk.changes
        result.hunks.append(hunk)
    placed = {c.id for h in result.hunks for c in h.changes}
    if len(placed) != len(changes):  # never seen; refuse rather than take a change twice or not at all
        raise HunkSelectionError(f"The hunks of {path!r} could not be split into changes; apply it whole.")
    return result


def _changes_of(path: str, lines: list[tuple[str, bytes]], at: int, new_at: int, old: list[bytes]) -> list[Change]:
    """The changes of one hunk: each run of '-' and '+' lines, numbered as a diff without context numbers it."""
    out: list[Change] = []
    run: list[int] | None = None  # [old index, new index, removed]
    added: list[bytes] = []
    for origin, content in [*lines, (" ", b"")]:
        if origin == " ":
            if run is not None:
                o, n, r = run
                a = len(added)
                header = _header(o + 1 if r else o, r, n + 1 if a else n, a)
                out.append(Change(hunk_id(path, header, old[o : o + r], added), header, o, r, added, n))
                run, added = None, []
            at, new_at = at + 1, new_at + 1
            continue
        if run is None:
            run = [at, new_at, 0]
        if origin == "-":
            run[2] += 1
            at += 1
        else:
            added.append(content)
            new_at += 1
    return out


def hunk_text(h: Hunk) -> bytes:
    """A hunk as ``git diff`` prints it (header and lines, with "no newline" markers)."""
    out = [h.header.encode() + b"\n"]
    for origin, content in h.lines:
        out.append(origin.encode() + content)
        if not content.endswith(b"\n"):
            out.append(b"\n" + NO_NEWLINE)
    return b"".join(out)


def change_hunk(fh: FileHunks, change: Change) -> Hunk:
    """One change of a split hunk shown as a hunk of its own (with context around it)."""
    begin = max(0, change.start - CONTEXT)
    end = min(len(fh.old), change.start + change.count + CONTEXT)
    lines = [(" ", line) for line in fh.old[begin : change.start]]
    lines += [("-", line) for line in fh.old[change.start : change.start + change.count]]
    lines += [("+", line) for line in change.new]
    lines += [(" ", line) for line in fh.old[change.start + change.count : end]]
    old_count = end - begin
    new_count = old_count - change.count + len(change.new)
    new_begin = change.new_start - (change.start - begin)
    header = _header(begin + (1 if old_count else 0), old_count, new_begin + (1 if new_count else 0), new_count)
    return Hunk(change.id, header, begin, old_count, lines, [change])


def parse_edit(original: Hunk, edited: bytes) -> list[bytes]:
    """The new side of an edited hunk; its old side must still be the hunk's (as ``git add -p`` checks).

    Lines starting with ``#`` are comments; ``' '`` and ``'-'`` lines are the old side, ``' '`` and
    ``'+'`` lines the new side; ``\\ No newline at end of file`` strips the line before it.
    """
    old: list[bytes] = []
    new: list[bytes] = []
    last: list[list[bytes]] = []
    for raw in split_lines(edited):
        line = raw if raw.endswith(b"\n") else raw + b"\n"
        if line.startswith(b"#") or line.startswith(b"@@"):
            continue
        if line.startswith(b"\\"):
            for side in last:
                if side:
                    side[-1] = side[-1][:-1] if side[-1].endswith(b"\n") else side[-1]
            continue
        mark, content = line[:1], line[1:]
        if line == b"\n":
            mark, content = b" ", b"\n"  # an editor may strip the blank of an empty context line
        if mark == b" ":
            old.append(content)
            new.append(content)
            last = [old, new]
        elif mark == b"-":
            old.append(content)
            last = [old]
        elif mark == b"+":
            new.append(content)
            last = [new]
        else:
            raise HunkSelectionError(
                f"The edited hunk has a line starting with {mark.decode(errors='replace')!r}; "
                "each line must start with ' ', '-' or '+'."
            )
    expected = [c for o, c in original.lines if o in " -"]
    if old != expected:
        raise HunkSelectionError(
            "The edited hunk does not apply: its context and '-' lines must stay as they were; nothing was taken "
            "from it."
        )
    return new


def assemble(old: list[bytes], replacements: list[tuple[int, int, list[bytes]]]) -> bytes:
    """``old`` with each ``(start, count, new lines)`` replacement made (they must not overlap)."""
    out: list[bytes] = []
    at = 0
    for start, count, new in sorted(replacements, key=lambda r: (r[0], r[1])):
        if start < at:
            raise HunkSelectionError("Two of the chosen hunks overlap (an edited hunk and a part of it); choose one.")
        out.extend(old[at:start])
        out.extend(new)
        at = start + count
    out.extend(old[at:])
    return b"".join(out)


def take(fh: FileHunks, choice: Choice, content: bool = True) -> Taken | None:
    """What ``choice`` (plus what was taken before, ``fh.taken``) takes from ``fh``; None: nothing.

    ``content`` False leaves :attr:`Taken.content` None: for a caller that needs only the ids and
    the replacements (placing them on the user's file), not the base with them made.
    """
    ids = choice.ids | set(fh.taken)
    if not fh.text:
        if ids & fh.all_ids():
            return Taken([fh.id], ["file"], edited=False, whole=True)
        return None
    if fh.id in ids:
        every = fh.changes
        parts = [(c.start, c.count, c.new) for c in every]
        return Taken([c.id for c in every], [c.header for c in every], edited=False, whole=True, parts=parts)
    replacements: list[tuple[int, int, list[bytes]]] = []
    taken_ids: list[str] = []
    headers: list[str] = []
    edited = False
    chosen_changes: set[str] = set()
    for hunk in fh.hunks:
        if hunk.id in choice.edits:
            new = parse_edit(hunk, b"".join(choice.edits[hunk.id]))
            replacements.append((hunk.start, hunk.count, new))
            taken_ids.append(hunk.id)
            headers.append(hunk.header)
            edited = True
            continue
        for change in hunk.changes:
            if change.id in choice.edits:  # a part of a split hunk, edited
                part = change_hunk(fh, change)
                replacements.append((part.start, part.count, parse_edit(part, b"".join(choice.edits[change.id]))))
                taken_ids.append(change.id)
                headers.append(change.header)
                edited = True
            elif hunk.id in ids or change.id in ids:
                replacements.append((change.start, change.count, change.new))
                taken_ids.append(change.id)
                headers.append(change.header)
                chosen_changes.add(change.id)
    if not replacements:
        return None
    if not edited and chosen_changes == {c.id for c in fh.changes}:
        return Taken(taken_ids, headers, edited=False, whole=True, parts=replacements)
    made = assemble(fh.old, replacements) if content else None
    return Taken(taken_ids, headers, edited=edited, whole=False, content=made, parts=replacements)


@dataclass
class Overlap:
    """A chosen hunk that touches the user's own change: ``index`` into :attr:`Taken.ids`, the user's
    changed lines (1-based, in the base's numbering)."""

    index: int
    first: int
    last: int


def your_changes(old_data: bytes, yours: bytes) -> list[tuple[int, int, int]]:
    """The user's changes to a file as ``(first line, lines removed, lines added)`` in the base's lines."""
    return [
        (_span(h.old_start, h.old_lines), h.old_lines, h.new_lines)
        for h in pygit2.Patch.create_from(old_data, yours, context_lines=0).hunks
    ]


def _touches(start: int, count: int, window: tuple[int, int], region: tuple[int, int, int]) -> bool:
    """True when the user's ``region`` falls in a chosen change's ``window`` (the change and its context)."""
    first, end = window
    at, removed, _added = region
    if removed:
        return at < end and first < at + removed
    return first < at < end or (count == 0 and at == start)


def onto_yours(old: list[bytes], yours: bytes, parts: list[tuple[int, int, list[bytes]]]) -> bytes | Overlap:
    """The user's file with the chosen replacements made where their context still matches, as ``git
    apply`` places a hunk (moved by the lines the user added or removed above it); the first
    replacement whose change or context lines the user changed is returned as an :class:`Overlap`.

    Each replacement's window (its lines and three of context each side) is first looked for as it
    is in the user's file (:func:`_placed_by_context`: a few byte searches, no diff); only when one
    is not found there, once, in order, does the whole-file diff of the user's change decide
    (:func:`_onto_yours_by_diff`), which also names the user's lines in the way.
    """
    placed = _placed_by_context(old, yours, sorted(parts, key=lambda r: (r[0], r[1])))
    if placed is None:
        return _onto_yours_by_diff(old, yours, parts)
    out: list[bytes] = []
    at = 0
    for begin, end, new in placed:
        out += (yours[at:begin], b"".join(new))
        at = end
    out.append(yours[at:])
    return b"".join(out)


def _placed_by_context(
    old: list[bytes], yours: bytes, parts: list[tuple[int, int, list[bytes]]]
) -> list[tuple[int, int, list[bytes]]] | None:
    """The byte ranges of ``yours`` the replacements take, each window found as it is in the base, in the
    base's order, nearest to where the user's lines above it put it (``git apply``'s search); None when
    one is not found so (the whole-file diff then decides and names the user's change in the way).

    The search starts where the window was expected (its place in the base moved as much as the
    window before it) and goes no further than needed, so a file the user changed in few places costs
    a comparison of its bytes, not a diff. Where the base's lines are unique this is what the whole-file
    diff concludes (tested with hypothesis); a window at the start or end of the file with less context
    must stay there, as git anchors such a hunk; an insertion at the very start or end gives up (who is
    first, the user's lines or the agent's, is the diff's call).
    """
    out: list[tuple[int, int, list[bytes]]] = []
    prev_end, shift, prev_w1 = 0, 0, -1
    base_at, line = 0, 0  # the byte offset of old[line] in the base, walked forward (parts are sorted)
    for start, count, new in parts:
        w0, w1 = max(0, start - CONTEXT), min(len(old), start + count + CONTEXT)
        if count == 0 and not (w0 < start < w1):
            return None
        base_at += sum(map(len, old[line:w0]))
        line = w0
        window = b"".join(old[w0:w1])
        expected = base_at + shift
        if w0 < prev_w1:  # overlaps the window before: the same lines, moved alike
            found = expected if yours.startswith(window, expected) else -1
        elif w0 == 0 and start < CONTEXT:  # less context above: the file's first lines, as git anchors it
            found = 0 if yours.startswith(window) else -1
        else:
            found = _nearest(yours, window, expected, prev_end)
        at_end = w1 == len(old) and (start + count + CONTEXT > w1 or not window.endswith(b"\n"))
        if found < 0 or (at_end and found + len(window) != len(yours)):
            return None  # not found, or less context below (or no newline) and no longer the file's end
        shift = found - base_at
        begin = found + sum(map(len, old[w0:start]))
        if out and begin < out[-1][1]:
            return None  # two chosen replacements overlap: the diff's path refuses it (assemble)
        out.append((begin, begin + sum(map(len, old[start : start + count])), new))
        prev_end, prev_w1 = found + len(window), w1
    return out


def _nearest(data: bytes, window: bytes, expected: int, lo: int) -> int:
    """The start of the occurrence of ``window`` in ``data`` at a line start, at or after ``lo``, fewest
    lines from ``expected`` (the later one of two as near, as ``git apply`` tries them); -1 if none.
    ``window`` is whole lines (the last may lack its newline)."""
    if not window:
        return -1
    if expected >= lo and data.startswith(window, expected) and (expected == 0 or data[expected - 1] == 0x0A):
        return expected
    after = max(expected, lo)
    while True:
        after = data.find(window, after)
        if after <= 0 or data[after - 1] == 0x0A:
            break
        after += 1
    before = min(expected + len(window) - 1, len(data))
    while before > lo:
        before = data.rfind(window, lo, before)
        if before <= 0 or data[before - 1] == 0x0A:
            break
        before += len(window) - 1
    if before < lo:
        return after
    if after < 0 or data.count(b"\n", expected, after) > data.count(b"\n", before, expected):
        return before
    return after


def _onto_yours_by_diff(old: list[bytes], yours: bytes, parts: list[tuple[int, int, list[bytes]]]) -> bytes | Overlap:
    """:func:`onto_yours` by the whole-file diff of the user's change (the windows' placing, checked)."""
    mine = split_lines(yours)
    regions = your_changes(b"".join(old), yours)
    placed: list[tuple[int, int, list[bytes]]] = []
    for index, (start, count, new) in enumerate(parts):
        window = (max(0, start - CONTEXT), min(len(old), start + count + CONTEXT))
        hit = next((r for r in regions if _touches(start, count, window, r)), None)
        if hit is not None:
            return Overlap(index, hit[0] + 1, hit[0] + max(hit[1], 1))
        offset = sum(added - removed for at, removed, added in regions if at + removed <= window[0])
        if mine[start + offset : start + offset + count] != old[start : start + count]:
            return Overlap(index, start + 1, start + max(count, 1))  # never seen: the diff and the lines disagree
        placed.append((start + offset, count, new))
    return assemble(mine, placed)


def write_taken(repo: pygit2.Repository, fh: FileHunks, taken: Taken) -> State:
    """The state a partial take writes: the base's mode with the assembled content."""
    assert fh.before is not None and taken.content is not None
    return Entry(fh.before.mode, objects.write_blob(repo, taken.content))


def read_ids(text: str) -> set[str]:
    """Hunk ids from a ``--hunks-from`` file: one per line (``#`` comments), or a JSON list of ids."""
    import json

    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise UsageError(f"The hunk list is not valid JSON ({exc.msg}); give one id per line.") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError("The hunk list must be a JSON list of id strings, or one id per line.")
        return {v.strip() for v in value if v.strip()}
    ids = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            ids.add(line)
    return ids
