"""The standard-library ports of ``sandbox/fast`` against their counterparts, side by side (issue 24).

Each port earns its place with a figure from this case, all variants interleaved in one run:

* **gitread** (refs, commits, trees, blobs) against pygit2: the HEAD ref, its commit, the root tree
  and one blob of the generated repository, in a fresh process (imports included: what the fast
  commands pay) and in-process (imports warm, a new repository object each time);
* **revwalk** against pygit2's walker (TOPOLOGICAL | TIME): the whole history of a repository of
  ``HISTORY`` commits, in-process and in a fresh process;
* **pathspec** against git (pygit2 binds no pathspec matching): three pathspecs over every path of
  the tree, in-process against ``git ls-files -- SPECS``;
* **inotify** (one counted instance) against watchdog (the watcher's observer): from nothing to every
  directory of the tree watched, then stopped.

``python3 -c pass`` is the reference of the fresh-process rows; the imports alone are a row of their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

from bench.cases import Context, rotate
from bench.cases.agentgit import T0, _commits, _fast_import
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import run_proc

CASE = "ports"
HISTORY = 2000
SPECS = ["*.py", "dir1*/", ":(exclude)*7*"]
REF = "python3 -c pass (same interpreter)"
GITREAD = "gitread (standard library)"
PYGIT2 = "pygit2"
_done: set[str] = set()

_READ_GITREAD = """
import sys
from sandbox.fast.gitread import Repo
repo = Repo(sys.argv[1])
head = repo.ref("HEAD")
commit = repo.commit(head)
tree = repo.tree(commit.tree)
kind, data = repo.read(sys.argv[2])
assert kind == "blob" and tree
"""
_READ_PYGIT2 = """
import sys
import pygit2
repo = pygit2.Repository(sys.argv[1])
commit = repo.head.peel(pygit2.Commit)
tree = list(commit.tree)
data = repo[sys.argv[2]].data
assert data is not None and tree
"""
_WALK_REVWALK = """
import sys
from sandbox.fast.gitread import Repo
from sandbox.fast.revwalk import Walker
repo = Repo(sys.argv[1])
print(len(Walker(repo).walk([repo.ref("HEAD")], [])))
"""
_WALK_PYGIT2 = """
import sys
import pygit2
repo = pygit2.Repository(sys.argv[1])
walker = repo.walk(repo.head.target, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
print(sum(1 for c in walker if c.message is not None))
"""

_IMPORT_PORTS = "import sandbox.fast.gitread, sandbox.fast.revwalk"


def _read_gitread(git_dir: str, blob: str) -> None:
    from sandbox.fast.gitread import Repo as GitRepo

    repo = GitRepo(git_dir)
    head = repo.ref("HEAD")
    assert head is not None
    repo.tree(repo.commit(head).tree)
    repo.read(blob)
    repo.close()


def _read_pygit2(git_dir: str, blob: str) -> None:
    import pygit2

    repo = pygit2.Repository(git_dir)
    commit = repo.head.peel(pygit2.Commit)
    list(commit.tree)
    _ = repo[blob].data


def _walk_revwalk(git_dir: str) -> int:
    from sandbox.fast.gitread import Repo as GitRepo
    from sandbox.fast.revwalk import Walker

    repo = GitRepo(git_dir)
    head = repo.ref("HEAD")
    assert head is not None
    n = len(Walker(repo).walk([head], []))
    repo.close()
    return n


def _walk_pygit2(git_dir: str) -> int:
    import pygit2

    repo = pygit2.Repository(git_dir)
    walker = repo.walk(repo.head.target, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
    return sum(1 for c in walker if c.message is not None)


def _history(scratch: str) -> str:
    """A repository of ``HISTORY`` commits, one pack (built once per benchmark run)."""
    root = os.path.join(scratch, "ports-history")
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    git(["init", "-q", "-b", "main"], cwd=root)
    _fast_import(os.path.join(root, ".git"), [*_commits("refs/heads/main", 0, HISTORY, None, "user", T0), ""])
    return os.path.join(root, ".git")


def _timed(res: Results, size: int | None, group: str, variant: str, fn: Callable[[], object]) -> None:
    t0 = time.perf_counter()
    fn()
    res.add(CASE, size, group, variant, time.perf_counter() - t0)


def _proc(res: Results, size: int | None, group: str, variant: str, argv: list[str], cwd: str) -> None:
    res.add(CASE, size, group, variant, run_proc(argv, cwd=cwd).seconds, ref=variant == REF)


def run(ctx: Context, repo: Repo) -> None:
    """Reads, pathspecs and watches at every size; the walk once (it follows the history, not the tree)."""
    res = ctx.results
    size = repo.size
    git_dir = os.path.join(repo.path, ".git")
    blob = git(["rev-parse", f"HEAD:{repo.user_edit}"], cwd=repo.path).decode().strip()
    paths = git(["ls-files", "-z"], cwd=repo.path).decode().split("\0")[:-1]
    py = sys.executable
    read_proc = f"HEAD ref + commit + root tree + 1 blob, fresh process ({size} files)"
    read_in = f"HEAD ref + commit + root tree + 1 blob, in-process ({size} files)"
    spec_group = f"3 pathspecs over {len(paths)} paths"
    watch_group = f"watch every directory of the tree ({size} files), then stop"

    from sandbox.fast.inotify import Inotify
    from sandbox.fast.pathspec import Pathspec

    def pathspec_port() -> None:
        spec = Pathspec(SPECS)
        for p in paths:
            spec.matches(p)

    def pathspec_git() -> None:
        subprocess.run(["git", "ls-files", "-z", "--", *SPECS], cwd=repo.path, capture_output=True, check=True)

    def watch_inotify() -> None:
        inotify = Inotify()
        tree = inotify.watch(repo.path)
        assert tree.lost_reason is None, tree.lost_reason
        inotify.unwatch(tree)
        inotify.close()

    def watch_watchdog() -> None:
        # watchdog's public API only (the library no longer uses it): one observer, one recursive watch.
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers.inotify import InotifyObserver

        observer = InotifyObserver()
        observer.schedule(FileSystemEventHandler(), repo.path, recursive=True)
        observer.start()
        observer.stop()
        observer.join()

    variants: list[Callable[[], None]] = [
        lambda: _proc(res, size, read_proc, REF, [py, "-c", "pass"], repo.path),
        lambda: _proc(res, size, read_proc, GITREAD, [py, "-c", _READ_GITREAD, git_dir, blob], repo.path),
        lambda: _proc(res, size, read_proc, PYGIT2, [py, "-c", _READ_PYGIT2, git_dir, blob], repo.path),
        lambda: _timed(res, size, read_in, GITREAD, lambda: _read_gitread(git_dir, blob)),
        lambda: _timed(res, size, read_in, PYGIT2, lambda: _read_pygit2(git_dir, blob)),
        lambda: _timed(res, size, spec_group, "pathspec (standard library, in-process)", pathspec_port),
        lambda: _timed(res, size, spec_group, "git ls-files -- SPECS (process; pygit2 binds none)", pathspec_git),
        lambda: _timed(res, size, watch_group, "inotify (one shared instance, ctypes)", watch_inotify),
        lambda: _timed(res, size, watch_group, "watchdog (an instance per tree)", watch_watchdog),
    ]
    if "walk" not in _done:
        _done.add("walk")
        history = _history(repo.scratch)
        assert _walk_revwalk(history) == _walk_pygit2(history) == HISTORY
        walk_in = f"walk {HISTORY} commits, in-process"
        walk_proc = f"walk {HISTORY} commits, fresh process"
        rw = "revwalk (standard library)"
        imports = "import alone, fresh process"
        variants += [
            lambda: _timed(res, None, walk_in, rw, lambda: _walk_revwalk(history)),
            lambda: _timed(res, None, walk_in, "pygit2 walker", lambda: _walk_pygit2(history)),
            lambda: _proc(res, None, walk_proc, REF, [py, "-c", "pass"], repo.path),
            lambda: _proc(res, None, walk_proc, rw, [py, "-c", _WALK_REVWALK, history], repo.path),
            lambda: _proc(res, None, walk_proc, "pygit2 walker", [py, "-c", _WALK_PYGIT2, history], repo.path),
            lambda: _proc(res, None, imports, REF, [py, "-c", "pass"], repo.path),
            lambda: _proc(res, None, imports, "gitread + revwalk", [py, "-c", _IMPORT_PORTS], repo.path),
            lambda: _proc(res, None, imports, "pygit2", [py, "-c", "import pygit2"], repo.path),
        ]
    for i in ctx.rounds(15, budget=60, minimum=5):
        for fn in rotate(variants, i):
            fn()  # type: ignore[operator]


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """A port is kept where it pays: the fast commands' read (fresh process) must beat pygit2's."""
    out = []
    for size in sizes:
        group = f"HEAD ref + commit + root tree + 1 blob, fresh process ({size} files)"
        ours = results.find(CASE, size, group, GITREAD)
        theirs = results.find(CASE, size, group, PYGIT2)
        name = f"gitread pays at {size} files: its fresh-process read below pygit2's"
        if ours is None or theirs is None:
            out.append(Target(name, "< pygit2", "-", None))
            continue
        a, b = ours.stats.median, theirs.stats.median
        out.append(Target(name, "< pygit2", f"{a * 1000:.1f} ms vs {b * 1000:.1f} ms", a < b))
    return out
