"""Reading files an agent can write, from outside its confinement, without being led anywhere else.

The rule (docs/design.md, "Reading what the agent wrote"): *unconfined code never opens a path an
agent can write by name.* A name is checked and then opened: between the two the agent swaps a file
for a symlink to ``~/.ssh/id_ed25519`` (``renameat2(RENAME_EXCHANGE)``, in a loop), makes it a FIFO
that blocks the reader for ever, or a sparse file of 4 GiB that costs no disk inside and all the
memory of the process that reads it whole. So every read of an agent's file goes through here:

* **Opened beneath the root, following no link.** ``openat2(2)`` with ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` opens the parent directory relative to a descriptor
  of the worktree (or agent home): a symlink at any component fails, atomically with the walk.
  Where the kernel has no ``openat2`` (or a seccomp filter refuses it), the walk goes one component
  at a time with ``O_NOFOLLOW`` (:func:`sandbox.store.beneath.open_dir`), as race-free.
* **The last name opened ``O_NOFOLLOW | O_NONBLOCK``** relative to that parent: a symlink there
  fails, and a FIFO opens without waiting for a writer.
* **The descriptor checked.** ``fstat`` must say a regular file, with the device and inode the
  ``lstat`` of the same name (relative to the same parent descriptor) saw: a file swapped in between
  is refused (:class:`ChangedError`), never read.
* **Read from that descriptor, bounded and streaming.** At most ``limit`` bytes are kept in memory;
  the git blob id (SHA-1 of ``blob <size>\\0`` + content) is computed as the bytes arrive. A file
  over the bound is hashed to its end in chunks and refused in one sentence that names its size and
  id (:class:`TooLargeError`); a read that takes longer than its deadline is refused too
  (:class:`SlowReadError`), so one run's odd file costs that run's call only.

Standard library only: the fast paths (the hook, ``status``) may import it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass

from sandbox.errors import SandboxError
from sandbox.store import beneath

#: The largest file read into memory (bytes), unless the caller says otherwise; above it a file is
#: recorded by size and blob id only, its content refused. Configurable: ``max_read_size`` in
#: ``[isolation]`` of .sandbox.toml (see :func:`sandbox.run.config`).
DEFAULT_LIMIT = 256 * 1024 * 1024
#: Seconds one file's read may take before it is refused.
DEFAULT_DEADLINE = 30.0
#: Seconds spent hashing a file over the bound (its content is not kept): a 4 GiB sparse file takes
#: 10-40 s to hash here, paid by the recording call (read before the host's shared lock is taken,
#: sandbox.store.preread); past this its blob id is not given.
HASH_BUDGET = 2.0
CHUNK = 1024 * 1024

RESOLVE_NO_SYMLINKS = 0x04
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class AgentReadError(SandboxError):
    """An agent's file could not be read safely; the message says which and why."""

    def __init__(self, message: str, rel: str) -> None:
        super().__init__(message)
        self.rel = rel


class LinkRefusedError(AgentReadError):
    """A symlink on the way to (or at) the path: never followed."""


class NotRegularError(AgentReadError):
    """The path is a FIFO, socket or device: its content is never read."""


class ChangedError(AgentReadError):
    """The file was replaced or resized while it was opened or read."""


class SlowReadError(AgentReadError):
    """Reading the file took longer than its deadline."""


class TooLargeError(AgentReadError):
    """The file is larger than the bound: recorded by size and blob id, its content not kept."""

    def __init__(self, message: str, rel: str, size: int, oid: str | None) -> None:
        super().__init__(message, rel)
        self.size = size
        self.oid = oid


@dataclass(frozen=True)
class Blob:
    """A file's content as read from its checked descriptor, and its git blob id."""

    data: bytes
    oid: str
    st: os.stat_result


def open_root(path: str) -> int:
    """A descriptor of the directory ``path`` (the worktree or agent home), itself not a symlink."""
    return beneath.open_root(path)


