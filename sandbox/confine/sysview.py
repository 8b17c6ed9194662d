"""Default deny in the system directories: what other users cannot read is not there, whoever runs the sandbox.

A confined process has no capabilities, but running as root (the host user is root on many servers and in
most containers) it keeps uid 0, so the owner's bits of every root-owned file still apply: ``/etc/shadow``,
``/etc/gshadow``, ``/etc/ssl/private``, ``/etc/sudoers.d``, ssh host keys, debconf's passwords would all be
readable inside. The rule needs no list of names: an entry of a system directory that *others* cannot read
(a file without ``o+r``; a directory without ``o+r`` or without ``o+x``) is not visible inside when the
sandbox's user could read it through its owner or group bits. A file is replaced by an empty one, a
directory by an empty read-only one (:func:`sandbox.confine.verdict.rules` makes the masks). Root inside
then sees what an ordinary user sees. An ordinary user is hidden nothing and walks nothing: what it can
read beyond others (its groups': ``adm``'s logs) it reads outside too, and root's private files it cannot
read anyway. ``allow_read`` naming the path itself shows it.

Where: everything below :data:`SYSTEM_DIRS`, where the system keeps its host-specific files (the FHS
puts those of ``/opt``'s packages in ``/etc/opt`` and ``/var/opt``), and the entries of
:data:`LISTED_DIRS` (one listing each: a private ``/opt/app`` or ``/lost+found``). Not what lies below
``/opt``, ``/srv`` and ``/usr/local`` but ``/usr/local/etc``, nor the rest of ``/usr`` (``/bin``,
``/lib``, ``/sbin``, ``/snap``, ``/nix``): packages' static files, installed readable by all, and where
the directories are (15.7k in ``/usr`` here, 923 in this machine's small ``/opt``): re-validating ``/usr`` alone
took 58 ms a start here. Not the homes, ``/tmp``, ``/run``, ``/media``, ``/mnt``, the shared scratch
directories and the data directory, which are hidden whole. A directory of the user's outside these
(``/data``, ``/work``) is the user's, not the system's: ``deny_read`` masks it. Where a link leads is
checked, not walked.

The walk (~1,200 entries in ``/etc``, ~6.5k and 330 directories in all here) is not paid at every
start. ``<data dir>/system-view.json`` (:class:`sandbox.models.sysview.SystemViewCache`) keeps each
directory walked with its (device, inode, ctime, number of entries), and each entry others cannot read
with its (device, inode, mode, owner, group, ctime) and the directory it was found in. A start
``lstat``s only those: a directory that changed (an entry added, removed or renamed in it, or it
chmod'ed: each changes its ctime) is listed again and a new subdirectory walked; a private entry that
changed (``chmod o+r``) has its directory listed again. A directory whose ctime was less than
:data:`RACY_NS` old when it was listed is listed again at each start until a listing finds it older: a
file created and then made private (``echo > f; chmod 600 f``) is seen although the chmod leaves its
directory as it was. What no directory shows, a file made private in place long after it was made, is
found by the next full walk: the cache is walked afresh when it is older than :data:`MAX_AGE_NS`, and
``sandbox doctor`` always walks. A cache that cannot be read whole, of another version or for other
roots, or not this user's own (owned by it, writable by no one else), is walked afresh too: it never
shows a file (fail closed). It lies in the data directory, which is hidden inside: an agent cannot edit
it (without one, in the repository's ``.git/sandbox``: :func:`cache_in`). Standard library only
(``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sandbox.fast import fastjson

#: The system directories walked whole: where the system keeps its host-specific files.
SYSTEM_DIRS = ("/etc", "/var", "/boot", "/usr/local/etc")
#: Listed, not walked: their own entries are checked (a private ``/opt/app``), not what lies below them.
LISTED_DIRS = ("/", "/opt", "/srv", "/usr/local")
#: The cache's name in the data directory.
CACHE_FILE = "system-view.json"
#: The persisted format (``sandbox.models.FORMAT_VERSION``; a test keeps them equal).
FORMAT_VERSION = 1
#: A directory changed less than this before it was listed is listed again (a chmod may follow the create).
RACY_NS = 60 * 10**9
#: The cache is walked afresh when older (a file made private in place, which changes no directory).
MAX_AGE_NS = 600 * 10**9
#: Never hidden whole (they hold what every program needs).
_ANCHORS = frozenset((*SYSTEM_DIRS, *LISTED_DIRS, "/usr"))
#: Kernel file systems, made anew inside: a link leading there names nothing to hide.
_KERNEL = ("/proc/", "/sys/", "/dev/")


class Private(NamedTuple):
    """A system entry others cannot read: ``path`` (where a link leads, for a link), found in ``via``.
    (A named tuple, not a dataclass: making a dataclass costs every ``sandbox exec`` ~2 ms of import.)"""

    path: str
    via: str
    dev: int
    ino: int
    mode: int
    uid: int
    gid: int
    ctime_ns: int

    def readable_by(self, uid: int, groups: Iterable[int]) -> bool:
        """Whether a process of ``uid`` and ``groups`` without capabilities could read it (or, a
        directory, list or enter it): the owner's bits for its owner, else the group's for its group."""
        bits = self.mode >> 6 if self.uid == uid else self.mode >> 3 if self.gid in groups else self.mode
        return bool(bits & (0o5 if stat.S_ISDIR(self.mode) else 0o4))


class View:
    """The system directories as walked: each directory's (device, inode, ctime, number of entries), the
    entries others cannot read, and the directories changed lately (listed again at each start until
    they are not)."""

    def __init__(self, roots: tuple[str, ...], skip: tuple[str, ...], walked_ns: int = 0) -> None:
        self.roots = roots
        self.skip = skip
        self.walked_ns = walked_ns
        self.dirs: dict[str, tuple[int, int, int, int]] = {}
        self.private: dict[str, Private] = {}
        self.racy: set[str] = set()
        #: This call walked them all afresh.
        self.walked = False
        #: How many directories this call listed.
        self.listed = 0
        #: Something changed that the cache on disk does not say yet.
        self.dirty = False
        #: How many entries the directories that hold private entries have (from the cache, or :attr:`dirs`).
        self.counts: dict[str, int] = {}

    def hidden_for(self, uid: int, groups: Iterable[int]) -> list[str]:
        """The private entries a process of ``uid`` and ``groups`` could read: what to hide from it. A
        directory (below the system directories) more than half of whose entries, at least two, are to
        hide is hidden whole instead (one mount, not one each: ``/var/log`` of a Debian host as root)."""
        own = set(groups)
        paths = sorted(p.path for p in self.private.values() if p.readable_by(uid, own))
        counts = self.counts or {d: known[3] for d, known in self.dirs.items()}
        per_dir: dict[str, list[str]] = {}
        for path in paths:
            per_dir.setdefault(os.path.dirname(path), []).append(path)
        whole = {
            d for d, inside in per_dir.items()
            if len(inside) >= 2 and 2 * len(inside) > counts.get(d, 2 * len(inside)) and d not in _ANCHORS
        }  # fmt: skip
        return [p for p in paths if os.path.dirname(p) not in whole] + sorted(whole)


def roots() -> tuple[str, ...]:
    """The system directories here, where each leads, once each."""
    found = [os.path.realpath(p) for p in SYSTEM_DIRS if os.path.isdir(p)]
    return tuple(dict.fromkeys(p for p in found if p != "/"))


def cache_in(configured: str | None, state_dir: str | None) -> str | None:
    """Where the walk is kept: ``configured`` (in the data directory) where that directory exists, else in
    the repository's sandbox directory ``state_dir`` (hidden inside, as the data directory is). Runs
    started through the library keep their homes in the repository and make no data directory, and no
    cache makes one: without this, each of their confined starts walked the system directories again
    (25-28 ms here)."""
    if configured is not None and os.path.isdir(os.path.dirname(configured)):
        return configured
    if state_dir and os.path.isdir(state_dir):
        return os.path.join(state_dir, CACHE_FILE)
    return configured


def hidden_here(cache: str | None, skip: Sequence[str], *, fresh: bool = False) -> list[str]:
    """What of the system directories this process's user must not see inside (see the module
    docstring), from the cache file ``cache`` (None: walked afresh, nothing kept), re-validated and
    written back when it changed. ``skip``: directories not walked (hidden whole anyway).

    Only for root: an ordinary user inside reads what it reads outside (its groups' files included),
    which is what the rule gives root; nothing is walked for it."""
    if os.geteuid() != 0:
        return []
    view = load(cache, skip, fresh=fresh)
    return view.hidden_for(0, {os.getegid(), *os.getgroups()})


def load(cache: str | None, skip: Sequence[str], *, fresh: bool = False) -> View:
    """The view of the system directories, from ``cache`` re-validated, else walked afresh (``fresh``,
    a cache that cannot be read whole, of another version, for other roots, or too old); written back
    to ``cache`` when it changed."""
    here = roots()
    skipped = tuple(sorted({os.path.realpath(p) for p in skip}))
    now = time.time_ns()
    kept = None if fresh or cache is None else _read(cache, here, skipped, now)
    view = kept[0] if kept else None
    if view is None or kept is None or not _refresh(view, now, kept[1]):
        view = View(here, skipped, walked_ns=now)
        view.walked = view.dirty = True
        _walk(view, "/", now)
    if view.dirty and cache is not None:
        _write(cache, view)
    return view


def directories(cache: str | None) -> int:
    """How many directories the cache ``cache`` says were walked (0: none kept)."""
    kept = _read(cache, roots(), (), time.time_ns(), check_skip=False) if cache else None
    return len(kept[1]) if kept else 0


# -- the walk -------------------------------------------------------------------------------------


def _open_to_others(mode: int) -> bool:
    """Others may read it (a directory: list and enter it)."""
    return mode & 0o005 == 0o005 if stat.S_ISDIR(mode) else bool(mode & 0o004)


def _descend(view: View, path: str) -> bool:
    """Whether ``path`` (a directory open to others) is listed: below a root, on the way to one, or
    one of :data:`LISTED_DIRS`."""
    if path in view.skip:
        return False
    if path in LISTED_DIRS:
        return True
    return any(path == r or path.startswith(r + "/") or r.startswith(path.rstrip("/") + "/") for r in view.roots)


def _walk(view: View, top: str, now: int) -> None:
    """List ``top`` and every directory below it that :func:`_descend` allows."""
    stack = [top]
    while stack:
        stack += _list(view, stack.pop(), now)


def _list(view: View, path: str, now: int) -> list[str]:
    """Record ``path`` (stat first, so that a change while it is listed shows next time) and the entries
    of it others cannot read; the subdirectories to list in turn."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    view.dirs[path] = (st.st_dev, st.st_ino, st.st_ctime_ns, 0)
    if st.st_ctime_ns >= now - RACY_NS:
        view.racy.add(path)
    else:
        view.racy.discard(path)
    view.listed += 1
    below: list[str] = []
    try:
        entries = list(os.scandir(path))
    except OSError:
        return below
    view.dirs[path] = (st.st_dev, st.st_ino, st.st_ctime_ns, len(entries))
    for entry in entries:
        try:
            found = entry.stat(follow_symlinks=False)
            where = entry.path
            if stat.S_ISLNK(found.st_mode):  # where it leads, if that is private (never walked)
                found = os.stat(where)
                if _open_to_others(found.st_mode):
                    continue
                where = os.path.realpath(where)
                if where.startswith(_KERNEL):
                    continue  # made anew inside
                found = os.lstat(where)
            elif stat.S_ISDIR(found.st_mode) and _open_to_others(found.st_mode):
                if _descend(view, where):
                    below.append(where)
                continue
        except OSError:
            continue
        if not _open_to_others(found.st_mode):
            view.private[where] = Private(
                where, path, found.st_dev, found.st_ino, found.st_mode, found.st_uid, found.st_gid, found.st_ctime_ns
            )
    return below


def _refresh(view: View, now: int, rows: Sequence[Sequence[Any]]) -> bool:
    """Bring a view read from the cache (its directories as ``rows``: path, device, inode, ctime) up to
    date: ``lstat`` each directory and private entry, list again what changed (parents first). False
    when it cannot be trusted (walk it afresh)."""
    stale = set(view.racy)
    lstat, isdir, dirname = os.lstat, stat.S_ISDIR, os.path.dirname
    vias, counts = {p.via for p in view.private.values()}, view.counts
    try:
        for path, dev, ino, ctime, count in rows:
            if path in vias:
                counts[path] = count
            try:
                st = lstat(path)  # a path that is not one raises TypeError: walked afresh
            except OSError:
                stale.add(dirname(path))
                continue
            if st.st_ctime_ns != ctime or st.st_ino != ino or st.st_dev != dev:
                stale.add(path)
                if not (isdir(st.st_mode) and _open_to_others(st.st_mode)):
                    stale.add(dirname(path))  # not a directory to walk: its parent says what it is
        for entry in view.private.values():
            try:
                st = lstat(entry.path)
            except OSError:
                stale.add(entry.via)
                continue
            if (st.st_dev, st.st_ino, st.st_ctime_ns) != (entry.dev, entry.ino, entry.ctime_ns):
                stale.add(entry.via)
        if not stale:
            return True
        view.dirs = {path: (dev, ino, ctime, count) for path, dev, ino, ctime, count in rows}
        view.counts = {}
        if "/" not in view.dirs:
            return False
        children: dict[str, list[str]] = {}
        for known in view.dirs:
            children.setdefault(dirname(known), []).append(known)
        for path in sorted(stale, key=lambda p: (p.count("/"), p)):
            if path in view.dirs:  # else gone with its parent's listing, or never walked
                _relist(view, path, children.get(path, []), now)
    except (TypeError, ValueError):  # a cache that says something else than it should
        return False
    return True


def _relist(view: View, path: str, before: Sequence[str], now: int) -> None:
    """List ``path`` again: its private entries anew, new subdirectories walked, gone ones forgotten."""
    old, was_racy = view.dirs.pop(path), path in view.racy
    was = {k: p for k, p in view.private.items() if p.via == path}
    for key in was:
        del view.private[key]
    below = _list(view, path, now)
    if path not in view.dirs:  # gone, or no longer a directory: its parent was listed (or is listed next)
        _forget(view, path)
        view.dirty = True
        return
    if view.dirs[path] != old or was != {k: p for k, p in view.private.items() if p.via == path}:
        view.dirty = True
    elif was_racy != (path in view.racy):
        view.dirty = True  # calm now: trusted from here on
    for child in before:
        if child not in below:
            _forget(view, child)
            view.dirty = True
    for child in below:
        if child not in view.dirs:
            _walk(view, child, now)
            view.dirty = True


def _forget(view: View, path: str) -> None:
    """Drop ``path`` and everything recorded below it."""
    prefix = path.rstrip("/") + "/"
    for key in [k for k in view.dirs if k == path or k.startswith(prefix)]:
        del view.dirs[key]
        view.racy.discard(key)
    for key in [k for k, p in view.private.items() if p.via == path or p.via.startswith(prefix)]:
        del view.private[key]


# -- the cache file -------------------------------------------------------------------------------


def _read(
    cache: str, here: tuple[str, ...], skip: tuple[str, ...], now: int, *, check_skip: bool = True
) -> tuple[View, list[list[Any]]] | None:
    """The view kept in ``cache`` and its directories' rows (made into :attr:`View.dirs` only when one
    changed), or None when it cannot be trusted as a whole."""
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            # Only a cache this user wrote, that no one else can write: what it leaves out is shown to root
            # inside, and the repository's .git (where it lies without a data directory) may be another's.
            st = os.fstat(fh.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
                return None
            data = fastjson.loads(fh.read(64 * 1024 * 1024))
        if data.get("version") != FORMAT_VERSION or tuple(data["roots"]) != here:
            return None
        if check_skip and tuple(data["skip"]) != skip:
            return None
        walked, rows, racy = data["walked_ns"], data["dirs"], data["racy"]
        if type(walked) is not int or not now - MAX_AGE_NS < walked <= now or type(rows) is not list or not rows:
            return None
        if rows[0][0] != "/" or not all(type(p) is str for p in racy):
            return None
        view = View(here, skip, walked_ns=walked)
        view.racy = set(racy)
        for path, via, *numbers in data["private"]:
            if type(path) is not str or type(via) is not str or not all(type(n) is int for n in numbers):
                return None
            view.private[path] = Private(path, via, *numbers)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError):
        return None
    return view, rows


def _write(cache: str, view: View) -> None:
    """Write ``view`` to ``cache`` whole (a temporary file renamed over it); a failure leaves the old one,
    which the next start re-validates as it did this one."""
    data = {
        "version": FORMAT_VERSION,
        "roots": list(view.roots),
        "skip": list(view.skip),
        "walked_ns": view.walked_ns,
        "dirs": [[p, *known] for p, known in sorted(view.dirs.items(), key=lambda item: item[0] != "/")],
        "racy": sorted(view.racy),
        "private": [list(p) for p in view.private.values()],
    }
    if not os.path.isdir(os.path.dirname(cache)):
        return  # the data directory is made by the runs it holds, never for this cache (a HOME of its own)
    tmp = f"{cache}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(fastjson.dumps(data))
        os.replace(tmp, cache)
    except (OSError, UnicodeError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def shared_scratch() -> list[str]:
    """The machine's shared scratch directories directly below ``/`` and ``/var`` but ``/tmp`` (sticky
    and world-writable: ``/var/tmp``, ``/var/crash``): every user's files (editors' swap files, core
    dumps), never the project's. Two listings, no walk."""
    out: list[str] = []
    for root in ("/", "/var"):
        with contextlib.suppress(OSError), os.scandir(root) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if entry.is_dir(follow_symlinks=False) and mode & 0o1002 == 0o1002 and entry.path != "/tmp":
                        out.append(entry.path)
    return out
