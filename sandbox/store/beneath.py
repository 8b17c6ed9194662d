"""Opening paths beneath a directory, never leaving it, whatever a concurrent writer does meanwhile.

Checking a path (``realpath``, ``lstat`` of each parent) and then opening it is a race: between
the two a process that can write the directory (an agent, in its own worktree) turns a directory
on the way into a symlink to ``/``, and the open follows it. The unconfined ``sandbox mcp`` server
reads and writes a run's worktree for the model while the model's own commands run there, so it
opens every path relative to a descriptor of the worktree and lets the kernel refuse the escape:

* ``openat2(2)`` (Linux 5.6+) with ``RESOLVE_BENEATH``: one call; a symlink (or ``..``) that would
  resolve outside the directory fails with ``EXDEV``, at any component, atomically with the walk;
  ``RESOLVE_NO_MAGICLINKS`` refuses ``/proc/self/fd``-style links. Symlinks that stay inside are
  followed, so a caller that forbids some places inside (``.git``) checks where the descriptor
  landed (:func:`relative`).
* Elsewhere, a walk one component at a time, each opened with ``O_NOFOLLOW`` relative to the
  descriptor of the one before: stricter (no symlink is followed at all), and as race-free.

Writers get the descriptor of the parent directory (:func:`open_parent`, which makes missing
directories one at a time without following a symlink) and write a temporary file there, renamed
over the name inside the same directory (:func:`write_at`).

Standard library only (``ctypes`` for the system call Python does not wrap).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
#: ``openat2`` has the same number on every architecture that gained it after the y2038 rework.
_SYS_OPENAT2 = 437 if os.uname().machine in ("x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x") else None


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class EscapeError(OSError):
    """The path leads out of the directory (through a symlink, or ``..`` at its top)."""


_syscall = None
#: None until first used; then whether the kernel has ``openat2`` (ENOSYS under old kernels or
#: seccomp filters that refuse it: then the component walk).
_HAVE_OPENAT2: bool | None = None


def openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """``openat2(2)``: ``path`` opened relative to ``dirfd`` under the ``RESOLVE_*`` flags ``resolve``."""
    global _syscall
    if _syscall is None:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.syscall
        func.restype = ctypes.c_long
        func.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
        _syscall = func
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    for _ in range(16):  # EAGAIN: a rename raced a ".." on the way; the kernel asks to try again
        fd = int(_syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def has_openat2() -> bool:
    """True when this kernel (and any seccomp filter around us) lets ``openat2`` run."""
    global _HAVE_OPENAT2
    if _HAVE_OPENAT2 is None:
        if _SYS_OPENAT2 is None:
            _HAVE_OPENAT2 = False
        else:
            try:
                os.close(openat2(-100, "/", os.O_PATH | os.O_DIRECTORY, 0, RESOLVE_BENEATH))  # AT_FDCWD
                _HAVE_OPENAT2 = True
            except OSError as exc:
                _HAVE_OPENAT2 = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)
    return _HAVE_OPENAT2


def open_root(path: str) -> int:
    """A descriptor of the directory ``path`` (itself not a symlink) to open paths beneath."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise EscapeError(errno.EXDEV, "the path climbs out with '..'", rel)
    return parts


def open_beneath(root: int, rel: str, flags: int = os.O_RDONLY, mode: int = 0, *, walk: bool | None = None) -> int:
    """Open ``rel`` (relative, ``/``-separated; "" is the directory itself) beneath the directory ``root``.

    :class:`EscapeError` when it would lead out (a symlink at any component, with ``openat2``
    only one that points outside); other ``OSError``s as ``open`` raises them. ``walk`` forces
    (True) or forbids (False) the component walk; None picks ``openat2`` when the kernel has it.
    """
    parts = _parts(rel)
    use_walk = (not has_openat2()) if walk is None else walk
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=root)
    if not use_walk:
        try:
            return openat2(root, "/".join(parts), flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise EscapeError(errno.EXDEV, "the path leads out through a symlink", rel) from None
            if exc.errno == errno.ELOOP:  # a magic link, a loop, or a last symlink under O_NOFOLLOW
                raise EscapeError(errno.ELOOP, "the path goes through a link that is not followed", rel) from None
            raise
    fd = open_dir(root, "/".join(parts[:-1]), create=False)
    try:
        return _open_last(fd, parts[-1], flags, mode, rel)
    finally:
        os.close(fd)


def _open_last(dirfd: int, name: str, flags: int, mode: int, rel: str) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(dirfd, name)):
            raise EscapeError(errno.ELOOP, "the path is a symlink, which is not followed", rel) from None
        raise


def _is_link(dirfd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(root: int, rel: str, *, create: bool = False, dir_mode: int = 0o777) -> int:
    """A descriptor of the directory ``rel`` beneath ``root``, walked one component at a time with
    ``O_NOFOLLOW`` (a symlink on the way is :class:`EscapeError`, never followed); missing
    directories are made one at a time when ``create``."""
    current = os.dup(root)
    try:
        for name in _parts(rel):
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_mode, dir_fd=current)
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(current, name):
                    raise EscapeError(
                        errno.ELOOP, f"{name!r} on the way is a symlink, which is not followed", rel
                    ) from None
                raise
            os.close(current)
            current = nxt
        return current
    except BaseException:
        os.close(current)
        raise


def open_parent(root: int, rel: str, *, create: bool = True) -> tuple[int, str]:
    """(descriptor of the parent directory of ``rel`` beneath ``root``, the last name); see :func:`open_dir`."""
    parts = _parts(rel)
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the path names the directory itself", rel)
    return open_dir(root, "/".join(parts[:-1]), create=create), parts[-1]


def write_at(dirfd: int, name: str, data: bytes, mode: int = 0o644, *, sync: bool = False) -> None:
    """Replace ``name`` in the directory ``dirfd`` with ``data``: a temporary file written there and
    renamed over it (a symlink at ``name`` is replaced, never followed). ``sync``: the file fsynced
    before the rename and the directory after it, so the new file survives a power cut."""
    tmp = f".{name[:180]}.{os.urandom(4).hex()}.sandbox-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o777, dir_fd=dirfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode & 0o7777)
            if sync:
                os.fsync(fh.fileno())
        os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dirfd)
        raise
    if sync:
        os.fsync(dirfd)


def write_beneath(root: str, rel: str, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace the file ``rel`` beneath the directory ``root`` (a worktree, an agent home: a tree the
    agent writes) with ``data``, by descriptor only: each directory on the way opened ``O_NOFOLLOW``
    relative to the one before (missing ones made one at a time), the temporary file made and
    renamed relative to the last (:func:`write_at`). A directory the agent turns into a symlink at
    any moment is refused (:class:`EscapeError`), never written through. ``root`` itself is the
    sandbox's, taken as the host names it (its real path)."""
    top = open_root(os.path.realpath(root))
    try:
        dirfd, name = open_parent(top, rel, create=True)
    finally:
        os.close(top)
    try:
        write_at(dirfd, name, data, mode, sync=sync)
    finally:
        os.close(dirfd)


def relative(root: int, fd: int) -> str | None:
    """Where ``fd`` lies below ``root`` ("" for the root itself), from the kernel's own record of
    both; None when it does not lie below (moved away since, or on a path the kernel cannot name)."""
    try:
        top = os.readlink(f"/proc/self/fd/{root}")
        here = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if here == top:
        return ""
    if top == "/":
        return here[1:]
    if not here.startswith(top + "/") or here.endswith(" (deleted)"):
        return None
    return here[len(top) + 1 :]