def _split(rel: str) -> tuple[str, str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise LinkRefusedError(f"The path {rel!r} leaves the directory it is read from; it was not read.", rel)
    return "/".join(parts[:-1]), parts[-1]


def open_parent(root: int, rel: str) -> tuple[int, str]:
    """(a descriptor of the directory holding ``rel`` beneath ``root``, reached through no symlink;
    the last name). OSError (ENOENT, ENOTDIR) when it is not there; :class:`LinkRefusedError` for a
    symlink on the way."""
    parent, name = _split(rel)
    if not parent:
        return os.dup(root), name
    if beneath.has_openat2():
        resolve = beneath.RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | beneath.RESOLVE_NO_MAGICLINKS
        try:
            # RESOLVE_NO_SYMLINKS refuses a link at every component (ELOOP), the last one too.
            return beneath.openat2(root, parent, _DIR_FLAGS & ~os.O_NOFOLLOW, 0, resolve), name
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                raise LinkRefusedError(
                    f"A directory on the way to {rel!r} is a symlink, which is not followed; it was not read.", rel
                ) from None
            raise
    try:
        return beneath.open_dir(root, parent), name
    except beneath.EscapeError:
        raise LinkRefusedError(
            f"A directory on the way to {rel!r} is a symlink, which is not followed; it was not read.", rel
        ) from None


def lstat(root: int, rel: str) -> os.stat_result | None:
    """``lstat`` of ``rel`` beneath ``root`` through no symlink (None: absent, or a parent is not a
    directory or is a symlink)."""
    try:
        fd, name = open_parent(root, rel)
    except (OSError, LinkRefusedError):
        return None
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def readlink(root: int, rel: str) -> bytes:
    """The target of the symlink ``rel`` beneath ``root`` (read, never followed)."""
    fd, name = open_parent(root, rel)
    try:
        return os.readlink(os.fsencode(name), dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise ChangedError(f"{rel!r} stopped being a symlink while it was read; it was not read.", rel) from None
        raise
    finally:
        os.close(fd)


def listdir(root: int, rel: str) -> list[str]:
    """The names in the directory ``rel`` beneath ``root`` ("" the root), reached through no symlink."""
    if not _split_ok(rel):
        fd = os.dup(root)
    else:
        parent, name = open_parent(root, rel)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _split_ok(rel: str) -> bool:
    return any(p not in ("", ".") for p in rel.split("/"))


def open_file(root: int, rel: str, seen: os.stat_result | None = None) -> tuple[int, os.stat_result]:
    """A read descriptor of the regular file ``rel`` beneath ``root``, and its ``fstat``.

    ``seen``: the ``lstat`` the caller decided on (else one is taken here, relative to the same
    parent descriptor); the descriptor must be that same file. Raises :class:`LinkRefusedError`,
    :class:`NotRegularError`, :class:`ChangedError`, or the OSError of the open (ENOENT...).
    """
    parent, name = open_parent(root, rel)
    try:
        if seen is None:
            seen = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISREG(seen.st_mode):
            raise _not_regular(rel, seen)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ChangedError(f"{rel!r} became a symlink while it was opened; it was not read.", rel) from None
            raise
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(rel, st)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise ChangedError(f"{rel!r} was replaced while it was opened; it was not read.", rel)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _not_regular(rel: str, st: os.stat_result) -> NotRegularError:
    kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a file"
    return NotRegularError(f"{rel!r} is {kind} (a FIFO, socket or device is never read); it was not read.", rel)


def read_fd(
    fd: int, st: os.stat_result, rel: str, *, limit: int = DEFAULT_LIMIT, deadline: float = DEFAULT_DEADLINE
) -> Blob:
    """Read the checked descriptor ``fd`` (``st`` its ``fstat``) to its end, hashing as it reads.

    The content is kept only up to ``limit`` bytes; past it the file is hashed to its end in chunks
    and :class:`TooLargeError` names its size and blob id. A file whose size changes meanwhile is
    :class:`ChangedError`; one that takes longer than ``deadline`` seconds, :class:`SlowReadError`.
    """
    size = st.st_size
    import hashlib  # here, not at import: OpenSSL's load is 4 ms of a confined exec's start

    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    keep = size <= limit
    parts: list[bytes] = []
    total = 0
    until = time.monotonic() + (deadline if keep else min(deadline, HASH_BUDGET))
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > size:
            raise ChangedError(f"{rel!r} grew while it was read; it was not recorded.", rel)
        digest.update(chunk)
        if keep:
            parts.append(chunk)
        if time.monotonic() > until and not keep:
            raise _too_large(rel, size, None, limit)
        if time.monotonic() > until:
            raise SlowReadError(
                f"Reading {rel!r} took more than {deadline:g} s; it was not recorded. Move it out of the "
                "worktree, or record again.",
                rel,
            )
    if total != size:
        raise ChangedError(f"{rel!r} shrank while it was read; it was not recorded.", rel)
    oid = digest.hexdigest()
    if not keep:
        raise _too_large(rel, size, oid, limit)
    return Blob(b"".join(parts), oid, st)


def _too_large(rel: str, size: int, oid: str | None, limit: int) -> TooLargeError:
    blob = f"blob {oid}" if oid else f"blob id not computed within {HASH_BUDGET:g} s"
    return TooLargeError(
        f"{rel!r} is {size} bytes ({blob}), more than max_read_size = {limit} bytes ([isolation] in "
        ".sandbox.toml): its content was not read into the run; remove it or raise the bound, then record again.",
        rel,
        size,
        oid,
    )


def read_file(
    root: int,
    rel: str,
    seen: os.stat_result | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    deadline: float = DEFAULT_DEADLINE,
) -> Blob:
    """The content and blob id of the regular file ``rel`` beneath ``root``: :func:`open_file`, then
    :func:`read_fd` (a file replaced or resized meanwhile is read again, once)."""
    for attempt in (0, 1):
        fd, st = open_file(root, rel, seen)
        try:
            return read_fd(fd, st, rel, limit=limit, deadline=deadline)
        except ChangedError:
            if attempt:
                raise
            seen = None
        finally:
            os.close(fd)
    raise AssertionError("unreachable")


def read_path(root: str, path: str, *, limit: int = DEFAULT_LIMIT, prefix: int | None = None) -> bytes:
    """The content of ``path``, a file beneath the directory ``root`` (an agent home, a worktree),
    read as :func:`read_file` does: no symlink followed on the way from ``root``, a regular file
    only, bounded. ``prefix``: only the first bytes (at most that many; a transcript's first line).

    ``root`` is taken as the host names it (its real path): the agent writes *beneath* it, not the
    name of the root itself (a home is bound into the sandbox at a fixed place). Raises OSError or
    :class:`AgentReadError` (:class:`LinkRefusedError` when ``path`` is not beneath ``root``).
    """
    base = os.path.realpath(root)
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        raise LinkRefusedError(f"The path {path!r} is not beneath {root!r}; it was not read.", path)
    fd = open_root(base)
    try:
        if prefix is None:
            return read_file(fd, rel, limit=limit).data
        file_fd, _st = open_file(fd, rel)
        try:
            return os.read(file_fd, prefix)
        finally:
            os.close(file_fd)
    finally:
        os.close(fd)


def blob_id(root: int, rel: str, seen: os.stat_result | None = None) -> str:
    """The git blob id of the regular file ``rel`` beneath ``root``, hashed from its checked
    descriptor (:func:`open_file`) as it is read, whatever its size: nothing is kept, and a regular
    file's read cannot block. :class:`ChangedError` when its size changes meanwhile."""
    fd, st = open_file(root, rel, seen)
    try:
        import hashlib  # here, not at import: OpenSSL's load is 4 ms of a confined exec's start

        digest = hashlib.sha1(b"blob %d\0" % st.st_size, usedforsecurity=False)
        total = 0
        while chunk := os.read(fd, CHUNK):
            total += len(chunk)
            digest.update(chunk)
        if total != st.st_size:
            raise ChangedError(f"{rel!r} changed size while it was read; it was not read.", rel)
        return digest.hexdigest()
    finally:
        os.close(fd)
