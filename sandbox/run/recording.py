"""Recording one tool call in-process: ``with run.tool_call(...) as call:``.

The ``started`` event is durable before the body runs. Inside, the write helpers change files in
the worktree (confined to it, atomic per file) and remember exactly which paths they touched, so
the finish costs O(touched paths). Changes made by other means (a subprocess, the agent itself) are
learnt from a watcher when one is given and can vouch for the call, else from a scan. Leaving the
block records ``succeeded``; an exception records ``failed`` and is re-raised.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

from sandbox.errors import PathRefusedError
from sandbox.models import CallStatus, LedgerEntry
from sandbox.run import calls
from sandbox.run.callspec import CallOptions
from sandbox.run.core import RunCore
from sandbox.run.output import Tail
from sandbox.store import agentread, fsutil, objects, paths

F = TypeVar("F", bound=Callable[..., Any])


class PathsSeen(Protocol):
    """What a call needs of a watcher: the paths changed
    since the last time it was asked, or None when it cannot vouch for them (then a scan tells)."""

    def take(self) -> set[str] | None:
        """The paths seen since the last ``take``, or None."""
        ...


def _os_errors_refused(func: F) -> F:
    """Turn an OS error of a write helper (read-only file, full disk) into one clear refusal."""

    @functools.wraps(func)
    def wrapper(self: ToolCall, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(self, *args, **kwargs)
        except OSError as exc:
            target = exc.filename if exc.filename else (args[0] if args else "")
            name = os.fsdecode(target) if target else ""
            # A full disk names no file: then the helper's own (worktree-relative) path is the one.
            where = os.path.relpath(name, self.run.worktree) if os.path.isabs(name) else name or "the worktree"
            raise PathRefusedError(f"Cannot {func.__name__} {where!r} in the worktree: {exc.strerror or exc}.") from exc

    return cast(F, wrapper)


class ToolCall:
    """One recorded call. Use as a context manager; see :meth:`sandbox.run.run.Run.tool_call`."""

    def __init__(
        self,
        run: RunCore,
        tool_name: str,
        input: Any = None,
        options: CallOptions | None = None,
        *,
        watcher: PathsSeen | None = None,
    ) -> None:
        self.run = run
        self.tool_name = tool_name
        self.input = input
        self.options: CallOptions = options if options is not None else {}
        self.watcher = watcher
        self.call_id: str | None = None
        self.touched: set[str] = set()
        self.unknown_changes = False
        self.result: Any = None
        #: Set to an error summary to record the call as failed without raising.
        self.failed_with: str | None = None
        #: The tails of the streams the call's command wrote (:mod:`sandbox.run.output`), kept with it.
        self.output: dict[str, Tail] = {}
        self.entry: LedgerEntry | None = None

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> ToolCall:
        if self.watcher is not None:
            self.watcher.take()  # forget what happened before this call
        self.call_id = calls.start_call(self.run, self.tool_name, self.input, self.options)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.call_id is not None
        status = CallStatus.succeeded if exc_type is None and not self.failed_with else CallStatus.failed
        error = self.failed_with if exc is None else f"{type(exc).__name__}: {exc}"
        try:
            self.entry = calls.finish_call(
                self.run,
                self.call_id,
                status,
                paths=self.candidates(),
                result=self.result,
                error=error,
                output=self.output,
            )
        except calls.RecordingFailedError:
            if exc is None:
                raise
            # The body's own error says what went wrong (the worktree removed under it, say); the call
            # ended failed with why its changes were not recorded, and that error goes on.

    def candidates(self) -> set[str] | None:
        """The paths to compare at finish, or None when only a scan can tell."""
        if not self.unknown_changes:
            return set(self.touched)
        if self.watcher is not None:
            seen = self.watcher.take()
            if seen is not None:
                return set(self.touched) | set(seen)
        return None

    # -- helpers -------------------------------------------------------------------------------

    def _target(self, path: str) -> tuple[str, str]:
        rel, full = paths.confined(self.run.worktree, path)
        self._refuse_inside_submodule(rel)
        for hook in self.run.before_write_hooks:
            hook(self.run, rel)
        return rel, full

    def _refuse_inside_submodule(self, rel: str) -> None:
        # A submodule is a gitlink in the run's tree: writing below it would silently replace the
        # submodule with a directory in the agent's patch. O(depth) tree reads.
        parts = rel.split("/")
        if len(parts) < 2:
            return
        tree = objects.commit_tree(self.run.repo, self.run.head())
        for i in range(1, len(parts)):
            entry = objects.lookup(self.run.repo, tree, "/".join(parts[:i]))
            if entry is None or entry.mode == objects.MODE_GITLINK:
                if entry is not None:
                    raise PathRefusedError(
                        f"Cannot write {rel!r}: {'/'.join(parts[:i])!r} is a submodule, which the sandbox "
                        "records only as a gitlink; change the submodule in its own repository."
                    )
                return
            if not entry.is_tree:
                return

    def _ensure_parent(self, rel: str, full: str) -> None:
        # One directory at a time below the worktree, never the worktree itself (no makedirs): a write
        # racing a drop must not make the removed run's home again, which nothing would then remove.
        current = self.run.worktree
        for name in rel.split("/")[:-1]:
            current = os.path.join(current, name)
            try:
                os.mkdir(current)
            except FileExistsError:
                if not os.path.isdir(current):
                    raise PathRefusedError(
                        f"Cannot write {rel!r}: a parent path is a file, not a directory; delete it first."
                    ) from None
            except NotADirectoryError:
                raise PathRefusedError(
                    f"Cannot write {rel!r}: a parent path is a file, not a directory; delete it first."
                ) from None
            except FileNotFoundError:
                raise PathRefusedError(
                    f"Cannot write {rel!r}: the run's worktree {self.run.worktree} no longer exists "
                    "(was the run dropped?)."
                ) from None

    @_os_errors_refused
    def write(self, path: str, data: bytes | str, *, executable: bool | None = None) -> str:
        """Write a file atomically (keeps the current executable bit unless told); returns its path."""
        rel, full = self._target(path)
        if isinstance(data, str):
            data = data.encode()
        self._ensure_parent(rel, full)
        mode = 0o644
        try:
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                raise PathRefusedError(f"Cannot write {rel!r}: it is a directory.")
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                mode = 0o755
        except FileNotFoundError:
            pass
        if executable is not None:
            mode = 0o755 if executable else 0o644
        self.touched.add(rel)
        fsutil.atomic_write(full, data, mode, sync=False)
        return rel

    @_os_errors_refused
    def symlink(self, path: str, target: str) -> str:
        """Make ``path`` a symlink to ``target`` (the link is stored, never followed)."""
        rel, full = self._target(path)
        self._ensure_parent(rel, full)
        self.touched.add(rel)
        fsutil.atomic_symlink(full, target, sync=False)
        return rel

    @_os_errors_refused
    def delete(self, path: str) -> str:
        """Delete a file, symlink or directory tree."""
        rel, full = self._target(path)
        self.touched.add(rel)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            fsutil.remove_path(full, sync=False)
        fsutil.prune_empty_dirs(self.run.worktree, os.path.dirname(rel))
        return rel

    @_os_errors_refused
    def rename(self, src: str, dst: str) -> str:
        """Rename a file or directory inside the worktree."""
        rel_src, full_src = self._target(src)
        rel_dst, full_dst = self._target(dst)
        if not os.path.lexists(full_src):
            raise PathRefusedError(f"Cannot rename {rel_src!r}: it does not exist.")
        self._ensure_parent(rel_dst, full_dst)
        self.touched.update((rel_src, rel_dst))
        os.replace(full_src, full_dst)
        fsutil.prune_empty_dirs(self.run.worktree, os.path.dirname(rel_src))
        return rel_dst

    @_os_errors_refused
    def chmod(self, path: str, executable: bool) -> str:
        """Set or clear a file's executable bit (the only mode git stores)."""
        rel, full = self._target(path)
        st = os.lstat(full)
        if not stat.S_ISREG(st.st_mode):
            raise PathRefusedError(f"Cannot chmod {rel!r}: it is not a regular file.")
        self.touched.add(rel)
        os.chmod(full, (st.st_mode | 0o111) if executable else (st.st_mode & ~0o111))
        return rel

    @_os_errors_refused
    def read(self, path: str) -> bytes:
        """Read a file of the worktree (confined like writes)."""
        rel, _full = paths.confined(self.run.worktree, path)
        # By a descriptor of the worktree, never by name: the agent may swap the file for a link to a
        # secret or a FIFO between the check above and the open (sandbox.store.agentread).
        limit = self.run.max_read_bytes()
        return agentread.read_path(
            self.run.worktree, os.path.join(self.run.worktree, rel), limit=limit or agentread.DEFAULT_LIMIT
        )

    def note_paths(self, changed: Iterable[str]) -> None:
        """Tell the call about paths changed by other means (checked by hash at finish)."""
        for p in changed:
            self.touched.add(paths.normalize(p))

    def note_unknown_changes(self) -> None:
        """Say that files may have changed by other means: the watcher (or a scan) will tell."""
        self.unknown_changes = True

    def shell(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """Run a command in the worktree as part of this call; its file changes are captured."""
        self.note_unknown_changes()
        return subprocess.run(list(argv), cwd=self.run.worktree, check=False, **kwargs)
