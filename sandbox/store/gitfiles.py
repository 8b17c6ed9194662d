"""Whether the files libgit2 reads on its own for a working tree are plain files (or absent).

A run's worktree and its git dir are the agent's to write, even confined. Opening a FIFO for
reading blocks until someone writes to it: libgit2 opening a ``.gitattributes``, ``.gitignore``,
the git dir's ``config``, ``index``, ``info/attributes`` or ``info/exclude``, a file named by
``core.attributesFile``/``core.excludesFile`` or an ``include.path`` that the agent turned into a
FIFO (or a symlink to one, or to a device such as ``/dev/zero``) would hang the recorder, the
shared host of every run of the repository, or a user's command, for ever (measured). The sandbox
checks with these functions first and, when a file is not plain, leaves libgit2 out: no
conversion, no ignore rule, or a one-line refusal.

The check and libgit2's read are two steps: an agent that swaps a plain file for a FIFO in between
can still win the race. What it closes is the planted FIFO that waits for the next read. The rules read
per recorded path of a run (ignore, attributes) are no longer read this way: libgit2 reads
the host's copies of them (:mod:`sandbox.store.rulemirror`); the scan's status runs in a worker process
killed at its deadline (:mod:`sandbox.store.scan`).
"""

from __future__ import annotations

import os
import stat

#: Files of a git dir that libgit2 reads when it opens a repository, its index or its attributes.
GIT_DIR_FILES = (
    "config",
    "index",
    "HEAD",
    "commondir",
    "info/attributes",
    "info/exclude",
    "info/sparse-checkout",
    "objects/info/alternates",
)

#: Config keys naming a file libgit2 reads (``include.path``, ``includeIf.<cond>.path``, ...).
#: Compiled where it is used: the quick path's start does not pay for :mod:`re` (sandbox.cli.quick).
_FILE_KEYS = rb"^\s*(path|attributesfile|excludesfile)\s*=\s*(.*?)\s*$"

#: Nested includes followed at most this deep (git's own limit is 10).
MAX_INCLUDE_DEPTH = 10


def plain_or_absent(path: str) -> bool:
    """True when ``path`` (symlinks followed, as libgit2 follows them) is a regular file or absent."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:  # a symlink loop, a name too long: libgit2 cannot read it either
        return False
    return stat.S_ISREG(mode)


def _read_plain(path: str) -> bytes | None:
    """The bytes of a regular file, read without blocking on a FIFO; None when it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(fd)


def git_dir(workdir: str) -> str | None:
    """The git dir of the working tree ``workdir`` (its ``.git`` directory, or what its ``.git``
    file names), or None when there is none or ``.git`` is neither a directory nor a plain file."""
    dotgit = os.path.join(workdir, ".git")
    if os.path.isdir(dotgit):
        return dotgit
    data = _read_plain(dotgit)
    if data is None:
        return None
    line = data.decode("utf-8", errors="surrogateescape").strip()
    if not line.startswith("gitdir:"):
        return None
    return os.path.join(workdir, line[len("gitdir:") :].strip())


#: The files a config names, by the config's (path, inode, size, mtime): read once per version.
_NAMED: dict[tuple[str, int, int, int], list[tuple[bytes, str]]] = {}


def _named_files(path: str, st: os.stat_result) -> list[tuple[bytes, str]] | None:
    """(key, path) of each file the config ``path`` names; None when it cannot be read as a file."""
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    found = _NAMED.get(key)
    if found is not None:
        return found
    data = _read_plain(path)
    if data is None:
        return None
    found = []
    import re

    for match in re.compile(_FILE_KEYS, re.IGNORECASE | re.MULTILINE).finditer(data):
        value = match.group(2).strip(b'"')
        if not value:
            continue
        named = os.path.expanduser(os.fsdecode(value))
        if not os.path.isabs(named):
            named = os.path.join(os.path.dirname(path), named)
        found.append((match.group(1).lower(), named))
    if len(_NAMED) > 256:
        _NAMED.clear()
    _NAMED[key] = found
    return found


