"""A small read-only git reader in the standard library, for commands that must start fast.

``sandbox list``, ``status``, ``log`` and ``path`` read a few refs and a handful of small objects;
importing pygit2 alone costs more than their whole start-up budget (issue 14). This module reads
refs (loose, packed, symbolic, per-worktree), loose objects, packs (idx v2, deltas of any depth;
those two through :mod:`sandbox.fast.odb`) and alternates, and nothing else. Everything it cannot
answer for certain (reftable, SHA-256, an idx v1, a damaged or missing object, an odd ref) raises
:class:`~sandbox.fast.odb.GitReadError`, and the caller falls back to pygit2, which reads the
repository properly or reports what is wrong. It never returns a guess: every object read is
checked against its SHA-1.

Only the standard library is imported (an import-linter contract in pyproject.toml checks it).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib

from sandbox.fast import odb
from sandbox.fast.odb import GitReadError, is_hex40
from sandbox.store import layout, treediff

TYPE_CHECKING = False  # no typing, re or contextlib at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType
    from typing import NamedTuple

#: A pseudo-ref's name (``HEAD``, ``FETCH_HEAD``): ``[A-Z][A-Z0-9_]*``.
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_PSEUDO_REF_CHARS = _UPPER | frozenset("0123456789_")
#: Per-worktree refs live in the worktree's own git dir (git's ``is_per_worktree_ref``).
_PER_WORKTREE = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
#: git gives up after 5 levels of symbolic refs too.
_SYMREF_DEPTH = 5
_ALTERNATES_DEPTH = 5
#: At most this many objects directories listed by alternates (each is searched for every object).
_MAX_OBJECT_DIRS = 64
MODE_TREE = 0o040000
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
#: Extensions that do not change how refs and objects are stored (anything else: GitReadError).
_HARMLESS_EXTENSIONS = {"noop", "noop-v1", "preciousobjects", "partialclone", "worktreeconfig"}


class _guard:  # noqa: N801  (a context manager, named as the function it was)
    """Turn whatever a damaged file can make the parsing raise into :class:`GitReadError` (a class
    rather than ``contextlib.contextmanager``: contextlib imports collections and functools)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(exc, GitReadError):
            return
        if isinstance(exc, (OSError, zlib.error, struct.error, IndexError, ValueError, OverflowError, RecursionError)):
            raise GitReadError(f"{self.what}: {type(exc).__name__}: {exc}") from exc


# Named tuples rather than frozen dataclasses: as immutable and typed, without importing dataclasses
# (and with it inspect, ast, dis, tokenize: ~4-10 ms measured here) on the fast commands' path;
# typing's NamedTuple for mypy, sandbox.fast.records' at run time (typing and collections cost the quick path).
if TYPE_CHECKING:

    class _Entry(NamedTuple):
        mode: int
        name: str
        oid: str

    class Commit(NamedTuple):
        """The parts of a commit the fast commands read."""

        tree: str
        parents: tuple[str, ...]
        message: str
        #: The committer's time, seconds since the epoch (0 when the header is missing or odd).
        committer_time: int
else:
    from sandbox.fast.records import named_tuple

    _Entry = named_tuple("TreeEntry", "mode name oid", __name__)
    Commit = named_tuple("Commit", "tree parents message committer_time", __name__)


class TreeEntry(_Entry):
    """One entry of a tree: its mode, name (decoded with ``os.fsdecode``) and object id."""

    __slots__ = ()

    @property
    def is_tree(self) -> bool:
        """True for a subtree (a directory)."""
        return self.mode == MODE_TREE


def config_value(value: str) -> str:
    r"""A config line's value as this reader compares it: before an inline comment (whitespace then
    ``#`` or ``;``), unquoted, lower-cased (``re.split(r"\s[#;]", value, maxsplit=1)[0]`` and so on;
    tests/fast/test_gitread.py holds the two equal)."""
    for i in range(len(value) - 1):
        if value[i].isspace() and value[i + 1] in "#;":
            value = value[:i]
            break
    return value.strip().strip('"').lower()


