"""Git objects read and written in-process through pygit2's object database.

Trees are parsed and serialised here from their raw bytes instead of through ``TreeBuilder``
because pygit2 refuses tree entry names that are not valid UTF-8, and the sandbox must handle any
name git can store. Paths are ``str`` everywhere in the library, decoded with ``os.fsdecode``
(surrogate escapes carry undecodable bytes) and encoded back with ``os.fsencode``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pygit2

from sandbox.models import FileChange
from sandbox.store import agentread, blobreads, durable, fsutil, packs, treediff
from sandbox.store.lru import Lru

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


_OBJECTS_DIRS: dict[str, str] = {}


def _objects_dir(repo: pygit2.Repository) -> str:
    """Where objects written through ``repo`` go: a run's store (see
    :func:`sandbox.store.repository.open_repository`), else its objects."""
    store: str | None = getattr(repo, "sandbox_store", None)
    if store is not None:
        return store
    return common_objects_dir(repo)


def common_objects_dir(repo: pygit2.Repository) -> str:
    """Your objects directory (``<common>/objects``), whatever store ``repo`` writes to."""
    gitdir = repo.path
    found = _OBJECTS_DIRS.get(gitdir)
    if found is not None:
        return found
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as fh:
            gitdir = os.path.join(gitdir, fh.read().strip())
    except OSError:
        pass
    found = _OBJECTS_DIRS[repo.path] = os.path.normpath(os.path.join(gitdir, "objects"))
    return found


def common_dir(repo: pygit2.Repository) -> str:
    """The repository's common git directory (where its objects and shared refs live)."""
    return os.path.dirname(common_objects_dir(repo))


# -- objects written as one pack ------------------------------------------------------------------


class PendingObjects:
    """Objects written during one operation, kept in memory until :meth:`flush` makes them durable.

    Open with :func:`batch`. Reads of a pending object are served from here, so code inside the
    batch sees its own writes; nothing outside may refer to them before the flush.
    """

    def __init__(self, repo: pygit2.Repository, objects_dir: str) -> None:
        self.repo = repo
        self.objects_dir = objects_dir
        self.objects: dict[str, tuple[int, bytes]] = {}
        self.trees: dict[str, dict[str, Entry]] = {}
        self.wrote_pack = False

    def add(self, kind: int, data: bytes) -> str:
        """Keep an object for the batch's pack; its id."""
        oid = packs.object_id(kind, data)
        self.objects.setdefault(oid, (kind, data))
        return oid

    def flush(self, also: Sequence[int] = ()) -> None:
        """Make every pending object durable: one pack for several, a loose object for one.

        The descriptors ``also`` (a ref's lock) are synced with the objects' contents, in one phase
        (see :mod:`sandbox.store.durable`), even when there is no object to write.
        """
        if not self.objects:
            fsutil.sync_together(list(also))
            return
        if len(self.objects) == 1:
            # Loose costs two fsync phases (content, directory); a pack two as well (both files, directory).
            ((kind, data),) = self.objects.values()
            durable.write_loose(self.objects_dir, kind, data, also)
        else:
            items = [(oid, kind, data) for oid, (kind, data) in self.objects.items()]
            packs.write_pack(self.objects_dir, items, len(items), also=also)
            self.wrote_pack = True
        for oid, entries in self.trees.items():
            _tree_cache.put((self.objects_dir, oid), entries)
        self.objects.clear()
        self.trees.clear()

    def read_stored(self, oid: str) -> tuple[int, bytes]:
        """An object of this batch, read back from the pack it was written to."""
        kind, data = self.repo.odb.read(oid)
        return int(kind), bytes(data)


_BATCHES = threading.local()


def _pending(repo: pygit2.Repository) -> PendingObjects | None:
    batches: dict[str, PendingObjects] | None = getattr(_BATCHES, "by_dir", None)
    if not batches:
        return None
    return batches.get(_objects_dir(repo))


@contextlib.contextmanager
def batch(repo: pygit2.Repository) -> Iterator[PendingObjects]:
    """Collect the objects written inside into one durable write (see :mod:`sandbox.store.packs`).

    Nested batches on one repository share the outer one. The caller flushes before it lets
    anything durable (a ref) point at the objects; what is left at the end of the outermost batch
    is flushed then, and dropped if the block raised (nothing can refer to it). Packs are merged
    (:func:`sandbox.store.packs.maybe_merge`) when the outermost batch ends well.
    """
    outer = _pending(repo)
    if outer is not None:
        yield outer
        return
    directory = _objects_dir(repo)
    pending = PendingObjects(repo, directory)
    batches: dict[str, PendingObjects] = getattr(_BATCHES, "by_dir", None) or {}
    _BATCHES.by_dir = batches
    batches[directory] = pending
    try:
        yield pending
        pending.flush()
    finally:
        batches.pop(directory, None)
    if pending.wrote_pack:
        # After the caller's ref moved: merging first would remove the pack libgit2 just found the
        # event commit in, and it would write the commit again, loose (measured).
        packs.maybe_merge(directory, pending.read_stored)


