"""Pairing deleted and added paths into renames, as ``git diff -M`` does, over any object reader.

Standard library only, so the fast read path (``list``, ``status``) counts a rename once, as
``diff --stat`` does, without pygit2; :mod:`sandbox.merge.renames` pairs with the same function
over libgit2. The same blob pairs first; then text files whose lines are at least half the same
(git's default ``-M50%``), the best match once each. Only the paths given are looked at: the cost
is O(changed paths).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable, Iterable, Mapping
    from typing import Protocol

    class Leaf(Protocol):
        """A tree entry: its mode and object id (hex)."""

        @property
        def mode(self) -> int:
            """The entry's git mode (``0o100644``...)."""
            ...

        @property
        def oid(self) -> str:
            """The object id, hex."""
            ...


#: git's default rename threshold (``-M50%``).
THRESHOLD = 0.5
#: Files larger than this are paired only when their blobs are the same (as git's rename limit guards).
MAX_COMPARED = 4 << 20
#: Past this many (deleted x added) candidate pairs left after the exact ones, only the same blob pairs:
#: the comparison is O(pairs) and ``status`` runs it on every call (git bounds it too, ``diff.renameLimit``).
MAX_PAIRS = 100 * 100
#: A regular file's modes: only files pair by their lines (links and gitlinks by their ids only).
_TEXT_MODES = (0o100644, 0o100755)


def pair(deleted: Mapping[str, Leaf], added: Mapping[str, Leaf], read: Callable[[str], bytes]) -> dict[str, str]:
    """Old path -> new path for each deleted path whose content lives on at an added one.

    ``read(oid)`` gives a blob's bytes, for the similarity of text files; a blob over
    :data:`MAX_COMPARED` or binary pairs by its id only, and so does everything when more than
    :data:`MAX_PAIRS` pairs are left to compare after the exact ones.
    """
    out: dict[str, str] = {}
    free = dict(added)
    by_oid: dict[str, str] = {}
    for path, entry in sorted(free.items()):
        by_oid.setdefault(entry.oid, path)
    for old, entry in sorted(deleted.items()):
        new = by_oid.get(entry.oid)
        if new in free:
            out[old] = new
            del free[new]
    if (len(deleted) - len(out)) * len(free) > MAX_PAIRS:
        return out
    from collections import Counter  # (only where paths are left to pair by their lines)

    lines: dict[str, Counter[bytes] | None] = {}

    def text(entry: Leaf) -> Counter[bytes] | None:
        if entry.mode not in _TEXT_MODES:
            return None
        if entry.oid not in lines:
            data = read(entry.oid)
            lines[entry.oid] = None if len(data) > MAX_COMPARED or b"\0" in data[:8000] else Counter(data.splitlines())
        return lines[entry.oid]

    scored: list[tuple[float, str, str]] = []
    for old, entry in sorted(deleted.items()):
        mine = None if old in out else text(entry)
        if mine is None:
            continue
        for new, other in free.items():
            theirs = text(other)
            if theirs is None:
                continue
            score = _score(mine, theirs)
            if score >= THRESHOLD:
                scored.append((score, old, new))
    for _s, old, new in sorted(scored, key=lambda s: (-s[0], s[1], s[2])):
        if old not in out and new in free:
            out[old] = new
            del free[new]
    return out


def similarity(before: bytes, after: bytes) -> float:
    """How alike two texts are, as :func:`pair` scores them: the share of lines they have in common."""
    from collections import Counter

    return _score(Counter(before.splitlines()), Counter(after.splitlines()))


def _score(mine: Counter[bytes], theirs: Counter[bytes]) -> float:
    total = max(sum(mine.values()), sum(theirs.values()), 1)
    return sum((mine & theirs).values()) / total


def count(changes: Iterable[tuple[str, Leaf | None, Leaf | None]], read: Callable[[str], bytes]) -> tuple[int, int]:
    """(paths as ``diff --stat`` counts them, renames among them) for ``(path, old, new)`` changes:
    a rename is one path, not a deletion and an addition."""
    total = 0
    deleted: dict[str, Leaf] = {}
    added: dict[str, Leaf] = {}
    for path, old, new in changes:
        total += 1
        if new is None and old is not None:
            deleted[path] = old
        elif old is None and new is not None:
            added[path] = new
    renamed = len(pair(deleted, added, read)) if deleted and added else 0
    return total - renamed, renamed
