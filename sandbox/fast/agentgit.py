"""What the agent did with the run's own git: evidence for ``sandbox status`` and ``sandbox log``.

A run's git directory is its own (see :mod:`sandbox.store.worktree`), so the agent may commit, branch, tag
and stash freely there; none of it reaches the user's repository. It is evidence all the same: this
module reads it and reports the run's branches, tags, stash entries and the commits the agent made on
top of the snapshot. ``sandbox apply`` still applies files only: the agent's commits are kept in the
run (never removed by apply) until the run is dropped.

The directory is the agent's to write, so it is read with the standard library
(:mod:`sandbox.fast.gitread`, :mod:`sandbox.fast.revwalk`): no file is opened that could block (a
FIFO, a socket, a device), none is read past a bound, every object is checked against its id, and the
walk stops as git's does. Whatever cannot be read makes the whole answer None ("unreadable"), never
a hang or a crash. Both read paths of ``status`` and ``log`` (the full one and
:mod:`sandbox.fast.foldcache`) call :func:`read`, so they show the same thing. Standard library only
(the fast path imports it; an import-linter contract checks it).
"""

from __future__ import annotations

from sandbox.fast.gitread import Repo
from sandbox.fast.odb import GitReadError
from sandbox.fast.revwalk import Walker, reflog_entries, subject
from sandbox.store.gitfiles import plain_files_only
from sandbox.store.layout import run_branch

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)

#: At most this many of the agent's commits are listed (the count is exact up to :data:`MAX_WALK`).
MAX_LISTED = 20
MAX_WALK = 1000
#: git (and libgit2) give up after this many levels of symbolic refs.
_SYMREF_DEPTH = 5


# A named tuple rather than a dataclass: the fast read path imports this module, and dataclasses
# costs it several milliseconds of imports (see sandbox.fast.gitread); typing's NamedTuple for mypy,
# sandbox.fast.records' at run time (typing and collections cost the quick path).
if TYPE_CHECKING:
    from typing import NamedTuple

    from sandbox.fast.foldjson import AgentGitJson

    class _Activity(NamedTuple):
        #: The branch the worktree is on (None: detached), and the commit it points at.
        branch: str | None
        head: str | None
        #: Branches and tags of the run's repository other than its starting branch at the snapshot.
        branches: dict[str, str]
        tags: dict[str, str]
        stash: int
        #: Commits reachable from the run's refs or HEAD and not from the snapshot: (id, subject), newest first.
        commits: list[tuple[str, str]]
        commit_count: int
else:
    from sandbox.fast.records import named_tuple

    _Activity = named_tuple("GitActivity", "branch head branches tags stash commits commit_count", __name__)


class GitActivity(_Activity):
    """The run's own git state, as the agent left it."""

    __slots__ = ()

    @property
    def changed(self) -> bool:
        """True when the agent did anything with git beyond editing files on the starting branch."""
        return bool(self.branches or self.tags or self.stash or self.commits)

    def to_json(self) -> AgentGitJson:
        """Plain JSON data."""
        return {
            "branch": self.branch,
            "head": self.head,
            "branches": self.branches,
            "tags": self.tags,
            "stash": self.stash,
            "commits": [{"id": c, "subject": s} for c, s in self.commits],
            "commit_count": self.commit_count,
        }


def activity(git_dir: str, run_id: str, base: str) -> GitActivity | None:
    """Read the run's own git directory; None when it cannot be read (missing, a legacy run, a file
    that is not a plain file where git keeps refs and packs, see
    :func:`sandbox.store.gitfiles.plain_files_only`, or anything :mod:`sandbox.fast.gitread` and
    :mod:`sandbox.fast.revwalk` refuse to read: a FIFO or a device where an object should be, a
    damaged or oversized object, a format they do not read, a walk past its bound)."""
    if not plain_files_only(git_dir):
        return None
    try:
        repo = Repo(git_dir, mapped=False)  # the agent could truncate a mapped pack: SIGBUS
    except GitReadError:
        return None
    try:
        return _read(repo, run_id, base)
    except (GitReadError, OSError):
        # OSError: HEAD (or the whole directory) is gone, or a file the readers do not wrap cannot be
        # read; libgit2 could not have opened the repository either.
        return None
    finally:
        repo.close()