def _write(repo: pygit2.Repository, kind: int, data: bytes) -> str:
    pending = _pending(repo)
    if pending is not None:
        return pending.add(kind, data)
    with git_writes():
        return str(repo.odb.write(kind, data))


def write_raw(repo: pygit2.Repository, kind: int, data: bytes) -> str:
    """Store an object of type number ``kind`` as it is (a copy from another store); its id."""
    return _write(repo, kind, data)


def read_object(repo: pygit2.Repository, oid: str) -> tuple[int, bytes]:
    """An object's type number and content, verified.

    A loose object is read and checked here (inflated to its end, header and SHA-1 checked) before
    libgit2 ever sees it: libgit2 1.9 loops forever on a truncated loose object (measured), and a
    damaged object must be reported, never read as valid. Packed objects are read by libgit2 and
    hashed here too. Inside :func:`~sandbox.store.blobreads.reads_once`, a blob read already is not read again.
    """
    pending = _pending(repo)
    if pending is not None and oid in pending.objects:
        kind, body = pending.objects[oid]
        return kind, body
    kept = blobreads.kept()
    found = kept.get((_objects_dir(repo), oid)) if kept is not None else None
    if found is not None:
        return _BLOB, found
    kind, body = _read_object(repo, oid)
    if kept is not None and kind == _BLOB:
        kept.put((_objects_dir(repo), oid), body)
    return kind, body


def _loose_dirs(repo: pygit2.Repository) -> tuple[str, ...]:
    common = common_objects_dir(repo)
    store = _objects_dir(repo)
    return (common,) if store == common else (store, common)


def _read_object(repo: pygit2.Repository, oid: str) -> tuple[int, bytes]:
    raw = None
    for directory in _loose_dirs(repo):
        try:
            with open(os.path.join(directory, oid[:2], oid[2:]), "rb") as fh:
                raw = fh.read()
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DamagedObjectError(f"object {oid} cannot be read ({exc.strerror})") from exc
    if raw is None:
        try:
            kind, data = repo.odb.read(oid)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise DamagedObjectError(f"object {oid} is missing or damaged ({exc})") from exc
        body = bytes(data)
        if int(kind) in packs.TYPE_NAMES and packs.object_id(int(kind), body) != oid:
            raise DamagedObjectError(f"object {oid} does not match its hash (garbled)")
        return int(kind), body
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


#: Parsed commits and trees kept per process: at most this many objects, and this many tree entries.
_commit_cache: Lru[tuple[str, str], CommitInfo] = Lru(4096)
_tree_cache: Lru[tuple[str, str], dict[str, Entry]] = Lru(4096, 200_000, len)


def clear_caches() -> None:
    """Forget the parsed commits and trees kept in memory (benchmarks measure a cold read)."""
    _commit_cache.clear()
    _tree_cache.clear()


def read_commit(repo: pygit2.Repository, oid: str) -> CommitInfo:
    """A verified commit's tree, parents and message (objects never change, so they are cached)."""
    key = (_objects_dir(repo), oid)
    found = _commit_cache.get(key)
    if found is not None:
        return found
    info = _parse_commit(repo, oid)
    pending = _pending(repo)
    if pending is None or oid not in pending.objects:  # only what is stored is cached
        _commit_cache.put(key, info)
    return info


def _parse_commit(repo: pygit2.Repository, oid: str) -> CommitInfo:
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


def write_commit(repo: pygit2.Repository, tree: str, parents: list[str], message: str, when: int) -> str:
    """Write a commit by the sandbox's signature at ``when`` (epoch seconds, UTC); its id.

    The bytes are exactly those libgit2's ``create_commit`` writes for the same fields (tested), so
    a later ``create_commit`` that moves a ref finds the object already stored.
    """
    who = b"sandbox <sandbox@localhost> %d +0000" % when
    lines = [b"tree " + tree.encode()]
    lines += [b"parent " + p.encode() for p in parents]
    lines += [b"author " + who, b"committer " + who]
    data = b"\n".join(lines) + b"\n\n" + message.encode("utf-8")
    return _write(repo, 1, data)


#: Held around every libgit2 write the sandbox makes and while a repository it writes to is opened,
#: so that :func:`sandbox.store.repository.mirror_repository` (which turns libgit2's process-wide
#: fsync option off for a moment) never overlaps them.
_WRITE_GUARD = threading.RLock()


def fsync_enabled() -> bool:
    """True once :func:`enable_fsync` ran in this process."""
    return _fsync_enabled


def write_guard() -> threading.RLock:
    """The lock every libgit2 write and durable open holds (see :data:`_WRITE_GUARD`)."""
    return _WRITE_GUARD


def objects_dir_of(repo: pygit2.Repository) -> str:
    """Where objects written through ``repo`` go (a run's store, or your objects)."""
    return _objects_dir(repo)


def enable_fsync() -> None:
    """Make libgit2 fsync every object, ref and directory it writes (process-wide, idempotent)."""
    global _fsync_enabled
    if not _fsync_enabled:
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)
        _fsync_enabled = True