def is_pseudo_ref(name: str) -> bool:
    """``re.fullmatch(r"[A-Z][A-Z0-9_]*", name)``: ``HEAD``, ``FETCH_HEAD``..."""
    return bool(name) and name[0] in _UPPER and _PSEUDO_REF_CHARS.issuperset(name)


def _config_error(config_path: str) -> str | None:
    """Why the refs or objects of the repository with this ``config`` are not for this reader (or None).

    A minimal parser: only ``core.repositoryformatversion`` and ``[extensions]`` matter.
    """
    try:
        text = odb.read_file(config_path).decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return None
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            end = line.find("]")
            if end < 0:
                return f"{config_path} has a section header this reader does not parse"
            section = line[1:end].strip().lower()
            line = line[end + 1 :].strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        value = config_value(value)
        if section == "core" and key == "repositoryformatversion":
            if value not in ("0", "1"):
                return f"repository format version {value!r} is not read here"
        elif section == "extensions":
            if key == "objectformat" and value != "sha1":
                return f"object format {value!r} is not read here (SHA-1 only)"
            if key == "refstorage" and value != "files":
                return f"ref storage {value!r} is not read here (files only)"
            if key not in ("objectformat", "refstorage") and key not in _HARMLESS_EXTENSIONS:
                return f"extension {key!r} is not known to this reader"
    return None


def _check_ref_name(name: str) -> None:
    if not name.startswith("refs/"):
        if is_pseudo_ref(name):
            return
        raise GitReadError(f"ref name {name!r} is not read here")
    parts = name.split("/")
    if any(not p or p.startswith(".") or p.endswith(".lock") for p in parts) or any(
        ch in name for ch in ("..", "\\", "\0", " ", "~", "^", ":", "?", "*", "[", "@{")
    ):
        raise GitReadError(f"ref name {name!r} is not a valid ref name")


