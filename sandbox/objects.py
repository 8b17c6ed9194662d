"""Git objects read and written in-process through pygit2's object database.

Trees are parsed and serialised here from their raw bytes instead of through ``TreeBuilder``
because pygit2 refuses tree entry names that are not valid UTF-8, and the sandbox must handle any
name git can store. Paths are ``str`` everywhere in the library, decoded with ``os.fsdecode``
(surrogate escapes carry undecodable bytes) and encoded back with ``os.fsencode``.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pygit2

from sandbox.models import FileChange

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000
MODE_GITLINK = 0o160000

_BLOB = pygit2.enums.ObjectType.BLOB
_TREE = pygit2.enums.ObjectType.TREE
EMPTY_TREE_HEX = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_fsync_enabled = False
_TYPE_NAMES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}


class DamagedObjectError(ValueError):
    """A git object is truncated, garbled or does not hash to its id."""


def _objects_dir(repo: pygit2.Repository) -> str:
    gitdir = repo.path
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as fh:
            gitdir = os.path.join(gitdir, fh.read().strip())
    except OSError:
        pass
    return os.path.join(gitdir, "objects")


def read_object(repo: pygit2.Repository, oid: str) -> tuple[int, bytes]:
    """An object's type number and content, verified.

    A loose object is read and checked here (inflated to its end, header and SHA-1 checked) before
    libgit2 ever sees it: libgit2 1.9 loops forever on a truncated loose object (measured), and a
    damaged object must be reported, never read as valid. Packed objects go through libgit2, whose
    pack reads are checksummed.
    """
    loose = os.path.join(_objects_dir(repo), oid[:2], oid[2:])
    try:
        with open(loose, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        raise DamagedObjectError(f"object {oid} cannot be read ({exc.strerror})") from exc
    if raw is None:
        try:
            kind, data = repo.odb.read(oid)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise DamagedObjectError(f"object {oid} is missing or damaged ({exc})") from exc
        return int(kind), bytes(data)
    try:
        inflater = zlib.decompressobj()
        full = inflater.decompress(raw)
        if not inflater.eof:
            raise DamagedObjectError(f"object {oid} is truncated")
    except zlib.error as exc:
        raise DamagedObjectError(f"object {oid} does not inflate ({exc})") from exc
    if hashlib.sha1(full).hexdigest() != oid:
        raise DamagedObjectError(f"object {oid} does not match its hash (garbled)")
    header, _, body = full.partition(b"\0")
    type_name, _, size = header.partition(b" ")
    if type_name not in _TYPE_NAMES or not size.isdigit() or int(size) != len(body):
        raise DamagedObjectError(f"object {oid} has a malformed header")
    return _TYPE_NAMES[type_name], body


@dataclass(frozen=True)
class CommitInfo:
    """The parts of a commit the sandbox reads."""

    tree: str
    parents: list[str]
    message: str


def read_commit(repo: pygit2.Repository, oid: str) -> CommitInfo:
    """A verified commit's tree, parents and message."""
    kind, data = read_object(repo, oid)
    if kind != 1:
        raise DamagedObjectError(f"object {oid} is not a commit")
    headers, _, message = data.partition(b"\n\n")
    tree = ""
    parents = []
    for line in headers.split(b"\n"):
        if line.startswith(b"tree "):
            tree = line[5:].decode()
        elif line.startswith(b"parent "):
            parents.append(line[7:].decode())
    if not tree:
        raise DamagedObjectError(f"commit {oid} has no tree")
    return CommitInfo(tree, parents, message.decode("utf-8", errors="replace"))


def enable_fsync() -> None:
    """Make libgit2 fsync every object, ref and directory it writes (process-wide, idempotent)."""
    global _fsync_enabled
    if not _fsync_enabled:
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)
        _fsync_enabled = True


def signature() -> pygit2.Signature:
    """The fixed author of every sandbox commit (``default_signature`` fails where git has no user)."""
    return pygit2.Signature("sandbox", "sandbox@localhost")


@dataclass(frozen=True)
class Entry:
    """A tree entry: its mode and object id (hex)."""

    mode: int
    oid: str

    @property
    def is_tree(self) -> bool:
        return self.mode == MODE_TREE


def read_tree(repo: pygit2.Repository, oid: str | None) -> dict[str, Entry]:
    """The entries of one tree object, by name (names decoded with ``os.fsdecode``)."""
    if oid is None or oid == EMPTY_TREE_HEX:
        return {}
    kind, data = read_object(repo, oid)
    if kind != _TREE:
        raise ValueError(f"object {oid} is not a tree")
    entries: dict[str, Entry] = {}
    pos = 0
    end = len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = int(data[pos:space], 8)
        name = os.fsdecode(data[space + 1 : nul])
        raw = data[nul + 1 : nul + 21]
        entries[name] = Entry(mode, raw.hex())
        pos = nul + 21
    return entries


def _sort_key(item: tuple[bytes, Entry]) -> bytes:
    name, entry = item
    return name + b"/" if entry.mode == MODE_TREE else name


def write_tree(repo: pygit2.Repository, entries: Mapping[str, Entry]) -> str:
    """Write a tree object with these entries (git's ordering) and return its id."""
    items = sorted(((os.fsencode(n), e) for n, e in entries.items()), key=_sort_key)
    parts = []
    for name, entry in items:
        parts.append(b"%o %s\0" % (entry.mode, name) + bytes.fromhex(entry.oid))
    return str(repo.odb.write(_TREE, b"".join(parts)))