@contextlib.contextmanager
def git_writes() -> Iterator[None]:
    """Wrap a libgit2 write that must be durable: fsync on, and no :func:`unsynced` block meanwhile."""
    with _WRITE_GUARD:
        enable_fsync()
        yield


def signature(when: int | None = None) -> pygit2.Signature:
    """The fixed author of every sandbox commit (``default_signature`` fails where git has no user)."""
    if when is None:
        return pygit2.Signature("sandbox", "sandbox@localhost")
    return pygit2.Signature("sandbox", "sandbox@localhost", when, 0)


def now() -> int:
    """The current time as a commit stores it."""
    return int(time.time())


@dataclass(frozen=True)
class Entry:
    """A tree entry: its mode and object id (hex)."""

    mode: int
    oid: str

    @property
    def is_tree(self) -> bool:
        """True for a tree (a directory)."""
        return self.mode == MODE_TREE


def read_tree(repo: pygit2.Repository, oid: str | None) -> dict[str, Entry]:
    """The entries of one tree object, by name (names decoded with ``os.fsdecode``); a fresh dict."""
    return dict(_tree(repo, oid))


_NO_ENTRIES: dict[str, Entry] = {}


def _tree(repo: pygit2.Repository, oid: str | None) -> dict[str, Entry]:
    """A tree's entries from the cache (shared: never change the dict returned)."""
    if oid is None or oid == EMPTY_TREE_HEX:
        return _NO_ENTRIES
    key = (_objects_dir(repo), oid)
    found = _tree_cache.get(key)
    if found is None:
        found = _parse_tree(repo, oid)
        pending = _pending(repo)
        if pending is None or oid not in pending.objects:  # only what is stored is cached
            _tree_cache.put(key, found)
    return found


def _parse_tree(repo: pygit2.Repository, oid: str) -> dict[str, Entry]:
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
    data = b"".join(parts)
    pending = _pending(repo)
    if pending is not None:
        oid = pending.add(_TREE, data)
        pending.trees[oid] = dict(entries)  # cached once stored
        return oid
    with git_writes():
        oid = str(repo.odb.write(_TREE, data))
    _tree_cache.put((_objects_dir(repo), oid), dict(entries))
    return oid


def ensure_tree(repo: pygit2.Repository, entries: Mapping[str, Entry]) -> str:
    """Like :func:`write_tree`, but writes nothing when the tree is stored already (one odb lookup).

    Keeps a lone event commit a single loose object (two fsyncs) when its tree repeats.
    """
    items = sorted(((os.fsencode(n), e) for n, e in entries.items()), key=_sort_key)
    data = b"".join(b"%o %s\0" % (e.mode, n) + bytes.fromhex(e.oid) for n, e in items)
    oid = packs.object_id(_TREE, data)
    pending = _pending(repo)
    if (pending is not None and oid in pending.objects) or oid in repo.odb:
        return oid
    return write_tree(repo, entries)


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
        entries = _tree(repo, current)
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
    """Every non-tree path that differs between two trees, skipping identical subtrees
    (:func:`sandbox.store.treediff.changes`, reading the trees with libgit2)."""
    for path, before, after in treediff.changes(lambda oid: _tree(repo, oid), old, new, prefix):
        yield TreeChange(path, before, after)


def commit_changes(repo: pygit2.Repository, parent: str | None, commit: str) -> Iterator[TreeChange]:
    """What ``commit`` changed against ``parent`` (None: against nothing), submodule entries left out:
    a gitlink is never a file of the user's tree. Only the trees on the changed paths are read."""
    old = commit_tree(repo, parent) if parent else None
    for change in diff_trees(repo, old, commit_tree(repo, commit)):
        if (change.new is not None and change.new.mode == MODE_GITLINK) or (
            change.old is not None and change.old.mode == MODE_GITLINK
        ):
            continue
        yield change


def walk_tree(repo: pygit2.Repository, tree_oid: str | None, prefix: str = "") -> Iterator[tuple[str, Entry]]:
    """Every non-tree entry below a tree, with its full path."""
    for name, entry in _tree(repo, tree_oid).items():
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


def hash_path(
    repo: pygit2.Repository, root: int, rel: str, st: os.stat_result, write: bool, limit: int | None = None
) -> Entry | None:
    """The blob entry for the regular file or symlink ``rel`` beneath the directory descriptor ``root``
    (written to the odb when ``write``), read through a checked descriptor (:mod:`sandbox.store.agentread`)."""
    mode = mode_of(st)
    if mode is None or mode == MODE_TREE:
        return None
    if mode == MODE_LINK:
        data = agentread.readlink(root, rel)
    else:
        blob = agentread.read_file(root, rel, st, limit=agentread.DEFAULT_LIMIT if limit is None else limit)
        mode, data = mode_of(blob.st) or mode, blob.data
        if not write:
            return Entry(mode, blob.oid)
    return Entry(mode, _write(repo, _BLOB, data) if write else str(pygit2.hash(data)))


def write_blob(repo: pygit2.Repository, data: bytes) -> str:
    """Store bytes as a blob and return its id."""
    return _write(repo, _BLOB, data)


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
