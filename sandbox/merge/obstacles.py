"""What stands in the way of writing a path into a working tree, found before the first write.

Planning an apply, undo or redo decides per path what to write; this module then looks at the
tree around each path to be written and turns every obstacle into a conflict, so an operation
either writes everything or nothing:

* a directory where a file goes, unless the plan itself empties it (an empty directory counts:
  it may be the user's, and ``rmdir`` of a directory that still holds empty subdirectories fails);
* a file where a directory goes, or a symlinked parent (the sandbox never writes through one);
* a path that cannot be read (no read permission, an I/O error);
* a read-only file or parent directory (mode bits as well as ``access``: root can write anything,
  yet a read-only bit is the user's statement that the file must not change; a read-only mount
  fails ``access``);
* a path the user's sparse checkout excludes (its skip-worktree bit, or outside the cone).

The plan's paths are :class:`sandbox.merge.planned.PlannedPath`; an obstacle turns one into a
conflict with a reason and a hint (:func:`sandbox.merge.decide.obstacle`), marked ``obstacle`` so
later steps keep that reason.
"""

from __future__ import annotations

import os

import pygit2

from sandbox.merge import decide
from sandbox.merge.planned import PlannedPath
from sandbox.store.gitcli import git

#: Pathspecs per ``git ls-files`` call (keeps the argument list far below the system's limit).
LS_FILES_BATCH = 500


def _removed(by_path: dict[str, PlannedPath], rel: str) -> bool:
    other = by_path.get(rel)
    return other is not None and other.action == "write" and other.write is None


def check_structure(root: str, p: PlannedPath, by_path: dict[str, PlannedPath]) -> None:
    """File <-> directory changes: the plan itself must clear what stands in the way of a write."""
    if p.action != "write" or p.write is None:
        return
    # Through a symlinked parent only when the plan itself replaces that symlink with a directory.
    if p.user.kind == "via_link" and not _removed(by_path, p.user.blocker or ""):
        decide.obstacle(
            p,
            f"{p.user.blocker!r} is a symlink in your tree; the sandbox never writes through one",
            "replace the symlink with a real directory, or leave this path out (--exclude PATH)",
        )
    elif p.user.kind == "blocked" and p.user.blocker is not None and not _removed(by_path, p.user.blocker):
        decide.obstacle(
            p,
            f"{p.user.blocker!r} is a file in your tree, where the agent has a directory",
            "move that file away, or leave this path out (--exclude PATH)",
        )
    elif p.user.kind == "dir":
        full = os.path.join(root, p.path)
        for dirpath, dirnames, filenames in os.walk(full):
            real_dirs = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames + [d for d in dirnames if d not in real_dirs]:
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if not _removed(by_path, rel):
                    decide.obstacle(
                        p,
                        f"it is a directory in your tree holding files the agent did not remove ({rel!r})",
                        "move the directory away, or leave this path out (--exclude PATH)",
                    )
                    return
            if not real_dirs and not filenames:
                # Nothing the plan removes will ever empty it: it stays, and the file cannot go there.
                rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
                what = "an empty directory" if rel == p.path else f"a directory holding the empty directory {rel!r}"
                decide.obstacle(
                    p,
                    f"it is {what} in your tree, where the agent has a file",
                    "remove or move the directory away, or leave this path out (--exclude PATH)",
                )
                return


def _writable(st: os.stat_result, full: str) -> bool:
    return bool(st.st_mode & 0o222) and os.access(full, os.W_OK)


def check_access(root: str, writes: list[PlannedPath]) -> None:
    """Unreadable paths, read-only files and read-only parent directories become conflicts."""
    dirs_ok: dict[str, bool] = {}
    for p in writes:
        full = os.path.join(root, p.path)
        if p.user.unreadable:
            where = f" ({p.user.blocker!r})" if p.user.blocker and p.user.blocker != p.path else ""
            decide.obstacle(
                p,
                f"it cannot be read in your tree{where}: {p.user.unreadable}",
                "make it readable (chmod u+r), or leave this path out (--exclude PATH)",
            )
            continue
        if p.user.kind == "file" and not _writable(os.lstat(full), full):
            decide.obstacle(
                p, "it is read-only in your tree", "make it writable (chmod u+w), or leave it out (--exclude PATH)"
            )
            continue
        # The nearest directory that exists (a file in the way is removed by the plan itself).
        directory = os.path.dirname(full)
        while len(directory) > len(root) and not os.path.isdir(directory):
            directory = os.path.dirname(directory)
        if directory not in dirs_ok:
            st = os.lstat(directory)
            dirs_ok[directory] = _writable(st, directory) and os.access(directory, os.X_OK)
        if not dirs_ok[directory]:
            rel = os.path.relpath(directory, root).replace(os.sep, "/")
            decide.obstacle(
                p,
                f"its directory {rel + '/'!r} is read-only in your tree",
                "make the directory writable (chmod u+w), or leave this path out (--exclude PATH)",
            )