def commit_tree(repo: pygit2.Repository, commit_oid: str | None) -> str | None:
    """The root tree id of a commit (None for None)."""
    if commit_oid is None:
        return None
    return read_commit(repo, commit_oid).tree


def lookup(repo: pygit2.Repository, tree_oid: str | None, path: str) -> Entry | None:
    """The entry at ``path`` (``a/b/c``) below a tree, or None when absent."""
    parts = path.split("/")
    current = tree_oid
    for i, part in enumerate(parts):
        entries = read_tree(repo, current)
        entry = entries.get(part)
        if entry is None:
            return None
        if i == len(parts) - 1:
            return entry
        if not entry.is_tree:
            return None
        current = entry.oid
    return None


def edit_tree(repo: pygit2.Repository, tree_oid: str | None, changes: Mapping[str, Entry | None]) -> str:
    """A new tree: ``tree_oid`` with each path set to an entry or removed (None).

    Only the trees on the changed paths are read and rewritten, so the cost follows the number of
    changed paths, not the size of the tree. A file may replace a directory and the other way round;
    directories left empty disappear, as in git.
    """
    entries = read_tree(repo, tree_oid)
    direct: dict[str, Entry | None] = {}
    nested: dict[str, dict[str, Entry | None]] = {}
    for path, entry in changes.items():
        head, sep, rest = path.partition("/")
        if sep:
            nested.setdefault(head, {})[rest] = entry
        else:
            direct[head] = entry
    for name, entry in direct.items():
        if entry is None:
            entries.pop(name, None)
        else:
            entries[name] = entry
    for name, sub in nested.items():
        if direct.get(name) is not None:
            # A file (or link) replaces the directory: what lay below it is gone with it.
            continue
        existing = entries.get(name)
        base = existing.oid if existing is not None and existing.is_tree else None
        new_sub = edit_tree(repo, base, sub)
        if new_sub == EMPTY_TREE_HEX:
            entries.pop(name, None)
        else:
            entries[name] = Entry(MODE_TREE, new_sub)
    return write_tree(repo, entries)


@dataclass(frozen=True)
class TreeChange:
    """One path that differs between two trees (entries None where absent); never a tree entry."""

    path: str
    old: Entry | None
    new: Entry | None


def diff_trees(repo: pygit2.Repository, old: str | None, new: str | None, prefix: str = "") -> Iterator[TreeChange]:
    """Every non-tree path that differs between two trees, skipping identical subtrees."""
    if old == new:
        return
    a = read_tree(repo, old)
    b = read_tree(repo, new)
    for name in sorted(set(a) | set(b)):
        ea, eb = a.get(name), b.get(name)
        if ea == eb:
            continue
        path = prefix + name
        a_tree = ea.oid if ea is not None and ea.is_tree else None
        b_tree = eb.oid if eb is not None and eb.is_tree else None
        if a_tree is not None or b_tree is not None:
            yield from diff_trees(repo, a_tree, b_tree, path + "/")
        a_leaf = ea if ea is not None and not ea.is_tree else None
        b_leaf = eb if eb is not None and not eb.is_tree else None
        if a_leaf != b_leaf:
            yield TreeChange(path, a_leaf, b_leaf)


def walk_tree(repo: pygit2.Repository, tree_oid: str | None, prefix: str = "") -> Iterator[tuple[str, Entry]]:
    """Every non-tree entry below a tree, with its full path."""
    for name, entry in read_tree(repo, tree_oid).items():
        if entry.is_tree:
            yield from walk_tree(repo, entry.oid, prefix + name + "/")
        else:
            yield prefix + name, entry


def mode_of(st: os.stat_result) -> int | None:
    """The git mode for a file on disk, or None for things git does not store (fifos, sockets)."""
    if stat.S_ISLNK(st.st_mode):
        return MODE_LINK
    if stat.S_ISREG(st.st_mode):
        return MODE_EXEC if st.st_mode & 0o111 else MODE_FILE
    if stat.S_ISDIR(st.st_mode):
        return MODE_TREE
    return None


def hash_path(repo: pygit2.Repository, abspath: str, st: os.stat_result, write: bool) -> Entry | None:
    """The blob entry for a regular file or symlink on disk (written to the odb when ``write``)."""
    mode = mode_of(st)
    if mode is None or mode == MODE_TREE:
        return None
    if mode == MODE_LINK:
        data = os.fsencode(os.readlink(abspath))
    else:
        with open(abspath, "rb") as fh:
            data = fh.read()
    if write:
        oid = str(repo.odb.write(_BLOB, data))
    else:
        oid = str(pygit2.hash(data))
    return Entry(mode, oid)


def write_blob(repo: pygit2.Repository, data: bytes) -> str:
    """Store bytes as a blob and return its id."""
    return str(repo.odb.write(_BLOB, data))


def read_blob(repo: pygit2.Repository, oid: str) -> bytes:
    """The bytes of a blob."""
    kind, data = read_object(repo, oid)
    if kind != _BLOB:
        raise ValueError(f"object {oid} is not a blob")
    return data


def file_change(
    path: str, old: Entry | None, new: Entry | None, patch_ref: str | None, tool_call_id: str | None = None
) -> FileChange:
    """The ledger's record of one path going from ``old`` to ``new`` (None: absent)."""
    return FileChange(
        path=path,
        before_hash=old.oid if old else None,
        after_hash=new.oid if new else None,
        before_mode=old.mode if old else None,
        after_mode=new.mode if new else None,
        patch_ref=patch_ref,
        tool_call_id=tool_call_id,
    )