def config_files_plain(path: str, depth: int = 0) -> bool:
    """True when the config ``path`` and every file it names (includes, followed) are plain."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    named = _named_files(path, st)
    if named is None:
        return False
    for key, other in named:
        if not plain_or_absent(other):
            return False
        nested = key == b"path"
        if nested and (depth >= MAX_INCLUDE_DEPTH or not config_files_plain(other, depth + 1)):
            return False
    return True


#: What an attribute lookup reads of the git dir (the config, for ``core.attributesFile``; the
#: index, for ``.gitattributes`` staged there; alternates, for the blobs a smudge reads).
ATTRIBUTE_FILES = ("config", "index", "info/attributes", "objects/info/alternates")


def repository_plain(workdir: str, names: tuple[str, ...] = GIT_DIR_FILES) -> bool:
    """True when what libgit2 reads to open ``workdir``'s repository, its index and its
    attribute and ignore settings is plain: its ``.git``, the git dir's files
    (``names``: :data:`GIT_DIR_FILES`, and the common dir's when ``commondir`` names one) and the
    files its config names."""
    dotgit = os.path.join(workdir, ".git")
    if not os.path.isdir(dotgit) and not plain_or_absent(dotgit):
        return False
    gdir = git_dir(workdir)
    if gdir is None:
        return True  # no repository: libgit2 reads nothing of it
    dirs = [gdir]
    common = _read_plain(os.path.join(gdir, "commondir"))
    if common is not None and common.strip():
        dirs.append(os.path.join(gdir, os.fsdecode(common.strip())))
    for d in dirs:
        if not all(plain_or_absent(os.path.join(d, name)) for name in names):
            return False
        if not config_files_plain(os.path.join(d, "config")):
            return False
    return True


def path_rules_plain(workdir: str, rel: str, names: tuple[str, ...] = (".gitattributes", ".gitignore")) -> bool:
    """True when the per-directory rule files (``names``) libgit2 reads for ``rel`` are plain: those
    of the working tree's root and of every directory on the way to ``rel``."""
    parts = rel.split("/")[:-1]
    here = workdir
    for i in range(len(parts) + 1):
        if i:
            here = os.path.join(here, parts[i - 1])
        for name in names:
            if not plain_or_absent(os.path.join(here, name)):
                return False
    return True


def tree_rules_plain(workdir: str, names: tuple[str, ...] = (".gitattributes", ".gitignore")) -> str | None:
    """The first rule file (``names``) below ``workdir`` that is not plain, relative; None when all
    are. One walk of the tree (iterative: the agent may nest directories deeper than Python
    recurses), for the paths that read every rule file anyway (a whole status)."""
    stack = [workdir]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            if entry.name in names and not plain_or_absent(entry.path):
                return os.path.relpath(entry.path, workdir)
            try:
                if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
            except OSError:
                continue
    return None


def plain_files_only(git_dir: str) -> bool:
    """True when what libgit2 opens to list refs and walk commits is a regular file (or absent).

    A run's git directory is the agent's to write. A FIFO where ``packed-refs``, a ref or a pack
    should be makes libgit2 block in ``open`` for ever (measured), so ``status`` and ``log`` would
    hang on an agent's say-so; both read paths check this first and report such a directory as
    unreadable. Loose objects are not checked (O(objects)); the walk reads only the agent's commits.
    """
    named = ("HEAD", "config", "commondir", "packed-refs", "logs/refs/stash", "objects/info/alternates")
    paths = [os.path.join(git_dir, n) for n in named]
    for top in ("refs", os.path.join("objects", "pack")):
        for dirpath, dirs, files in os.walk(os.path.join(git_dir, top)):
            paths.extend(os.path.join(dirpath, f) for f in files)
            if any(os.path.islink(os.path.join(dirpath, d)) for d in dirs):
                return False  # a directory of refs somewhere else: not walked, not trusted
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if not stat.S_ISREG(mode):
            return False
    return True