def is_read_only(p: PlannedPath) -> bool:
    """True when ``p`` was refused because it (or its directory) is read-only."""
    return p.obstacle and "read-only" in p.reason


# -- sparse checkout ------------------------------------------------------------------------------


def _sparse_settings(gitdir: str) -> tuple[bool, bool]:
    config = pygit2.Repository(gitdir).config

    def flag(name: str) -> bool:
        try:
            return bool(config.get_bool(name))
        except (KeyError, pygit2.GitError, ValueError):
            return False

    return flag("core.sparseCheckout"), flag("core.sparseCheckoutCone")


def _cone(gitdir: str) -> tuple[set[str], set[str]] | None:
    """The cone of a cone-mode sparse checkout: (recursive directories, parent directories)."""
    try:
        with open(os.path.join(gitdir, "info", "sparse-checkout"), encoding="utf-8") as fh:
            lines = [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    except OSError:
        return None
    listed = [line[1:-1] for line in lines if line.startswith("/") and line.endswith("/") and line != "/"]
    parents = {line[2:-3] for line in lines if line.startswith("!/") and line.endswith("/*/") and line != "!/*/"}
    return {d for d in listed if d not in parents}, parents


def _in_cone(path: str, cone: tuple[set[str], set[str]]) -> bool:
    recursive, parents = cone
    directory = os.path.dirname(path)
    if not directory or directory in parents:
        return True
    return any(directory == r or directory.startswith(r + "/") for r in recursive)


def sparse_excluded(workdir: str, gitdir: str, candidates: list[str]) -> set[str]:
    """The ``candidates`` that the sparse checkout of ``workdir`` excludes (empty when it has none).

    Tracked paths: their skip-worktree bit, read with ``git ls-files -t`` because libgit2 (pygit2)
    does not expose index entry flags; read-only, and only when a sparse checkout is on. Untracked
    paths (files the agent created): the cone, in cone mode; in non-cone mode the patterns are not
    evaluated and such a path is written.
    """
    enabled, cone_mode = _sparse_settings(gitdir)
    if not enabled or not candidates:
        return set()
    excluded: set[str] = set()
    tracked: set[str] = set()
    for start in range(0, len(candidates), LS_FILES_BATCH):
        batch = candidates[start : start + LS_FILES_BATCH]
        proc = git(["--literal-pathspecs", "ls-files", "-t", "-z", "--", *batch], cwd=workdir)
        for item in proc.stdout.split(b"\0"):
            if len(item) < 3:
                continue
            tag, path = item[:1], os.fsdecode(item[2:])
            tracked.add(path)
            if tag == b"S":
                excluded.add(path)
    cone = _cone(gitdir) if cone_mode else None
    if cone is not None:
        excluded.update(p for p in candidates if p not in tracked and not _in_cone(p, cone))
    return excluded


def check_sparse(workdir: str, gitdir: str, planned: list[PlannedPath]) -> None:
    """Paths to be written (or found missing) that the user's sparse checkout excludes become conflicts."""
    candidates = [p for p in planned if p.action in ("write", "merge", "conflict") and not p.obstacle]
    excluded = sparse_excluded(workdir, gitdir, [p.path for p in candidates])
    for p in candidates:
        if p.path in excluded:
            decide.obstacle(
                p,
                "it is outside your sparse checkout (git sparse-checkout excludes it)",
                "add its directory to your sparse checkout (git sparse-checkout add DIR), "
                "or leave it out (--exclude PATH)",
            )
