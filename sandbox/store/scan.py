"""Finding the paths that may differ between a worktree and the run's head, without a watcher.

This is the fallback when no watcher can vouch for a call (none running, or its queue overflowed).
It must be correct, not fast: every path where the worktree may differ from the run's head is
returned, and :mod:`sandbox.store.capture` confirms each one by content hash.

It asks libgit2 for the worktree's status (index vs. files, with the index's stat cache, and
untracked files not ignored) and adds the paths where the worktree's own HEAD tree differs from the
run's head tree.
Together these cover every difference even after the agent ran ``git commit``, ``git add`` or
``git reset`` in the worktree. git's own status is about twice as fast on large trees, but it
would run commands from the agent's git config in the sandbox's process (see :func:`candidates`).
"""

from __future__ import annotations

import os

import pygit2
from pygit2.enums import DiffOption


def candidates(repo: pygit2.Repository, worktree: str, run_head_tree: str | None, *, worker: bool = False) -> set[str]:
    """Every path that may differ between the files of ``worktree`` and ``run_head_tree``; with
    ``worker``, libgit2's status runs in a child process (:func:`status_paths_in_worker`)."""
    status = status_paths_in_worker(worktree) if worker else status_paths(worktree)
    return status | head_paths(repo, worktree, run_head_tree)


def status_paths(worktree: str) -> set[str]:
    """The paths libgit2's status of ``worktree`` names (modified, untracked not ignored, staged).

    It reads the worktree's files through a repository object of its own, never the caller's (the
    host runs it outside the lock its runs share: :mod:`sandbox.store.preread`).
    """
    from sandbox.errors import SandboxError
    from sandbox.store import gitfiles

    out: set[str] = set()
    # A status reads every ignore and attributes file and the git dir's: one that the agent made a
    # FIFO (or a link to one) would block libgit2 for ever (sandbox.store.gitfiles).
    gdir = gitfiles.git_dir(worktree)
    odd = None if gitfiles.repository_plain(worktree) else ".git (or a file it names)"
    if odd is None and gdir is not None and not gitfiles.plain_files_only(gdir):  # its HEAD, refs, packs
        odd = f"a file of its git directory {gdir} (HEAD, a ref or a pack)"
    odd = odd or gitfiles.tree_rules_plain(worktree)
    if odd is not None:
        raise SandboxError(
            f"Cannot read the status of the worktree {worktree}: {odd} is not a regular file; remove it, "
            "then try again."
        )
    # libgit2, not the git command: the worktree's git dir is the agent's to write, and git would
    # run commands named there (core.fsmonitor, filter drivers, a redirected commondir's config)
    # in this process, outside the agent's confinement. libgit2 runs none. It is about 2x slower
    # than git's status on large trees (docs/design.md); this is the fallback path.
    # Its status, as two diffs that treat submodules as unmodified: libgit2's status opens every
    # nested repository the index names (an agent's `git init sub; git add sub`) and reads its
    # config, following `include.path` to any file: a FIFO there blocked it for ever, holding the GIL.
    flags = DiffOption.IGNORE_SUBMODULES | DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
    try:
        wt = pygit2.Repository(worktree)
        index = wt.index
        diffs = [index.diff_to_workdir(flags)]
        if not wt.head_is_unborn:
            diffs.append(index.diff_to_tree(wt.head.peel(pygit2.Tree), flags))
    except (pygit2.GitError, KeyError) as exc:
        raise SandboxError(f"Cannot read the status of the worktree {worktree} ({exc}).") from None
    for diff in diffs:
        for delta in diff.deltas:
            for path in {delta.old_file.path, delta.new_file.path}:
                if not _is_submodule(worktree, path):
                    out.add(path)
                elif os.path.lexists(os.path.join(worktree, path, ".git")):
                    # A repository of the agent's own (`git init sub`, staged or not): capture records
                    # nothing of it and names it in the call (sandbox.store.capture).
                    out.add(path.rstrip("/"))
    return out


#: Seconds the worker of :func:`status_paths_in_worker` may take before it is killed.
WORKER_DEADLINE = 120.0
_PR_SET_PDEATHSIG = 1

_WORKER = """
import sys
from sandbox.store import scan
sys.stdout.buffer.write(scan._answer(sys.argv[1]))
"""