class Repo:
    """Read-only access to one git directory's refs and objects (see the module docstring).

    ``git_dir`` is a repository's git dir (``.git``), a linked worktree's git dir, or a run's own git
    dir; ``common_dir`` comes from its ``commondir`` file, else it is ``git_dir`` itself. Opened packs
    are kept (mapped, or open for ``pread`` when ``mapped`` is False) until :meth:`close`.
    """

    def __init__(self, git_dir: str, mapped: bool = True) -> None:
        self.git_dir = os.path.abspath(git_dir)
        #: False for a directory another party writes (a run's own git dir): packs are then read with
        #: pread, never mapped (see :class:`sandbox.fast.odb.Pread`).
        self.mapped = mapped
        try:
            common = odb.read_file(os.path.join(self.git_dir, "commondir")).decode("utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            common = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise GitReadError(f"{self.git_dir}/commondir cannot be read ({exc})") from exc
        self.common_dir = os.path.normpath(os.path.join(self.git_dir, common)) if common else self.git_dir
        self._checked = False
        self._packed: tuple[tuple[int, int, int], dict[str, str]] | None = None
        self._object_dirs: list[str] | None = None
        self._packs: dict[str, list[odb.Pack]] = {}
        #: Runs' own stores read here (:meth:`use_store`); the hub that lists every run's is not followed.
        self._stores: list[str] = []
        self._hub = os.path.normpath(layout.stores_hub(self.common_dir))

    def use_store(self, store: str) -> None:
        """Read objects from a run's own store too (``sandbox.store.runstore``), right after yours."""
        store = os.path.normpath(store)
        if store not in self._stores and os.path.isdir(store):
            self._stores.append(store)
            self._object_dirs = None

    # -- format check ------------------------------------------------------------------------------

    def _check(self) -> None:
        """Refuse reftable, SHA-256 and unknown extensions, once, before the first read."""
        if not self._checked:
            with _guard("config"):
                error = _config_error(os.path.join(self.common_dir, "config"))
            if error is not None:
                raise GitReadError(error)
            self._checked = True

    # -- refs --------------------------------------------------------------------------------------

    def _ref_dir(self, name: str) -> str:
        if not name.startswith("refs/") or name.startswith(_PER_WORKTREE):
            return self.git_dir
        return self.common_dir

    def _loose(self, name: str) -> str | None:
        """A loose ref file's content: ``ref: target`` or an oid (None when there is no such file)."""
        try:
            raw = odb.read_file(os.path.join(self._ref_dir(name), name))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        text = raw.decode("ascii").strip()
        if text.startswith("ref:"):
            target = text[4:].strip()
            _check_ref_name(target)
            return "ref: " + target
        if not is_hex40(text):
            raise GitReadError(f"ref {name} holds neither an object id nor a symbolic ref")
        return text

    def _packed_refs(self) -> dict[str, str]:
        """The packed-refs file's name -> oid (peeled ``^`` lines skipped), re-read when it changes."""
        path = os.path.join(self.common_dir, "packed-refs")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._packed is not None and self._packed[0] == key:
            return self._packed[1]
        text = odb.read_file(path).decode("utf-8")
        found: dict[str, str] = {}
        for line in text.split("\n"):
            if not line or line.startswith("#"):
                continue
            if line.startswith("^"):
                if not is_hex40(line[1:]):
                    raise GitReadError(f"{path} has a malformed peeled line")
                continue
            oid, _, name = line.partition(" ")
            if not is_hex40(oid) or not name:
                raise GitReadError(f"{path} has a malformed line")
            found[name] = oid
        self._packed = (key, found)
        return found

    def _raw_ref(self, name: str) -> str | None:
        loose = self._loose(name)
        if loose is not None:
            return loose
        return self._packed_refs().get(name)

    def ref(self, name: str) -> str | None:
        """The oid ``name`` points at, symbolic refs followed; None when it (or its target) does not exist.

        HEAD and other per-worktree refs are read from ``git_dir``, the rest from ``common_dir``; a
        loose ref file wins over packed-refs.
        """
        self._check()
        with _guard(f"ref {name}"):
            for _ in range(_SYMREF_DEPTH + 1):
                _check_ref_name(name)
                value = self._raw_ref(name)
                if value is None:
                    return None
                if not value.startswith("ref: "):
                    return value
                name = value[5:]
        raise GitReadError(f"symbolic ref chain deeper than {_SYMREF_DEPTH} levels")

    def symbolic_target(self, name: str) -> str | None:
        """The ref a symbolic ref names (``HEAD`` -> ``refs/heads/main``); None if direct or missing."""
        self._check()
        with _guard(f"ref {name}"):
            _check_ref_name(name)
            value = self._loose(name)
        return value[5:] if value is not None and value.startswith("ref: ") else None

    def read_file(self, name: str, limit: int = odb.MAX_FILE) -> bytes:
        """A file of the common git dir (``shallow``, ``logs/refs/stash``...), read as every file here
        is read (regular files only, without blocking, bounded); FileNotFoundError when absent."""
        path = os.path.join(self.common_dir, name)
        try:
            return odb.read_file(path, limit)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from exc
        except OSError as exc:
            raise GitReadError(f"{path} cannot be read ({exc})") from exc

    def _loose_names(self, root: str, prefix: str) -> Iterator[str]:
        """Names of the loose ref files below ``root`` that start with ``prefix``."""
        base = prefix.rpartition("/")[0]
        top = os.path.join(root, base)
        for dirpath, dirnames, filenames in os.walk(top):
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            dirnames.sort()
            for file in sorted(filenames):
                name = f"{rel}/{file}"
                if name.startswith(prefix) and not file.endswith(".lock"):
                    yield name

    def ref_names(self, prefix: str) -> list[str]:
        """The names of the refs that start with ``prefix`` (e.g. ``refs/heads/``), loose and packed,
        sorted, not resolved; names git would not accept as refs are skipped, as git skips them."""
        self._check()
        with _guard(f"refs {prefix}"):
            if not prefix.startswith("refs/"):
                raise GitReadError(f"ref prefix {prefix!r} is not read here (refs/... only)")
            # Loose names before packed-refs: a `git pack-refs` in between then moves a ref from
            # the one to the other without it going missing here (the packed file is re-read).
            names = set()
            for name in self._loose_names(self.common_dir, prefix):
                if self.git_dir == self.common_dir or not name.startswith(_PER_WORKTREE):
                    names.add(name)
            if self.git_dir != self.common_dir and (
                prefix.startswith(_PER_WORKTREE) or any(p.startswith(prefix) for p in _PER_WORKTREE)
            ):
                names.update(n for n in self._loose_names(self.git_dir, prefix) if n.startswith(_PER_WORKTREE))
            names.update(n for n in self._packed_refs() if n.startswith(prefix))
            valid = []
            for name in sorted(names):
                try:
                    _check_ref_name(name)
                except GitReadError:
                    continue
                valid.append(name)
        return valid

    def refs(self, prefix: str) -> dict[str, str]:
        """Every ref whose name starts with ``prefix`` (see :meth:`ref_names`), resolved.

        Loose refs win; symbolic ones are resolved (dangling ones left out); a ref that does not
        read (garbage, a loop of symbolic refs) raises GitReadError.
        """
        out: dict[str, str] = {}
        for name in self.ref_names(prefix):
            oid = self.ref(name)
            if oid is not None:
                out[name] = oid
        return out

    # -- objects -----------------------------------------------------------------------------------

    def _dirs(self) -> list[str]:
        """The objects directory, then its alternates (recursively, relative to the naming dir)."""
        if self._object_dirs is None:
            dirs: list[str] = []
            todo = [(os.path.join(self.common_dir, "objects"), 0), *((store, 1) for store in self._stores)]
            while todo:
                directory, depth = todo.pop(0)
                directory = os.path.normpath(directory)
                if directory in dirs or depth > _ALTERNATES_DEPTH or directory == self._hub:
                    continue
                if dirs and not os.path.isdir(directory):
                    continue  # as git and libgit2 skip an alternate that does not exist
                if len(dirs) >= _MAX_OBJECT_DIRS:
                    raise GitReadError(f"alternates name more than {_MAX_OBJECT_DIRS} object directories")
                dirs.append(directory)
                try:
                    lines = odb.read_file(os.path.join(directory, "info", "alternates")).decode("utf-8").splitlines()
                except FileNotFoundError:
                    continue
                for line in lines:
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    if line.startswith('"'):
                        raise GitReadError(f"{directory}/info/alternates has a quoted path (not read here)")
                    todo.append((os.path.join(directory, line), depth + 1))
            self._object_dirs = dirs
        return self._object_dirs

    def _dir_packs(self, directory: str, known: dict[str, odb.Pack] | None = None) -> list[odb.Pack]:
        """The packs of one objects directory (listed once; ``known`` packs are kept, not reopened)."""
        found = self._packs.get(directory)
        if found is None:
            pack_dir = os.path.join(directory, "pack")
            try:
                paths = [os.path.join(pack_dir, n) for n in sorted(os.listdir(pack_dir)) if n.endswith(".idx")]
            except FileNotFoundError:
                paths = []
            known = known or {}
            found = self._packs[directory] = [known.get(p) or odb.Pack(p, self.mapped) for p in paths]
        return found

    def _rescan(self) -> None:
        """List the packs (and alternates) again, so that packs written since are found."""
        known = {p.idx_path: p for packs in self._packs.values() for p in packs}
        self._object_dirs = None
        self._packs = {}
        for directory in self._dirs():
            self._dir_packs(directory, known)

    def _find(self, oid: str, limit: int) -> tuple[str, bytes] | None:
        raw = bytes.fromhex(oid)
        for directory in self._dirs():
            loose = os.path.join(directory, oid[:2], oid[2:])
            try:
                # zlib never grows incompressible data by more than 0.1% + a few bytes.
                compressed = odb.read_file(loose, limit + limit // 512 + 1024)
            except (FileNotFoundError, NotADirectoryError):
                pass
            else:
                return odb.inflate_loose(oid, compressed, limit)
            for pack in self._dir_packs(directory):
                offset = pack.find(raw)
                if offset is None:
                    continue
                if pack.data is None and not os.path.exists(pack.pack_path):
                    continue  # a repack removed the pack and not yet its idx (git unlinks the idx last)
                return pack.read_at(offset, limit)
        return None

    def read(self, oid: str, limit: int = odb.MAX_OBJECT) -> tuple[str, bytes]:
        """An object's type (``commit``, ``tree``, ``blob``, ``tag``) and content, checked against its id.

        Loose objects first, then packs, then alternates; when the object is found nowhere, the pack
        lists are read again once (a pack may have appeared since). An object bigger than ``limit``
        bytes is not read (GitReadError).
        """
        self._check()
        if not is_hex40(oid):
            raise GitReadError(f"{oid!r} is not a SHA-1 object id")
        with _guard(f"object {oid}"):
            found = self._find(oid, limit)
            if found is None:
                self._rescan()
                found = self._find(oid, limit)
        if found is None:
            raise GitReadError(f"object {oid} is missing")
        kind, data = found
        if odb.object_id(kind, data) != oid:
            raise GitReadError(f"object {oid} does not match its id (damaged)")
        return kind, data

    def _read_kind(self, oid: str, kind: str) -> bytes:
        found, data = self.read(oid)
        if found != kind:
            raise GitReadError(f"object {oid} is a {found}, not a {kind}")
        return data

    def commit(self, oid: str) -> Commit:
        """A commit's tree, parents, message (decoded, bad UTF-8 replaced) and committer time."""
        data = self._read_kind(oid, "commit")
        headers, _, message = data.partition(b"\n\n")
        tree = ""
        parents: list[str] = []
        when = 0
        for line in headers.split(b"\n"):
            if line.startswith(b"tree "):
                tree = line[5:].decode("ascii", "replace")
            elif line.startswith(b"parent "):
                parents.append(line[7:].decode("ascii", "replace"))
            elif line.startswith(b"committer "):
                fields = line.rsplit(b" ", 2)
                when = int(fields[1]) if len(fields) == 3 and fields[1].isdigit() else 0
        if not is_hex40(tree) or not all(is_hex40(p) for p in parents):
            raise GitReadError(f"commit {oid} has a malformed tree or parent line")
        return Commit(tree, tuple(parents), message.decode("utf-8", "replace"), when)

    def tree(self, oid: str) -> list[TreeEntry]:
        """A tree's entries in stored order (names decoded with ``os.fsdecode``)."""
        if oid == EMPTY_TREE:
            return []
        data = self._read_kind(oid, "tree")
        entries: list[TreeEntry] = []
        pos, end = 0, len(data)
        with _guard(f"tree {oid}"):
            while pos < end:
                space = data.index(b" ", pos)
                nul = data.index(b"\0", space)
                if nul + 21 > end:
                    raise GitReadError(f"tree {oid} is truncated")
                mode = int(data[pos:space], 8)
                entries.append(TreeEntry(mode, os.fsdecode(data[space + 1 : nul]), data[nul + 1 : nul + 21].hex()))
                pos = nul + 21
        return entries

    def _entries(self, oid: str | None) -> dict[str, TreeEntry]:
        return {} if oid is None else {e.name: e for e in self.tree(oid)}

    def lookup(self, tree_oid: str | None, path: str) -> TreeEntry | None:
        """The entry at ``path`` (``a/b/c``) below a tree, or None when absent."""
        current = tree_oid
        parts = path.split("/")
        for i, part in enumerate(parts):
            entry = self._entries(current).get(part)
            if entry is None or (i < len(parts) - 1 and not entry.is_tree):
                return None
            current = entry.oid
        return entry

    def changed_paths(self, old_tree: str | None, new_tree: str | None) -> list[str]:
        """Every non-tree path that differs between two trees: exactly ``sandbox.store.objects.diff_trees``.

        Same paths in the same order: names sorted as Python strings per directory, a subtree's
        changes before the entry's own (a file replaced by a directory gives both), identical
        subtrees skipped, mode-only changes included, gitlinks treated as leaves.
        """
        return [path for path, _a, _b in self.changes(old_tree, new_tree)]

    def changes(
        self, old_tree: str | None, new_tree: str | None
    ) -> list[tuple[str, TreeEntry | None, TreeEntry | None]]:
        """``(path, old entry, new entry)`` for each path :meth:`changed_paths` gives, in its order."""
        with _guard("changed paths"):  # (a RecursionError on an absurdly deep tree included)
            return list(treediff.changes(self._entries, old_tree, new_tree))

    def close(self) -> None:
        """Unmap every opened pack (the Repo stays usable: packs are mapped again when needed)."""
        for packs in self._packs.values():
            for pack in packs:
                pack.close()
        self._packs = {}
