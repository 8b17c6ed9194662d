"""What the agent did with the run's own git: evidence for ``sandbox status``.

A run's git directory is its own (see :mod:`sandbox.store.worktree`), so the agent may commit, branch, tag
and stash freely there; none of it reaches the user's repository. It is evidence all the same: this
module reads it (read-only, with libgit2) and reports the run's branches, tags, stash entries and the
commits the agent made on top of the snapshot. ``sandbox apply`` still applies files only: the
agent's commits are kept in the run (never removed by apply) until the run is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from sandbox.store.gitread import plain_files_only
from sandbox.store.layout import run_branch

#: At most this many of the agent's commits are listed (the count is exact up to :data:`MAX_WALK`).
MAX_LISTED = 20
MAX_WALK = 1000


@dataclass
class GitActivity:
    """The run's own git state, as the agent left it."""

    #: The branch the worktree is on (None: detached), and the commit it points at.
    branch: str | None
    head: str | None
    #: Branches and tags of the run's repository other than its starting branch at the snapshot.
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    stash: int = 0
    #: Commits reachable from the run's refs or HEAD and not from the snapshot: (id, subject), newest first.
    commits: list[tuple[str, str]] = field(default_factory=list)
    commit_count: int = 0

    @property
    def changed(self) -> bool:
        """True when the agent did anything with git beyond editing files on the starting branch."""
        return bool(self.branches or self.tags or self.stash or self.commits)

    def to_json(self) -> dict[str, object]:
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
    """Read the run's own git directory; None when it cannot be read (missing, a legacy run, or a
    file that is not a plain file where git keeps refs and packs: see
    :func:`sandbox.store.gitread.plain_files_only`)."""
    if not plain_files_only(git_dir):
        return None
    try:
        repo = pygit2.Repository(git_dir)
    except (pygit2.GitError, KeyError):
        return None
    try:
        return _read(repo, run_id, base)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def _read(repo: pygit2.Repository, run_id: str, base: str) -> GitActivity:
    start_ref = f"refs/heads/{run_branch(run_id)}"
    branch: str | None = None
    head: str | None = None
    if not repo.head_is_unborn:
        head = str(repo.head.target)
        if not repo.head_is_detached:
            branch = repo.head.name.removeprefix("refs/heads/")
    out = GitActivity(branch=branch, head=head)
    tips: set[str] = set()
    for name in repo.references:
        try:
            target = str(repo.references[name].peel(pygit2.Commit).id)
        except (pygit2.GitError, KeyError, ValueError):
            continue
        if name.startswith("refs/heads/"):
            if not (name == start_ref and target == base):
                out.branches[name.removeprefix("refs/heads/")] = target
            tips.add(target)
        elif name.startswith("refs/tags/"):
            out.tags[name.removeprefix("refs/tags/")] = target
            tips.add(target)
        elif name == "refs/stash":
            # Listed as stash entries, not walked: a stash is two commits git makes, not the agent's work.
            out.stash = sum(1 for _ in repo.references[name].log())
    if head:
        tips.add(head)
    tips.discard(base)
    if tips:
        walker = repo.walk(next(iter(tips)), pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
        for tip in tips:
            walker.push(tip)
        walker.hide(base)
        for n, commit in enumerate(walker):
            if n >= MAX_WALK:
                break
            out.commit_count += 1
            if len(out.commits) < MAX_LISTED:
                out.commits.append((str(commit.id), commit.message.split("\n", 1)[0][:100]))
    return out
