"""The snapshot of a user's working tree: HEAD plus uncommitted and untracked (not ignored) files.

The snapshot is a commit whose parent is the user's HEAD (none in a repository without commits).
It is built with the git command on a *temporary copy* of the user's index
(:mod:`sandbox.store.snapadd`, which can start before pygit2 is imported): ``git add -A`` and
``write-tree`` are git's fastest whole-tree path (its stat cache makes unchanged files free, about
4x faster than libgit2's status at 100k files), and the copy guarantees the user's real index is
only ever read. Nothing of the user's is written: not the index, HEAD, refs or files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pygit2

from sandbox import faults
from sandbox.store import objects, snapadd

faults.POINTS.update({"start.snapshot.after_commit"})


@dataclass
class Snapshot:
    """What :func:`take` made: the snapshot commit and what it was taken from."""

    commit: str
    tree: str
    head: str | None
    head_ref: str | None
    submodules: list[str] = field(default_factory=list)


def user_git_dir(workdir: str) -> str:
    """The git dir of the user's working tree (the main ``.git`` or a linked worktree's admin dir)."""
    found = pygit2.discover_repository(workdir)
    if found is None:
        raise FileNotFoundError(workdir)
    return os.path.realpath(found)


def user_head(workdir: str) -> str | None:
    """The commit the user's working tree has checked out (None in a repository without commits)."""
    return head_of(user_git_dir(workdir))[0]


def head_of(git_dir: str) -> tuple[str | None, str | None]:
    """The commit the user's git dir ``git_dir`` has checked out and the branch it is on: (None, None)
    in a repository without commits, (commit, None) on a detached HEAD."""
    user = pygit2.Repository(git_dir)
    if user.head_is_unborn:
        return None, None
    return str(user.head.target), None if user.head_is_detached else user.head.name


def take(
    project_repo: pygit2.Repository,
    workdir: str,
    scratch_dir: str,
    message: str,
    objects_env: dict[str, str] | None = None,
) -> Snapshot:
    """Snapshot the working tree ``workdir`` into a commit (no ref is created); ``objects_env``: where the
    add writes its objects (:func:`sandbox.store.runstore.git_env`)."""
    gitdir = user_git_dir(workdir)
    head, head_ref = head_of(gitdir)
    return finish(project_repo, snapadd.begin(workdir, gitdir, scratch_dir, objects_env), head, head_ref, message)


def finish(
    project_repo: pygit2.Repository, adding: snapadd.Adding, head: str | None, head_ref: str | None, message: str
) -> Snapshot:
    """The snapshot commit of what ``adding`` (:func:`sandbox.store.snapadd.begin`) adds, on ``head``: the user's
    HEAD as it was read before the add began, and ``head_ref`` the branch it was on (None: detached)."""
    objects.enable_fsync()
    tree, submodules = adding.tree()
    sig = objects.signature()
    parents = [head] if head else []
    with objects.git_writes():
        commit = str(project_repo.create_commit(None, sig, sig, message, tree, parents))
    faults.point("start.snapshot.after_commit")
    return Snapshot(commit=commit, tree=tree, head=head, head_ref=head_ref, submodules=submodules)
