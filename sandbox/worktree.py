"""Creating and removing a run's git worktree.

``git worktree add`` is used instead of pygit2's ``add_worktree``: libgit2 cannot create a
detached worktree (it always makes a branch, which would show in the user's ``git branch``), its
checkout is about 2x slower than git's, and a failed call leaves a branch behind. The worktree is
created locked with a reason, so the user's ``git worktree prune`` leaves it alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from sandbox import faults
from sandbox.gitcli import git

LOCK_REASON = "sandbox run {run_id}: remove with 'sandbox drop {run_id}'"

faults.POINTS.update({"worktree.remove.after_files", "worktree.add.after"})


def add(common_dir: str, path: str, commit: str, run_id: str) -> None:
    """Create a locked, detached worktree at ``path`` checked out at ``commit``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    git(
        [
            "-c",
            "checkout.workers=0",
            "worktree",
            "add",
            "--detach",
            "--lock",
            "--reason",
            LOCK_REASON.format(run_id=run_id),
            path,
            commit,
        ],
        cwd=common_dir,
    )
    faults.point("worktree.add.after")


def admin_dir_for(path: str) -> str | None:
    """The ``.git/worktrees/<name>`` admin dir a worktree's ``.git`` file points to."""
    try:
        with open(os.path.join(path, ".git"), encoding="utf-8") as fh:
            line = fh.read().strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return os.path.realpath(os.path.join(path, line.split(":", 1)[1].strip()))


def admin_dirs_pointing_into(common_dir: str, root: str) -> dict[str, str]:
    """Admin dirs of worktrees whose working tree lies under ``root``: {admin dir: worktree path}."""
    out: dict[str, str] = {}
    base = os.path.join(common_dir, "worktrees")
    try:
        names = os.listdir(base)
    except OSError:
        return out
    root_real = os.path.realpath(root) + os.sep
    for name in names:
        admin = os.path.join(base, name)
        try:
            with open(os.path.join(admin, "gitdir"), encoding="utf-8") as fh:
                gitfile = fh.read().strip()
        except OSError:
            continue
        wt = os.path.dirname(gitfile)
        if (os.path.realpath(wt) + os.sep).startswith(root_real):
            out[admin] = wt
    return out


def remove(common_dir: str, path: str) -> int:
    """Remove a run's worktree files and its admin dir; returns bytes freed. Idempotent."""
    admin = admin_dir_for(path)
    if admin is None:
        for candidate, wt in admin_dirs_pointing_into(common_dir, path).items():
            if os.path.realpath(wt) == os.path.realpath(path):
                admin = candidate
    freed = disk_usage(path)
    if os.path.lexists(path):
        _make_writable(path)
        shutil.rmtree(path, ignore_errors=True)
    faults.point("worktree.remove.after_files")
    if admin and os.path.isdir(admin) and os.path.dirname(admin) == os.path.join(common_dir, "worktrees"):
        shutil.rmtree(admin, ignore_errors=True)
    return freed


def _make_writable(path: str) -> None:
    # An agent may leave read-only directories behind; rmtree needs write permission on them.
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            full = os.path.join(dirpath, d)
            with contextlib.suppress(OSError):
                if not os.path.islink(full):
                    os.chmod(full, 0o755)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o755)


def disk_usage(path: str) -> int:
    """Bytes used by the files below ``path`` (links not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total
