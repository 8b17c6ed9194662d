"""git's object storage read with the standard library: loose objects, packs and their deltas.

The lower half of :mod:`sandbox.fast.gitread` (which reads refs, commits and trees on top of it):
every file is opened as a regular file only, without blocking, and read within a bound; packs
(idx v2, deltas of any depth) are mapped, or read with ``pread`` for a directory another party
writes. What cannot be read for certain raises :class:`GitReadError`, and the caller falls back to
pygit2. Standard library only (an import-linter contract in pyproject.toml checks it).
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct
import zlib

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import overload
else:

    def overload(func: object) -> object:
        """``typing.overload`` at run time: nothing (mypy reads the real one)."""
        return func


#: A bound on a delta chain, only to stop on a damaged pack whose REF_DELTAs form a cycle.
_MAX_CHAIN = 10_000
_TYPES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
_TYPE_NUMBERS = {name.encode(): num for num, name in _TYPES.items()}
#: Bounds on what one read may take: a file (a sparse file can claim a terabyte) and an inflated
#: object (a loose object of a few bytes can inflate to gigabytes).
MAX_FILE = 256 << 20
MAX_OBJECT = 256 << 20
#: A pack index no bigger than this is read whole when packs are not mapped (see :class:`Pread`).
_READ_IDX = 16 << 20


class GitReadError(Exception):
    """This reader cannot answer (a format it does not read, a missing or damaged object, an odd ref).

    The caller falls back to pygit2, which reads or reports it properly.
    """


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, which must be a regular file.

    Checked before it is opened (a device is not even opened), then opened without blocking and
    checked again (it may have been swapped in between): a run's own git directory is the agent's
    to write, and a FIFO (or a device) put where a ref, a pack or an object should be would
    otherwise hang the command that reads it. OSError (FileNotFoundError...) as ``open`` raises it.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise GitReadError(f"{path} is not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):  # as open() says it: a ref named like a directory of refs is no ref
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise GitReadError(f"{path} is not a regular file")
    return fd


def read_file(path: str, limit: int = MAX_FILE) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most ``limit`` of them
    (a longer file raises GitReadError, without being read whole)."""
    with os.fdopen(open_regular(path), "rb") as fh:
        if os.fstat(fh.fileno()).st_size > limit:
            raise GitReadError(f"{path} is larger than {limit} bytes")
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise GitReadError(f"{path} is larger than {limit} bytes")
    return data


def _map(path: str) -> mmap.mmap:
    with os.fdopen(open_regular(path), "rb") as fh:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


class Pread:
    """A file read with ``pread`` at every access, never mapped: for a directory someone else writes.

    A mapped file truncated under the reader kills the process with SIGBUS at the next access of a
    page past the new end; an agent that truncates a pack of its own git dir while ``status`` reads
    it could do that on purpose. A ``pread`` past the end returns fewer bytes instead, which the
    pack checks turn into GitReadError. Indexed and sliced like the mmap it stands in for.
    """

    def __init__(self, path: str) -> None:
        self.fd = open_regular(path)
        self.size = os.fstat(self.fd).st_size

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...  # noqa: F811  (overload is typing's to ruff only in part)
    def __getitem__(self, key: int | slice) -> int | bytes:  # noqa: F811
        if isinstance(key, slice):
            start, stop, _step = key.indices(self.size)
            return os.pread(self.fd, stop - start, start) if stop > start else b""
        at = key + self.size if key < 0 else key
        byte = os.pread(self.fd, 1, at) if 0 <= at < self.size else b""
        if not byte:
            raise IndexError(f"offset {key} is past the end of the file")
        return byte[0]

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)


def _unpack(fmt: str, data: mmap.mmap | Pread | bytes, offset: int) -> tuple[int, ...]:
    """``struct.unpack_from`` for a mapped or a pread file (struct.error when it is too short)."""
    return struct.unpack(fmt, data[offset : offset + struct.calcsize(fmt)])


_HEX_LOWER = frozenset("0123456789abcdef")
_HEX_BYTES = frozenset(b"0123456789abcdefABCDEF")


def is_hex40(text: str) -> bool:
    """``re.fullmatch(r"[0-9a-f]{40}", text)``: an object id as git writes it (without :mod:`re`,
    which the quick path's start does not pay for; tests/fast/test_gitread.py holds them equal)."""
    return len(text) == 40 and _HEX_LOWER.issuperset(text)


def is_hex40_bytes(data: bytes) -> bool:
    """``re.fullmatch(rb"[0-9a-fA-F]{40}", data)``: an object id in a reflog or a commit."""
    return len(data) == 40 and _HEX_BYTES.issuperset(data)


