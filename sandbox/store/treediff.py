"""Which paths differ between two git trees, whoever reads the trees.

One walk for both readers: :func:`sandbox.store.objects.diff_trees` (pygit2) and
:meth:`sandbox.fast.gitread.Repo.changed_paths` (the standard library, for the fast read path).
Identical subtrees are skipped by id; a path that is a tree on one side and a file on the other
yields both the file and the tree's paths; mode-only changes count. Standard library only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import Protocol, TypeVar

    class TreeEntry(Protocol):
        """What the walk needs of an entry: its object id, whether it is a tree, and equality."""

        @property
        def oid(self) -> str:
            """The entry's object id (hex)."""
            ...

        @property
        def is_tree(self) -> bool:
            """True for a tree (a directory)."""
            ...

    E = TypeVar("E", bound=TreeEntry)


def changes(
    entries: Callable[[str | None], Mapping[str, E]], old: str | None, new: str | None, prefix: str = ""
) -> Iterator[tuple[str, E | None, E | None]]:
    """``(path, old entry, new entry)`` for every non-tree path that differs between trees ``old``
    and ``new`` (None: the empty tree), in git's order; ``entries`` reads one tree by name."""
    if old == new:
        return
    a, b = entries(old), entries(new)
    for name in sorted(set(a) | set(b)):
        ea, eb = a.get(name), b.get(name)
        if ea == eb:
            continue
        path = prefix + name
        a_tree = ea.oid if ea is not None and ea.is_tree else None
        b_tree = eb.oid if eb is not None and eb.is_tree else None
        if a_tree is not None or b_tree is not None:
            yield from changes(entries, a_tree, b_tree, path + "/")
        a_leaf = ea if ea is not None and not ea.is_tree else None
        b_leaf = eb if eb is not None and not eb.is_tree else None
        if a_leaf != b_leaf:
            yield path, a_leaf, b_leaf
