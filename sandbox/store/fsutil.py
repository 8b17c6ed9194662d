"""Durable file writes: temp file in the same directory, fsync, rename, fsync the directory."""

from __future__ import annotations

import _thread
import errno
import os
import stat

from sandbox import faults

TYPE_CHECKING = False  # no typing at run time: list and status read disk use on the quick path
if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import ThreadPoolExecutor
    from types import TracebackType

TEMP_PREFIX = ".sandbox-tmp-"


class _suppress:  # noqa: N801  (named as the context manager it stands for)
    """``contextlib.suppress``: contextlib imports collections and functools, which the quick path's
    start does not pay for (:mod:`sandbox.cli.quick`)."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


#: Threads that issue the fsyncs of one phase beside the caller's (made on first use; the quick path's
#: commands never write, so they never import concurrent.futures).
_POOL_GUARD = _thread.allocate_lock()
_POOL_PREFIX = "sandbox-fsync"
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the pid that made it, the pool)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _POOL_GUARD:
        if _pool is None or _pool[0] != os.getpid():  # a forked child has none of its parent's threads
            from concurrent.futures import ThreadPoolExecutor

            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=3, thread_name_prefix=_POOL_PREFIX))
        return _pool[1]


def forkable() -> bool:
    """True when this process may fork a child that goes on in Python and libgit2: it runs its main
    thread alone, apart from the fsync pool's threads, which hold no lock between two
    :func:`sync_together` (each waits for every fsync it gave them) and never call libgit2."""
    import threading

    main = threading.main_thread()
    if threading.current_thread() is not main:
        return False
    return all(t is main or t.name.startswith(_POOL_PREFIX) for t in threading.enumerate())


def sync_together(fds: list[int]) -> None:
    """fsync every descriptor in ``fds`` at once; returns when all are done (the first error raised).

    For writes with no order between them (see :mod:`sandbox.store.durable`): the disk serves
    concurrent fsyncs with one cache flush or one journal commit, not one each.
    """
    if not fds:
        return
    if len(fds) == 1:
        os.fsync(fds[0])
        return
    pool = _executor()
    futures = [pool.submit(os.fsync, fd) for fd in fds[1:]]
    first: BaseException | None = None
    try:
        os.fsync(fds[0])
    except OSError as exc:
        first = exc
    for future in futures:  # every one waited for: a descriptor is never closed under a running fsync
        try:
            future.result()
        except OSError as exc:
            first = first or exc
    if first is not None:
        raise first


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
    return os.path.join(directory, TEMP_PREFIX + os.fsdecode(stem) + "-" + os.urandom(4).hex())


def link_or_copy(src: str, dest: str, tmp: str, *, mode: int | None = None) -> bool:
    """Give the file ``src`` the name ``dest`` too: a hard link, or where the file system refuses one a copy
    (streamed to ``tmp``, synced, ``mode`` set, renamed into place). False when ``dest`` exists already (for
    content-named files, the same content). The caller syncs ``dest``'s directory."""
    try:
        os.link(src, dest)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            raise
    import shutil

    try:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with _suppress(OSError):
            os.unlink(tmp)
        raise
    return True


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
        with _suppress(OSError):
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
        with _suppress(OSError):
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


# -- journaled writes into a working tree ------------------------------------------------------

#: Size of one write(2) of a journaled file write: a large file is written (and can be killed) in pieces.
CHUNK = 1 << 20

#: Fault points inside one journaled file write, in the order they are reached.
WRITE_POINTS = (
    "tree.write.after_create",
    "tree.write.after_chunk",
    "tree.write.after_fsync",
    "tree.write.before_rename",
    "tree.write.after_rename",
    "tree.write.after_dir_fsync",
)
faults.POINTS.update(WRITE_POINTS)


def same_device(a: str, b: str) -> bool:
    """True when directories ``a`` and ``b`` exist on one file system (a rename between them can work)."""
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _usable_temps(path: str, temps: list[str]) -> list[str]:
    directory = os.path.dirname(path) or "."
    return [t for t in temps if same_device(os.path.dirname(t) or ".", directory)]


def replace_file(path: str, data: bytes, temps: list[str], *, create_mode: int, chmod: int | None) -> None:
    """Replace ``path`` with ``data`` through the first of ``temps`` that can be renamed onto it.

    The caller names every temp (a journal lists them before any exists, so a kill at any instant
    leaves nothing nobody knows about). A temp in another file system is skipped; a rename refused
    with EXDEV (a bind mount) falls back to the next temp. ``create_mode`` is given to open(2), so
    the process's umask and the directory's default ACL apply as for any new file (git checkout does
    the same); ``chmod``, when set, is applied as is (an existing file keeps its permissions).
    Written in :data:`CHUNK` pieces with a fault point after each; the file and its directory are
    fsync'd. Readers see the old file or the new one, never a mix.
    """
    _replace_through_temp(path, temps, lambda tmp: _write_temp(tmp, data, create_mode, chmod))


def _write_temp(tmp: str, data: bytes, create_mode: int, chmod: int | None) -> None:
    with _suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a killed earlier attempt of the same journal
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, create_mode & 0o777)
    try:
        faults.point("tree.write.after_create")
        view = memoryview(data)
        offset = 0
        while True:
            end = min(offset + CHUNK, len(view))
            while offset < end:
                offset += os.write(fd, view[offset:end])
            faults.point("tree.write.after_chunk")
            if offset >= len(view):
                break
        if chmod is not None:
            os.fchmod(fd, chmod & 0o7777)
        os.fsync(fd)
        faults.point("tree.write.after_fsync")
    finally:
        os.close(fd)


