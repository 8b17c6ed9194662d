"""Confining paths to a working tree.

Every path the sandbox writes through is checked here first: relative, no ``..``, no NUL, not
inside any ``.git`` directory, of a sane length, and reached without following a symlink in any
parent directory. The last component may be a symlink; writers replace the link, never follow it.
"""

from __future__ import annotations

import os
import stat

from sandbox.errors import PathRefusedError

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def normalize(path: str) -> str:
    """The canonical relative form (``a/b``) of a user-given path, or a :class:`PathRefusedError`.

    Refuses absolute paths, ``..`` components, NUL bytes, overlong names and anything inside a
    ``.git`` directory (compared case-insensitively, as on case-insensitive file systems).
    """
    if not path:
        raise PathRefusedError("An empty path was given; give a path relative to the worktree.")
    if "\0" in path:
        raise PathRefusedError("The path contains a NUL byte; no file can have that name.")
    if path.startswith("/") or os.path.isabs(path):
        raise PathRefusedError(f"The path {path!r} is absolute; give it relative to the worktree.")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise PathRefusedError(f"The path {path!r} names the worktree itself, not a file in it.")
    for part in parts:
        if part == "..":
            raise PathRefusedError(f"The path {path!r} climbs out with '..'; paths must stay in the worktree.")
        if part.lower() == ".git":
            raise PathRefusedError(f"The path {path!r} is inside .git; the sandbox never writes there.")
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            raise PathRefusedError(f"A name in {path[:80]!r}... is longer than {MAX_NAME_BYTES} bytes.")
    rel = "/".join(parts)
    if len(os.fsencode(rel)) > MAX_PATH_BYTES:
        raise PathRefusedError(f"The path {rel[:80]!r}... is longer than {MAX_PATH_BYTES} bytes.")
    return rel


def from_user(root: str, path: str, cwd: str | None = None) -> str:
    """Normalize a path the user gave, which may be absolute if it lies inside ``root``.

    A relative path is taken relative to ``cwd`` when ``cwd`` is inside ``root``, else to ``root``.
    """
    root_real = os.path.realpath(root)
    if os.path.isabs(path) or (cwd is not None and _inside(os.path.realpath(cwd), root_real)):
        full = path if os.path.isabs(path) else os.path.join(cwd or root, path)
        full = os.path.normpath(full)
        parent_real = os.path.realpath(os.path.dirname(full))
        candidate = os.path.join(parent_real, os.path.basename(full))
        if not _inside(candidate, root_real) or candidate == root_real:
            raise PathRefusedError(f"The path {path!r} is outside the worktree {root}.")
        path = os.path.relpath(candidate, root_real)
    return normalize(path)


def subdir_in_run(here: str, worktree: str, user_workdir: str | None) -> str:
    """Where ``here`` is, relative to a run's worktree ("" for its root), for commands run from it.

    ``here`` inside the worktree keeps its place there; inside the user's tree it maps to the same
    place in the worktree (``src/`` of your tree is ``src/`` of the run's), so ``sandbox exec`` and
    ``sandbox run`` keep the subdirectory you are in. Anywhere else (or a place the worktree does not
    have) is the worktree's root.
    """
    real = os.path.realpath(here)
    for root in (worktree, user_workdir):
        if not root:
            continue
        root_real = os.path.realpath(root)
        if _inside(real, root_real):
            rel = os.path.relpath(real, root_real)
            if rel == "." or rel.split(os.sep)[0] == ".git":
                return ""
            return rel if os.path.isdir(os.path.join(worktree, rel)) else ""
    return ""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_parents(root: str, rel: str) -> None:
    """Refuse ``rel`` if a parent directory below ``root`` is a symlink or not a directory.

    Missing parents are fine (writers create them); the last component is not checked.
    """
    parts = rel.split("/")[:-1]
    current = root
    for part in parts:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise PathRefusedError(
                f"The path {rel!r} goes through the symlink {os.path.relpath(current, root)!r}; "
                "the sandbox never writes through a symlinked directory."
            )
        if not stat.S_ISDIR(st.st_mode):
            return


def confined(root: str, path: str) -> tuple[str, str]:
    """Normalize and check a path for writing below ``root``; returns (relative, absolute)."""
    rel = normalize(path)
    check_parents(root, rel)
    return rel, os.path.join(root, rel)
