"""The MCP tools' way into a run's worktree: every path opened beneath it, never through a symlink out.

A tool names a path relative to the worktree (or absolute inside it); :func:`relative` confines it
as the CLI does (:func:`sandbox.store.paths.from_user`) and refuses ``.git``. :func:`open_path`
opens it with :mod:`sandbox.store.beneath` (the kernel refuses a symlink that leads out at any
component, even one a command of the model's made a moment ago), :func:`write_path` writes through
a descriptor of its parent (temporary file and rename there), and :func:`read_fd` reads a regular
file of at most :data:`MAX_READ_BYTES`.
"""

from __future__ import annotations

import os
import stat

from sandbox.errors import PathRefusedError, SandboxError
from sandbox.run.recording import ToolCall
from sandbox.run.run import Run
from sandbox.store import beneath, paths

#: The largest file ``read_file`` and ``edit_file`` read, and ``search`` looks into (bytes).
MAX_READ_BYTES = 10 * 1024 * 1024


def relative(run: Run, path: str) -> str:
    """``path`` as the CLI confines it (:func:`sandbox.store.paths.from_user`), relative."""
    if any(part.lower() == ".git" for part in path.replace("\\", "/").split("/")):
        raise PathRefusedError(f"The path {path!r} is inside .git; the sandbox's tools never read or write there.")
    return paths.from_user(run.worktree, path)


def open_path(run: Run, path: str, flags: int, allow_root: bool = False) -> tuple[str, int]:
    """(relative, descriptor) of a path to read, opened beneath the worktree (:mod:`sandbox.store.beneath`):
    the kernel refuses a symlink that leads out at any component, even one a command of the
    model's made a moment ago; where it landed inside is checked for ``.git``."""
    if allow_root and (path.strip() in ("", ".", "./") or _is_root(run, path)):
        rel = ""
    else:
        rel = relative(run, path)
    root = open_worktree(run)
    try:
        try:
            fd = beneath.open_beneath(root, rel, flags | os.O_NONBLOCK)  # a FIFO must not block us
        except beneath.EscapeError:
            raise PathRefusedError(
                f"The path {path!r} leads out of the worktree through a symlink; it is refused."
            ) from None
        except FileNotFoundError:
            raise SandboxError(f"{rel} does not exist in the worktree; list_files shows what does.") from None
        except NotADirectoryError:
            raise SandboxError(f"{rel or '.'} is not a directory of the worktree.") from None
        except OSError as exc:
            raise SandboxError(f"Cannot open {rel or '.'}: {exc.strerror or exc}.") from None
        inside = beneath.relative(root, fd)
        if inside is None or any(p.lower() == ".git" for p in inside.split("/")):
            os.close(fd)
            raise PathRefusedError(f"The path {path!r} leads into .git through a symlink; it is refused.")
        return inside, fd
    finally:
        os.close(root)


def _is_root(run: Run, path: str) -> bool:
    return os.path.isabs(path) and os.path.realpath(path) == os.path.realpath(run.worktree)


def write_path(run: Run, call: ToolCall | None, rel: str, data: bytes) -> None:
    """Write ``rel`` through a descriptor of its parent opened beneath the worktree (missing
    directories made one at a time, no symlink followed): temporary file and rename there."""
    root = open_worktree(run)
    try:
        try:
            dirfd, name = beneath.open_parent(root, rel, create=True)
        except beneath.EscapeError:
            raise PathRefusedError(
                f"The path {rel!r} goes through a symlink; the sandbox never writes through a symlinked directory."
            ) from None
        except NotADirectoryError:
            raise PathRefusedError(
                f"Cannot write {rel!r}: a parent path is a file, not a directory; delete it first."
            ) from None
    finally:
        os.close(root)
    try:
        mode = 0o644
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise PathRefusedError(f"Cannot write {rel!r}: it is a directory.")
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                mode = 0o755
        except FileNotFoundError:
            pass
        if call is not None:
            call.note_paths([rel])
        try:
            beneath.write_at(dirfd, name, data, mode)
        except OSError as exc:
            raise PathRefusedError(f"Cannot write {rel!r} in the worktree: {exc.strerror or exc}.") from None
    finally:
        os.close(dirfd)


def open_worktree(run: Run) -> int:
    """A descriptor of the run's worktree (the root every path is opened beneath)."""
    try:
        return beneath.open_root(run.worktree)
    except OSError:
        raise SandboxError(
            f"The run's worktree {run.worktree} cannot be opened (was the run dropped?); open another run."
        ) from None


def read_fd(rel: str, fd: int) -> bytes:
    """The bytes of the file open on ``fd`` (closed here): a regular file of at most
    :data:`MAX_READ_BYTES`, else one line saying why not."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SandboxError(f"{rel} is a directory; use list_files to see what is in it.")
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"{rel} is not a regular file.")
        if st.st_size > MAX_READ_BYTES:
            raise SandboxError(
                f"{rel} is {st.st_size} bytes, more than the {MAX_READ_BYTES} read_file reads; "
                "search it, or look at parts of it with run_command (head, sed -n)."
            )
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_READ_BYTES + 1)
    except OSError as exc:
        raise SandboxError(f"Cannot read {rel}: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    if len(data) > MAX_READ_BYTES:  # it grew while we read
        raise SandboxError(f"{rel} is more than the {MAX_READ_BYTES} bytes read_file reads.")
    return data