#: Objects up to this size are hashed by the interpreter's own SHA-1 (importing :mod:`hashlib` loads
#: OpenSSL, a fifth of the interpreter's start); larger ones by OpenSSL's, which is faster per byte.
_SMALL_OBJECT = 1 << 20


def object_id(kind: str, data: bytes) -> str:
    """The SHA-1 id of an object of type ``kind`` (``blob``...) and content ``data``."""
    header = b"%s %d\0" % (kind.encode(), len(data))
    if len(data) <= _SMALL_OBJECT:
        try:
            h = __import__("_sha1").sha1(header)
            h.update(data)
            return str(h.hexdigest())
        except ImportError:  # an interpreter built without its own hashes
            pass
    import hashlib

    full = hashlib.sha1(header)
    full.update(data)
    return full.hexdigest()


class Pack:
    """One pack: its idx mapped at once, the pack itself mapped on first use."""

    def __init__(self, idx_path: str, mapped: bool = True) -> None:
        self.idx_path = idx_path
        self.pack_path = idx_path[:-4] + ".pack"
        self.open: type[Pread] | Callable[[str], mmap.mmap] = _map if mapped else Pread
        idx: mmap.mmap | Pread | bytes
        if not mapped and os.stat(idx_path).st_size <= _READ_IDX:
            idx = read_file(idx_path, _READ_IDX)  # small: one read beats a pread per probe
        else:
            idx = self.open(idx_path)
        self.idx = idx
        if idx[:4] != b"\377tOc":
            raise GitReadError(f"{idx_path} is not a version 2 pack index (version 1 is not read here)")
        if _unpack(">I", idx, 4)[0] != 2:
            raise GitReadError(f"{idx_path} has an unknown pack index version")
        self.fanout = _unpack(">256I", idx, 8)
        self.count = n = self.fanout[255]
        self.offsets_at = 1032 + 24 * n
        self.large_at = 1032 + 28 * n
        if len(idx) < self.large_at + 40:
            raise GitReadError(f"{idx_path} is truncated")
        self.data: mmap.mmap | Pread | None = None

    def find(self, raw: bytes) -> int | None:
        """The pack offset of an object (20-byte id), or None: fanout, then binary search."""
        idx = self.idx
        lo = self.fanout[raw[0] - 1] if raw[0] else 0
        hi = self.fanout[raw[0]]
        while lo < hi:
            mid = (lo + hi) // 2
            at = 1032 + 20 * mid
            found = idx[at : at + 20]
            if found < raw:
                lo = mid + 1
            elif found > raw:
                hi = mid
            else:
                offset: int = _unpack(">I", idx, self.offsets_at + 4 * mid)[0]
                if offset & 0x80000000:
                    offset = _unpack(">Q", idx, self.large_at + 8 * (offset & 0x7FFFFFFF))[0]
                return offset
        return None

    def pack(self) -> mmap.mmap | Pread:
        """The pack's bytes, checked against the checksum its idx records (catches truncation)."""
        if self.data is None:
            data = self.open(self.pack_path)
            if data[:4] != b"PACK" or _unpack(">I", data, 4)[0] not in (2, 3):
                raise GitReadError(f"{self.pack_path} is not a pack")
            if len(data) < 32 or data[-20:] != self.idx[-40:-20]:
                raise GitReadError(f"{self.pack_path} does not match its index (truncated or replaced)")
            self.data = data
        return self.data

    def _header(self, pos: int) -> tuple[int, int, int]:
        data = self.pack()
        c = data[pos]
        kind, size, shift = (c >> 4) & 7, c & 15, 4
        pos += 1
        while c & 0x80:
            c = data[pos]
            pos += 1
            size |= (c & 0x7F) << shift
            shift += 7
        return kind, size, pos

    def _inflate(self, pos: int, size: int) -> bytes:
        """``size`` bytes inflated from ``pos``, reading the map in growing chunks (never to its end)."""
        data = self.pack()
        end = len(data) - 20
        inflater = zlib.decompressobj()
        out: list[bytes] = []
        got = 0
        step = size + 64
        while not inflater.eof:
            if pos >= end:
                raise GitReadError(f"{self.pack_path}: an object runs past the end of the pack")
            chunk = data[pos : min(end, pos + step)]
            if not chunk:  # the file shrank under a pread reader
                raise GitReadError(f"{self.pack_path}: the pack was truncated while it was read")
            pos += len(chunk)
            step *= 2
            # The bound stops a damaged stream from inflating far beyond the size it declares.
            piece = inflater.decompress(chunk, size + 1 - got)
            got += len(piece)
            if got > size:
                raise GitReadError(f"{self.pack_path}: an object is longer than its header says")
            out.append(piece)
        if got != size:
            raise GitReadError(f"{self.pack_path}: an object is shorter than its header says")
        return b"".join(out)

    def read_at(self, offset: int, limit: int = MAX_OBJECT) -> tuple[str, bytes]:
        """The object at ``offset``: its delta chain walked down to a base, then applied upwards
        (GitReadError when the object, or a piece of its chain, is bigger than ``limit``, or when the
        chain inflates and produces more than a few times ``limit`` in all: a damaged or crafted pack
        of tiny deltas that each copy ``limit`` bytes would otherwise take minutes)."""
        deltas: list[bytes] = []
        pos = offset
        budget = 4 * limit + (1 << 20)
        for _ in range(_MAX_CHAIN):
            kind, size, at = self._header(pos)
            if size > limit:
                raise GitReadError(f"{self.pack_path}: an object is larger than {limit} bytes")
            budget -= size
            if budget < 0:
                raise GitReadError(f"{self.pack_path}: a delta chain inflates to more than {4 * limit} bytes")
            if kind in _TYPES:
                kind_name, base = _TYPES[kind], self._inflate(at, size)
                break
            if kind == 6:  # OFS_DELTA: the base lies a (peculiarly encoded) distance before
                data = self.pack()
                c = data[at]
                distance = c & 0x7F
                at += 1
                while c & 0x80:
                    c = data[at]
                    at += 1
                    distance = ((distance + 1) << 7) | (c & 0x7F)
                if not 0 < distance <= pos:
                    raise GitReadError(f"{self.pack_path}: a delta's base offset is out of range")
                deltas.append(self._inflate(at, size))
                pos -= distance
            elif kind == 7:  # REF_DELTA: the base is named by its id
                raw = bytes(self.pack()[at : at + 20])
                deltas.append(self._inflate(at + 20, size))
                found = self.find(raw)
                if found is None:  # a thin pack: git does not read these from disk either
                    raise GitReadError(f"{self.pack_path}: a delta's base {raw.hex()} is not in the pack")
                pos = found
            else:
                raise GitReadError(f"{self.pack_path}: unknown object type {kind} at offset {pos}")
        else:
            raise GitReadError(f"{self.pack_path}: a delta chain is longer than {_MAX_CHAIN}")
        for delta in reversed(deltas):
            base = apply_delta(base, delta, limit)
            budget -= len(base)
            if budget < 0:
                raise GitReadError(f"{self.pack_path}: a delta chain produces more than {4 * limit} bytes")
        return kind_name, base

    def close(self) -> None:
        """Unmap (or close) the files."""
        if not isinstance(self.idx, bytes):
            self.idx.close()
        if self.data is not None:
            self.data.close()


