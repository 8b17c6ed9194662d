"""Durable file writes: temp file in the same directory, fsync, rename, fsync the directory."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

TEMP_PREFIX = ".sandbox-tmp-"


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename or unlink in it survives a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(directory: str, name: str) -> str:
    """A fresh temp path next to ``name`` in ``directory`` (same file system, so rename is atomic)."""
    stem = os.fsencode(name)[:40]
    return os.path.join(directory, TEMP_PREFIX + os.fsdecode(stem) + "-" + secrets.token_hex(4))


def atomic_write(path: str, data: bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never a mix.

    If ``path`` is a symlink, the link itself is replaced; its target is never written.
    """
    directory = os.path.dirname(path) or "."
    tmp = temp_name(directory, os.path.basename(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode & 0o777)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode & 0o7777)
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(directory)


def atomic_symlink(path: str, target: str, sync: bool = True) -> None:
    """Replace ``path`` with a symlink to ``target`` atomically (never follows an existing link)."""
    directory = os.path.dirname(path) or "."
    tmp = temp_name(directory, os.path.basename(path))
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(directory)


def remove_path(path: str, sync: bool = True) -> None:
    """Remove a file or symlink (not a directory); a missing path is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    os.unlink(path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def prune_empty_dirs(root: str, rel_dir: str) -> None:
    """Remove now-empty directories from ``rel_dir`` upward, stopping below ``root``."""
    while rel_dir:
        full = os.path.join(root, rel_dir)
        try:
            os.rmdir(full)
        except OSError:
            return
        rel_dir = os.path.dirname(rel_dir)


def write_json_file(path: str, text: str, sync: bool = True) -> None:
    """Replace a small state file (a JSON document) under the sandbox's own directory, atomically.

    Durably unless ``sync`` is False (a cache that is rebuilt when it is lost or damaged).
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, text.encode(), 0o644, sync=sync)
