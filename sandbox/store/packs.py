"""Small pack files: the objects of one recorded call made durable with three fsyncs, not sixteen.

libgit2's fsync option syncs every loose object and its fan-out directory (two fsyncs per object);
a one-file call at depth four writes eight objects. Written instead as one pack (version 2, whole
objects, no deltas) with its index: fsync the pack and the index together, rename both into
``objects/pack`` (the index last: readers look for packs by their index), fsync the directory.
Nothing refers to the objects until the caller moves a ref afterwards, so a crash at any instant
leaves at worst an unreferenced pack or temp file.

Each pack the sandbox writes is registered in ``<git dir>/sandbox/packs/`` with its level. When
``FAN_IN`` (8) packs of one level exist, they are merged into one pack of the next level and removed
(git's own ``repack`` works the same way; git and libgit2 readers look again when an object is not
where they expected it). So a run of n calls leaves O(log n) packs, each object is rewritten once per
level, and the user's own ``git gc`` repacks everything as usual.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Sequence

from sandbox import faults
from sandbox.errors import LockedError
from sandbox.store import layout
from sandbox.store.fsutil import fsync_dir, sync_together
from sandbox.store.locks import file_lock

#: Merge this many packs of one level into one of the next. A run of n calls then leaves at most
#: 7 packs per level, log8(n) levels: well under git's own gc.autoPackLimit (50) for long runs.
FAN_IN = 8
TEMP_PREFIX = "tmp_sandbox_"
TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}

faults.POINTS.update(
    {"pack.after_pack", "pack.after_index", "pack.after_rename", "pack.merge.after_write", "pack.merge.after_remove"}
)


def object_id(kind: int, data: bytes) -> str:
    """The git (SHA-1) id of an object of type number ``kind`` with this content."""
    h = hashlib.sha1(b"%s %d\0" % (TYPE_NAMES[kind], len(data)))
    h.update(data)
    return h.hexdigest()


def _object_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def write_pack(
    objects_dir: str, items: Iterable[tuple[str, int, bytes]], count: int, level: int = 0, also: Sequence[int] = ()
) -> str:
    """Write ``count`` distinct objects ``(id, type number, content)`` as one durable pack; its name.

    The objects are streamed to the file, so a merge never holds more than one in memory. The
    name is ``pack-<checksum>``, as git names packs. The pack, its index and the descriptors ``also``
    (a ref's lock, see :mod:`sandbox.store.durable`) are synced together, before either is renamed.
    """
    if count < 1:
        raise ValueError("a pack needs at least one object")
    pack_dir = os.path.join(objects_dir, "pack")
    os.makedirs(pack_dir, exist_ok=True)
    token = secrets.token_hex(8)
    tmp_pack = os.path.join(pack_dir, f"{TEMP_PREFIX}{token}.pack")
    tmp_idx = os.path.join(pack_dir, f"{TEMP_PREFIX}{token}.idx")
    index: dict[bytes, tuple[int, int]] = {}  # raw id -> (offset, crc32)
    try:
        fd = os.open(tmp_pack, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with os.fdopen(fd, "wb") as fh:
            header = b"PACK" + struct.pack(">II", 2, count)
            digest = hashlib.sha1(header)
            fh.write(header)
            offset = len(header)
            for oid, kind, data in items:
                raw = bytes.fromhex(oid)
                if raw in index:
                    raise ValueError(f"object {oid} given twice")
                packed = _object_header(kind, len(data)) + zlib.compress(data, 1)
                index[raw] = (offset, zlib.crc32(packed))
                digest.update(packed)
                fh.write(packed)
                offset += len(packed)
            if len(index) != count:
                raise ValueError(f"{len(index)} objects given, {count} announced")
            checksum = digest.digest()
            fh.write(checksum)
            fh.flush()
            name = "pack-" + checksum.hex()
            idx_fd = os.open(tmp_idx, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(idx_fd, "wb") as idx:
                idx.write(_index_bytes(index, checksum))
                idx.flush()
                sync_together([fh.fileno(), idx.fileno(), *also])
        faults.point("pack.after_pack")
        faults.point("pack.after_index")
        _register(objects_dir, name, level)
        os.replace(tmp_pack, os.path.join(pack_dir, name + ".pack"))
        os.replace(tmp_idx, os.path.join(pack_dir, name + ".idx"))
        faults.point("pack.after_rename")
    finally:
        for tmp in (tmp_pack, tmp_idx):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    fsync_dir(pack_dir)
    return name


def _index_bytes(index: dict[bytes, tuple[int, int]], pack_checksum: bytes) -> bytes:
    """A version 2 pack index: fan-out table, sorted ids, CRCs, offsets (large ones apart)."""
    ids = sorted(index)
    fanout = [0] * 256
    for raw in ids:
        fanout[raw[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    small: list[int] = []
    large: list[int] = []
    for raw in ids:
        offset = index[raw][0]
        if offset < 0x80000000:
            small.append(offset)
        else:
            small.append(0x80000000 | len(large))
            large.append(offset)
    parts = [
        b"\377tOc",
        struct.pack(">I", 2),
        struct.pack(">256I", *fanout),
        b"".join(ids),
        struct.pack(f">{len(ids)}I", *(index[raw][1] for raw in ids)),
        struct.pack(f">{len(small)}I", *small),
        struct.pack(f">{len(large)}Q", *large),
        pack_checksum,
    ]
    data = b"".join(parts)
    return data + hashlib.sha1(data).digest()


def index_ids(idx_path: str) -> list[str]:
    """The object ids listed in a version 2 pack index."""
    with open(idx_path, "rb") as fh:
        head = fh.read(8 + 256 * 4)
        if head[:8] != b"\377tOc\0\0\0\2":
            raise ValueError(f"{idx_path} is not a version 2 pack index")
        count = struct.unpack(">I", head[-4:])[0]
        raw = fh.read(20 * count)
    if len(raw) != 20 * count:
        raise ValueError(f"{idx_path} is truncated")
    return [raw[i : i + 20].hex() for i in range(0, len(raw), 20)]


# -- the registry of the sandbox's own packs, and merging them ------------------------------------


def _registry(objects_dir: str) -> str:
    return layout.packs_registry_of(objects_dir)


def _register(objects_dir: str, name: str, level: int) -> None:
    # An empty file named <level>.<pack name>: listing the directory is all a count needs.
    # Not synced: a lost entry only leaves that pack for git's own gc to merge.
    registry = _registry(objects_dir)
    os.makedirs(registry, exist_ok=True)
    with open(os.path.join(registry, f"{level}.{name}"), "wb"):
        pass


def _entries(objects_dir: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(_registry(objects_dir))
    except FileNotFoundError:
        return []
    out = []
    for entry in names:
        level, _, name = entry.partition(".")
        if level.isdigit() and name.startswith("pack-"):
            out.append((int(level), name))
    return out


def registered(objects_dir: str) -> dict[str, int]:
    """The sandbox's packs still present, by name, with their level."""
    pack_dir = os.path.join(objects_dir, "pack")
    return {
        name: level for level, name in _entries(objects_dir) if os.path.exists(os.path.join(pack_dir, name + ".idx"))
    }


def maybe_merge(objects_dir: str, read: Callable[[str], tuple[int, bytes]]) -> list[str]:
    """Merge the sandbox's packs level by level when ``FAN_IN`` of a level exist; the new packs' names.

    ``read`` returns an object's type number and content; each object is checked against its id
    before it is copied, and a merge that meets a damaged one is given up, its packs left as they
    are. Skipped (nothing done) while another process merges.
    """
    levels: dict[int, int] = {}
    for level, _name in _entries(objects_dir):
        levels[level] = levels.get(level, 0) + 1
    if not any(count >= FAN_IN for count in levels.values()):
        return []  # the common case: one directory listing
    made: list[str] = []
    lock = layout.packs_registry_of(objects_dir) + ".lock"
    try:
        with file_lock(lock, "Merging sandbox packs", timeout=0):
            _prune_registry(objects_dir)
            while True:
                by_level: dict[int, list[str]] = {}
                for name, level in registered(objects_dir).items():
                    by_level.setdefault(level, []).append(name)
                full = sorted(level for level, names in by_level.items() if len(names) >= FAN_IN)
                if not full:
                    return made
                level = full[0]
                made.append(_merge(objects_dir, sorted(by_level[level]), level + 1, read))
    except LockedError:
        return made
    except (OSError, ValueError, KeyError):
        return made  # a damaged or vanished object: leave the packs for git's own gc


def _prune_registry(objects_dir: str) -> None:
    """Forget packs that are gone (the user's ``git gc`` repacked them).

    An entry younger than a minute may belong to a pack being written (registered before its
    rename): it is kept.
    """
    pack_dir = os.path.join(objects_dir, "pack")
    registry = _registry(objects_dir)
    young = time.time() - 60
    for level, name in _entries(objects_dir):
        entry = os.path.join(registry, f"{level}.{name}")
        with contextlib.suppress(FileNotFoundError):
            if not os.path.exists(os.path.join(pack_dir, name + ".idx")) and os.lstat(entry).st_mtime < young:
                os.unlink(entry)


def _merge(objects_dir: str, names: list[str], level: int, read: Callable[[str], tuple[int, bytes]]) -> str:
    pack_dir = os.path.join(objects_dir, "pack")
    ids: dict[str, None] = {}
    for name in names:
        ids.update(dict.fromkeys(index_ids(os.path.join(pack_dir, name + ".idx"))))

    def checked(oid: str) -> tuple[str, int, bytes]:
        kind, data = read(oid)
        if object_id(kind, data) != oid:
            raise ValueError(f"object {oid} does not match its id")
        return oid, kind, data

    merged = write_pack(objects_dir, (checked(oid) for oid in ids), len(ids), level)
    faults.point("pack.merge.after_write")
    # Every object is in the merged pack (durable) before any old pack goes; index first, as git does.
    registry = _registry(objects_dir)
    for name in names:
        if name == merged:
            continue
        for suffix in (".idx", ".pack"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(pack_dir, name + suffix))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(registry, f"{level - 1}.{name}"))
        faults.point("pack.merge.after_remove")
    return merged


def remove_leftovers(objects_dir: str, older_than: float) -> int:
    """Remove temp files of interrupted pack writes older than ``older_than`` (epoch seconds); how many."""
    pack_dir = os.path.join(objects_dir, "pack")
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(pack_dir):
            if not name.startswith(TEMP_PREFIX):
                continue
            path = os.path.join(pack_dir, name)
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(path).st_mtime < older_than:
                    os.unlink(path)
                    removed += 1
    registry = _registry(objects_dir)
    for level, name in _entries(objects_dir):
        entry = os.path.join(registry, f"{level}.{name}")
        with contextlib.suppress(FileNotFoundError):
            if not os.path.exists(os.path.join(pack_dir, name + ".idx")) and os.lstat(entry).st_mtime < older_than:
                os.unlink(entry)
    return removed