def _varint(delta: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        c = delta[pos]
        pos += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return value, pos


def apply_delta(base: bytes, delta: bytes, limit: int = MAX_OBJECT) -> bytes:
    """git's delta format: source and target sizes, then copy-from-base and insert instructions."""
    source_size, pos = _varint(delta, 0)
    target_size, pos = _varint(delta, pos)
    if source_size != len(base):
        raise GitReadError("a delta does not fit its base (wrong source size)")
    if target_size > limit:
        raise GitReadError(f"a delta makes an object larger than {limit} bytes")
    out = bytearray()
    end = len(delta)
    while pos < end:
        op = delta[pos]
        pos += 1
        if op & 0x80:  # copy: offset and size bytes present as the low 7 bits say
            offset = size = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (0x10 << i):
                    size |= delta[pos] << (8 * i)
                    pos += 1
            size = size or 0x10000
            if offset + size > len(base):
                raise GitReadError("a delta copies past the end of its base")
            out += base[offset : offset + size]
        elif op:
            if pos + op > end:
                raise GitReadError("a delta is truncated")
            out += delta[pos : pos + op]
            pos += op
        else:
            raise GitReadError("a delta holds a reserved instruction (0)")
    if len(out) != target_size:
        raise GitReadError("a delta does not produce the size it declares")
    return bytes(out)


def inflate_loose(oid: str, compressed: bytes, limit: int = MAX_OBJECT) -> tuple[str, bytes]:
    """A loose object's type and content (its id is checked by the caller); inflated no further
    than ``limit`` bytes (and a header)."""
    inflater = zlib.decompressobj()
    full = inflater.decompress(compressed, limit + 32)
    if inflater.unconsumed_tail:
        raise GitReadError(f"loose object {oid} is larger than {limit} bytes")
    if not inflater.eof:
        raise GitReadError(f"loose object {oid} is truncated")
    header, _, body = full.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if kind not in _TYPE_NUMBERS or not size.isdigit() or int(size) != len(body):
        raise GitReadError(f"loose object {oid} has a malformed header")
    return kind.decode(), body