def replace_symlink(path: str, target: str, temps: list[str]) -> None:
    """Replace ``path`` with a symlink to ``target`` through the first usable ``temps`` (as :func:`replace_file`)."""
    _replace_through_temp(path, temps, lambda tmp: _make_symlink(tmp, target))


def _make_symlink(tmp: str, target: str) -> None:
    with _suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    faults.point("tree.write.after_create")


def _replace_through_temp(path: str, temps: list[str], make: Callable[[str], None]) -> None:
    """Make the new ``path`` at the first usable temporary (``make``), rename it over ``path``, sync
    the directory; the next candidate is tried only when the rename crosses file systems (EXDEV)."""
    candidates = _usable_temps(path, temps)
    if not candidates:
        raise OSError(errno.EXDEV, "no temporary location on the same file system", path)
    for i, tmp in enumerate(candidates):
        try:
            make(tmp)
            faults.point("tree.write.before_rename")
            os.replace(tmp, path)
        except OSError as exc:
            with _suppress(OSError):
                os.unlink(tmp)
            if exc.errno == errno.EXDEV and i + 1 < len(candidates):
                continue
            raise
        except BaseException:
            with _suppress(OSError):
                os.unlink(tmp)
            raise
        break
    faults.point("tree.write.after_rename")
    fsync_dir(os.path.dirname(path) or ".")
    faults.point("tree.write.after_dir_fsync")


def disk_usage(path: str) -> int:
    """Bytes used by the files below ``path`` (links not followed)."""
    return disk_usage_upto(path, None)[0]


def disk_usage_upto(path: str, max_entries: int | None) -> tuple[int, bool]:
    """(bytes used by the files below ``path``, True), links not followed, a file with several hard
    links below ``path`` counted once (as ``du``); when there are more than ``max_entries`` entries
    (None: no bound), the bytes of the first ``max_entries`` and False; False too when a directory
    could not be read (a path longer than PATH_MAX, no permission): the figure is then a lower bound.

    Walked with a stack, not ``os.walk``: that recurses per level (before Python 3.12), and an
    agent may nest its worktree's directories deeper than Python recurses. Each directory is read
    entry by entry: the bound holds inside one directory of millions too.
    """
    total = seen = 0
    complete = True
    linked: set[tuple[int, int]] = set()
    stack = [path]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except FileNotFoundError:
            continue  # removed meanwhile: nothing left to count
        except OSError:
            complete = False
            continue
        with it:
            for entry in it:
                seen += 1
                if max_entries is not None and seen > max_entries:
                    return total, False
                with _suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if st.st_nlink > 1:
                        if (st.st_dev, st.st_ino) in linked:
                            continue
                        linked.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total, complete


def human_size(n: int) -> str:
    """Bytes as a short human string ("512 B", "1.5 KiB"), as the CLI and ``sandbox ui`` show a size."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str) -> None:
    """Remove the directory ``path`` and everything below it, as ``shutil.rmtree(path,
    ignore_errors=True)`` does, making the agent's read-only directories writable on the way.

    Iterative, not recursive: ``shutil.rmtree`` (and ``os.walk`` before Python 3.12) recurse per
    directory level, and an agent may nest directories deeper than Python recurses (measured:
    1,500 levels made ``drop`` and ``gc`` end in a RecursionError). Like ``shutil.rmtree`` it works
    through directory descriptors opened without following symlinks, one open at a time, so an
    agent that swaps a directory for a symlink meanwhile cannot lead it outside. Errors are
    ignored: what could not be removed stays.
    """
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    names: list[str] = []  # the directories descended into, from ``path``
    #: Each of those directories' parent, as (device, inode): going back up through ``..`` must land
    #: there, or an agent moved the directory meanwhile and ``..`` now leads elsewhere (above the tree).
    parents: list[tuple[int, int]] = []
    stuck: set[tuple[int, int]] = set()  # directories that could not be removed: not entered again
    try:
        while True:
            with _suppress(OSError):
                os.fchmod(fd, 0o700)  # an agent's read-only directory: its entries must be removable
            child = None
            try:
                entries = list(os.scandir(fd))
            except OSError:
                entries = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if is_dir and (entry.stat(follow_symlinks=False).st_dev, entry.inode()) in stuck:
                        continue
                except OSError:
                    continue
                if not is_dir:
                    with _suppress(OSError):
                        os.unlink(entry.name, dir_fd=fd)
                    continue
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:  # swapped for a symlink or a file meanwhile: remove that instead
                    with _suppress(OSError):
                        os.unlink(entry.name, dir_fd=fd)
                    continue
                names.append(entry.name)
                mine = os.fstat(fd)
                parents.append((mine.st_dev, mine.st_ino))
                break
            if child is not None:
                os.close(fd)
                fd = child
                continue
            if not names:
                break
            here = os.fstat(fd)
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            up = os.fstat(fd)
            if (up.st_dev, up.st_ino) != parents.pop():
                break  # moved while being removed: what is left stays, nothing above the tree is touched
            try:
                os.rmdir(names.pop(), dir_fd=fd)
            except OSError:
                stuck.add((here.st_dev, here.st_ino))
    finally:
        os.close(fd)
    with _suppress(OSError):
        os.rmdir(path)
