"""git's own rules for a path in a tree: what ``verify_path`` refuses, with the NTFS and HFS+ foldings.

A path another clone recorded (a fetched run's ledger, its commits' trees) must pass the checks git
applies before it writes a path into a working tree (git's ``read-cache.c: verify_path``, with
``core.protectNTFS`` and ``core.protectHFS`` both on, as we want on every file system):

* relative, not empty, no NUL, no empty, ``.`` or ``..`` component, no trailing slash;
* no component that a file system could take for ``.git``: ``.git`` in any case; on NTFS, ``.git``
  or its short name ``git~1`` followed by any run of spaces and dots, or by an alternate data
  stream (``.git::$INDEX_ALLOCATION``), also as a backslash-separated part of a component; on HFS+,
  ``.git`` with code points HFS+ ignores inserted anywhere (``.g\\u200cit``);
* a symlink named ``.gitmodules`` (with the same foldings), which git refuses to check out.

Standard library only: the verifier (:mod:`sandbox.run.verify`) and the plan check
(:mod:`sandbox.merge.validate`) share it.
"""

from __future__ import annotations

import os

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255

#: Code points HFS+ drops when it compares names (git's ``utf8.c: next_hfs_char``).
HFS_IGNORABLE = frozenset([0x200C, 0x200D, 0x200E, 0x200F, 0xFEFF, *range(0x202A, 0x202F), *range(0x206A, 0x2070)])


def _hfs_fold(name: str) -> str:
    return "".join(c for c in name if ord(c) not in HFS_IGNORABLE).lower()


def _ntfs_is(name: str, dotname: str, short: str) -> bool:
    """True when NTFS could take ``name`` for ``dotname`` (or its 8.3 short name ``short``)."""
    for part in name.split("\\"):
        # An alternate data stream names the same file; trailing spaces and dots are dropped.
        base = part.split(":", 1)[0].rstrip(" .").lower()
        if base in (dotname, short):
            return True
    return False


def is_dotgit(name: str) -> bool:
    """True for a path component that some file system takes for ``.git``."""
    return name.lower() == ".git" or _hfs_fold(name) == ".git" or _ntfs_is(name, ".git", "git~1")


def is_dotgitmodules(name: str) -> bool:
    """True for a component some file system takes for ``.gitmodules`` (``gi7eba~1`` is NTFS's short name)."""
    return (
        _hfs_fold(name) == ".gitmodules"
        or _ntfs_is(name, ".gitmodules", "gitmod~1")
        or _ntfs_is(name, ".gitmodules", "gi7eba~1")
    )


def refusal(path: str, mode: int | None = None) -> str | None:
    """Why git would refuse ``path`` in a tree (a phrase), or None when it is a fine path.

    ``mode`` (a git mode) adds the check that depends on it: a symlink named ``.gitmodules``.
    """
    if not path:
        return "is empty"
    if "\0" in path:
        return "contains a NUL byte"
    if path.startswith("/"):
        return "is absolute"
    if path.endswith("/"):
        return "ends with a slash"
    try:
        encoded = os.fsencode(path)
    except UnicodeError:
        return "cannot be a file name here"
    if len(encoded) > MAX_PATH_BYTES:
        return f"is longer than {MAX_PATH_BYTES} bytes"
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return "has an empty, '.' or '..' component"
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            return f"has a name longer than {MAX_NAME_BYTES} bytes"
        if is_dotgit(part):
            return "is inside .git (as some file system would read it)"
    if mode == 0o120000 and is_dotgitmodules(parts[-1]):
        return "is a symlink named .gitmodules"
    return None