def read(git_dir: str, run_id: str, base: str) -> AgentGitJson | None:
    """:func:`activity` as JSON data (what ``status --json`` shows), None when unreadable."""
    found = activity(git_dir, run_id, base)
    return None if found is None else found.to_json()


def tips(git_dir: str) -> dict[str, str] | None:
    """The run's own branches and tags (``refs/heads/x``, ``refs/tags/t``), each peeled to its commit, and
    ``HEAD``'s commit when it has one: what travels with ``sandbox push``. None when the directory cannot
    be read (as :func:`activity`: never a hang on a FIFO, never a crash). A ref that does not resolve or
    peel to a commit is skipped, as libgit2 skips it."""
    if not plain_files_only(git_dir):
        return None
    try:
        repo = Repo(git_dir, mapped=False)
    except GitReadError:
        return None
    try:
        walker = Walker(repo)
        out: dict[str, str] = {}
        for name in repo.ref_names("refs/"):
            if name.startswith(("refs/heads/", "refs/tags/")):
                try:
                    oid = repo.ref(name)
                    if oid is not None:
                        out[name] = walker.peel(oid)
                except GitReadError:
                    continue
        try:
            head = _head(repo)[1]
        except GitReadError:
            head = None
        if head is not None:
            out["HEAD"] = head
        return out
    except (GitReadError, OSError):
        return None
    finally:
        repo.close()


def _head(repo: Repo) -> tuple[str | None, str | None]:
    """(branch, commit) of HEAD as libgit2 gives them: the last ref of its symbolic chain (None when
    HEAD is detached), and the id it resolves to, unpeeled (both None when the branch is unborn)."""
    name = "HEAD"
    for _ in range(_SYMREF_DEPTH + 1):
        target = repo.symbolic_target(name)
        if target is None:
            break
        name = target
    else:
        raise GitReadError(f"HEAD is a chain of symbolic refs deeper than {_SYMREF_DEPTH}")
    head = repo.ref(name)
    if head is None:
        if name == "HEAD":
            raise GitReadError("HEAD is missing")
        return None, None  # unborn
    return (None if name == "HEAD" else name.removeprefix("refs/heads/")), head


def _read(repo: Repo, run_id: str, base: str) -> GitActivity:
    start_ref = f"refs/heads/{run_branch(run_id)}"
    branch, head = _head(repo)
    walker = Walker(repo)
    branches: dict[str, str] = {}
    tags: dict[str, str] = {}
    stash = 0
    # In name order, and the walk's tips in that order too (HEAD first): libgit2's order of commits
    # with equal times depends on the order the tips were pushed in.
    tips: list[str] = [head] if head else []
    for name in repo.ref_names("refs/"):
        if not name.startswith(("refs/heads/", "refs/tags/")) and name != "refs/stash":
            continue
        try:
            oid = repo.ref(name)
            if oid is None:
                continue  # a dangling symbolic ref
            target = walker.peel(oid)
        except GitReadError:
            # As libgit2 skips a ref that does not resolve or peel: garbage in the file, a loop of
            # symbolic refs, a ref to a tree, a blob, a missing or damaged object.
            continue
        if name.startswith("refs/heads/"):
            if not (name == start_ref and target == base):
                branches[name.removeprefix("refs/heads/")] = target
            tips.append(target)
        elif name.startswith("refs/tags/"):
            tags[name.removeprefix("refs/tags/")] = target
            tips.append(target)
        else:
            # Listed as stash entries, not walked: a stash is two commits git makes, not the agent's work.
            stash = reflog_entries(repo, "refs/stash")
    tips = list(dict.fromkeys(t for t in tips if t != base))
    commits: list[tuple[str, str]] = []
    count = 0
    for oid in walker.walk(tips, [base])[: MAX_WALK + 1]:
        # pygit2's walk loaded each commit it yielded, the one past MAX_WALK included: one that does
        # not parse (or whose message does not decode) made the whole answer unreadable.
        line = subject(walker.commit_data(oid))
        if count >= MAX_WALK:
            break
        count += 1
        if len(commits) < MAX_LISTED:
            commits.append((oid, line))
    return GitActivity(branch, head, branches, tags, stash, commits, count)