def status_paths_in_worker(worktree: str, deadline: float | None = None, *, fork: bool | None = None) -> set[str]:
    """:func:`status_paths` in a child process, killed after ``deadline`` seconds (:data:`WORKER_DEADLINE`).

    libgit2 opens the files whose stat changed by name and holds Python's lock while it reads: a file
    the agent swaps for a FIFO at that moment blocks it, and in the host that would stop every run.
    In a child, it costs this call only: it ends failed with the reason.

    The child is a fork of this process when it has one thread (a command: ``exec``, ``resume``; the
    idle fsync pool aside: :func:`sandbox.store.fsutil.forkable`): pygit2 is imported already, about
    6 ms of CPU for a small worktree against 95 ms for a fresh interpreter. A process with threads (the
    host, the MCP server) starts a fresh one: a fork there could inherit a lock another thread held.
    ``fork`` forces one way (tests).
    """
    import json
    import sys

    from sandbox.errors import SandboxError
    from sandbox.store import fsutil

    deadline = WORKER_DEADLINE if deadline is None else deadline
    if fork is None:
        fork = sys.platform.startswith("linux") and fsutil.forkable()
    try:
        out, detail = _forked(worktree, deadline) if fork else _execed(worktree, deadline)
    except TimeoutError:
        raise SandboxError(
            f"Reading the status of the worktree {worktree} took more than {deadline:g} s (a file there "
            "blocks it, such as a FIFO); remove it in the worktree, then try again."
        ) from None
    try:
        answer = json.loads(out)
    except ValueError:
        raise SandboxError(f"Cannot read the status of the worktree {worktree} ({detail}).") from None
    if "error" in answer:
        raise SandboxError(str(answer["error"]))
    if "failed" in answer:
        raise SandboxError(f"Cannot read the status of the worktree {worktree} ({answer['failed']}).")
    return {str(p) for p in answer["paths"]}


def _execed(worktree: str, deadline: float) -> tuple[bytes, str]:
    """The worker as a fresh interpreter: (its answer, what its failure said)."""
    import subprocess
    import sys

    argv = [sys.executable, "-c", _WORKER, worktree]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=deadline, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TimeoutError from None
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
    return proc.stdout, tail[0] if tail else f"exit {proc.returncode}"


def _forked(worktree: str, deadline: float) -> tuple[bytes, str]:
    """The worker as a fork of this one-thread process: (its answer, what its failure said).

    The child holds copies of this process's descriptors (a run's lock among them): it dies with this
    process (``PR_SET_PDEATHSIG``), so a child blocked on a FIFO never outlives a killed parent.
    """
    import ctypes
    import json
    import select
    import signal
    import time

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, then leave without this process's exit handlers
        code = 1
        try:
            os.close(read_end)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
                os._exit(1)  # the parent died already (or cannot be followed): nobody reads the answer
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            try:
                data = _answer(worktree)
            except Exception as exc:  # noqa: BLE001 - said to the parent, as a fresh worker's last line
                data = json.dumps({"failed": f"{type(exc).__name__}: {exc}"}).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    until = time.monotonic() + deadline
    poller = select.poll()  # not select(): a long-lived process may hold descriptors above FD_SETSIZE
    poller.register(read_end, select.POLLIN)
    try:
        while True:
            left = until - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                raise TimeoutError
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:  # its deadline, or this process interrupted (Ctrl-C): the child goes first
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read_end)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped by someone else (SIGCHLD ignored): its answer says enough
            status = 0
    return b"".join(chunks), f"exit {os.waitstatus_to_exitcode(status)}"


def _answer(worktree: str) -> bytes:
    """What the worker says: the paths, or the sentence of the error that stopped it."""
    import json

    from sandbox.errors import SandboxError

    try:
        answer: dict[str, object] = {"paths": sorted(status_paths(worktree))}
    except SandboxError as exc:
        answer = {"error": exc.message}
    return json.dumps(answer).encode()


def head_paths(repo: pygit2.Repository, worktree: str, run_head_tree: str | None) -> set[str]:
    """The paths where the worktree's own HEAD tree (the agent may commit) differs from the run's head."""
    from sandbox.store import objects  # not at the top: the status worker starts without the models (0.3 s)

    out: set[str] = set()
    wt, wt_head_tree = _worktree_head_tree(worktree)
    if wt_head_tree != run_head_tree:
        # A commit the agent made in the run is in the run's own object store, which reaches the
        # user's store through its alternates; anything else is read (verified) from the user's.
        source = repo if wt is None or wt_head_tree is None or repo.odb.exists(wt_head_tree) else wt
        for change in objects.diff_trees(source, wt_head_tree, run_head_tree):
            out.add(change.path)
    return out


def _is_submodule(worktree: str, path: str) -> bool:
    full = os.path.join(worktree, path)
    return os.path.isdir(full) and not os.path.islink(full)  # status names files; a directory is a gitlink


def _worktree_head_tree(worktree: str) -> tuple[pygit2.Repository | None, str | None]:
    try:
        wt = pygit2.Repository(worktree)
        if wt.head_is_unborn:
            return wt, None
        return wt, str(wt.head.peel(pygit2.Tree).id)
    except (pygit2.GitError, KeyError):
        return None, None
