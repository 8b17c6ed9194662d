"""Creating and removing a run's worktree and its own git directory.

A run lives in its home (see :mod:`sandbox.store.layout`): a worktree whose ``.git`` file names the run's
own git directory beside it. That git directory is a repository of its own, so whatever the agent
does with git there (branches, tags, stash, ``worktree remove``) changes only the run: it shares
nothing writable with the user's repository. Its config, hooks and ``commondir`` (and the worktree's
``.git`` file) are the sandbox's, read-only to a confined agent (:mod:`sandbox.store.gitguard`): the
user's own git in the worktree reads them. The user's objects are reached through
``objects/info/alternates`` (read-only: git writes new objects into the run's own store), so the
snapshot commit needs no copying and the run costs its checkout plus its changes.

The checkout is git's (``read-tree -u``; parallel where the machine has idle cores, :func:`checkout_workers`):
libgit2's is about 2x slower
(docs/design.md), and measured side by side ``git init`` + ``read-tree -u`` costs the same as the
``git worktree add --detach`` runs used before (bench/cases/start.py).

Runs made before homes existed are linked worktrees of the user's repository (``legacy``); this
module still removes them (their admin dir under ``<common>/worktrees``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterable

from sandbox import faults
from sandbox.store import gitguard, layout, lfsstore, moved
from sandbox.store.fsutil import atomic_write, disk_usage, remove_tree
from sandbox.store.gitcli import git, spawn, wait
from sandbox.store.layout import ORIGIN_FILE, Place, gitdir_of, run_branch

LOCK_REASON = "sandbox run {run_id}: remove with 'sandbox drop {run_id}'"

faults.POINTS.update(
    {"worktree.remove.after_files", "worktree.add.after", "worktree.create.after_init", "worktree.advance.after_files"}
)

#: Settings of the user's repository (its own config file, not the global one) that the run's git
#: needs to check out and commit the same way; nothing that names remotes, credentials or includes.
INHERITED_CONFIG = (
    "core.autocrlf",
    "core.eol",
    "core.filemode",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.protecthfs",
    "core.protectntfs",
    "core.safecrlf",
    "core.checkstat",
    "core.trustctime",
    "core.excludesfile",
    "core.attributesfile",
    "core.hookspath",
    "core.longpaths",
    "core.quotepath",
    "user.",
    "author.",
    "committer.",
    "i18n.",
    "filter.",
    "lfs.",
)

#: Files of the user's git dir the run's git dir gets a copy of: ignore rules and attributes (so
#: the run sees the same ignored files), and ``shallow`` (so history ends where the user's ends).
COPIED_FILES = ("info/exclude", "info/attributes", "shallow")


def settings_of(common_dir: str) -> tuple[list[tuple[str, str]], str | None]:
    """What a run's own git dir takes from the config of the user's repository (its own file and what it
    includes, as libgit2 reads it at the local level), and the object format.

    The user's ``checkout.workers``, set at any level (the repository's own file included, which the run's
    git dir does not otherwise read), is taken too: the run's checkouts follow it, as ``git worktree add``
    in the user's repository would.

    Read by git (``config --list --show-scope``, every level in one process), not pygit2: ``sandbox start``
    makes the run's git dir before it imports pygit2 (:mod:`sandbox.run.prestart`)."""
    proc = git(["config", "--includes", "--list", "--show-scope", "-z"], cwd=common_dir, check=False)
    local: list[tuple[str, str]] = []
    workers: str | None = None
    if proc.returncode == 0:
        fields = proc.stdout.split(b"\0")
        for scope, record in zip(fields[::2], fields[1::2], strict=False):
            key, newline, value = record.partition(b"\n")
            if not newline or not value:  # a key without a value ("[core] bare") or an empty one is left out
                continue
            name, text = key.decode(errors="surrogateescape"), value.decode(errors="surrogateescape")
            if name.lower() == "checkout.workers":
                workers = text  # the last one read is the one git uses
            elif scope == b"local":
                local.append((name, text))
    object_format = {k.lower(): v for k, v in local}.get("extensions.objectformat")
    config = inherited(local)
    if workers is not None:
        config.append(("checkout.workers", workers))
    return config, object_format


def checkout_workers(config: Iterable[tuple[str, str]]) -> int | None:
    """Parallel checkout workers for a run's checkout when the user chose none (``config`` has no
    ``checkout.workers``): one per core the machine leaves idle now, when that is two or more; else None,
    git's sequential default.

    Idle now: the cores less the processes running or ready to run at this instant (``/proc/loadavg``'s
    fourth field, this one excluded), not the one-minute load average, which still counts work that has
    ended. Measured at 100k files on 2 cores (bench/results/2026-12-07-start-workers.md): idle, a parallel
    checkout makes ``sandbox start`` about 1.0x ``git worktree add`` against 1.17-1.24x sequential; at a
    load of 3-6 it was 7% slower than sequential (its second worker competes with the snapshot's
    ``git add``), so a busy machine keeps git's default."""
    if any(key.lower() == "checkout.workers" for key, _value in config):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    busy = _running_now()
    if busy is None:
        return None
    idle = cores - busy
    return idle if idle >= 2 else None


def _running_now() -> int | None:
    """How many other processes (threads) run or are ready to run at this instant; None when unknown."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            running = int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - 1)


def inherited(entries: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (key, value) pairs of the user's repository config the run's git dir gets."""
    out = []
    for key, value in entries:
        low = key.lower()
        if any(low == k or (k.endswith(".") and low.startswith(k)) for k in INHERITED_CONFIG):
            out.append((key, value))
    return out


def create(
    place: Place,
    common_dir: str,
    commit: str,
    run_id: str,
    config: Iterable[tuple[str, str]] = (),
    object_format: str | None = None,
    checkout: bool = True,
) -> None:
    """Create the run's home: its own git dir (alternates to ``common_dir``) and its worktree at ``commit``.

    The worktree starts on the branch :func:`sandbox.store.layout.run_branch` of the run's own repository,
    at ``commit``. ``config`` is what :func:`inherited` chose from the user's repository. Without
    ``checkout`` no worktree directory is left and no index is written (for :mod:`sandbox.runs.relocate`,
    which moves a worktree in).
    """
    config = list(config)
    init(place, common_dir, commit, run_id, config, object_format)
    if not checkout:
        os.unlink(os.path.join(place.worktree, ".git"))
        os.rmdir(place.worktree)  # the files are moved in as a whole directory
        return
    # The tree may be the agent's (a fork, a fetched run, a recreated worktree): git-lfs is kept off its
    # .lfsconfig (lfsstore.host_checkout).
    view = lfsstore.host_checkout(place.git_dir, common_dir, run_id)
    finish_checkout(start_checkout(place, workers=checkout_workers(config), view=view))


def init(
    place: Place,
    common_dir: str,
    commit: str,
    run_id: str,
    config: Iterable[tuple[str, str]] = (),
    object_format: str | None = None,
) -> None:
    """Make the run's own git dir and its (still empty) worktree, HEAD on the run's branch at ``commit``."""
    assert place.home is not None
    os.makedirs(place.home, exist_ok=True)
    atomic_write(os.path.join(place.home, ORIGIN_FILE), (os.path.realpath(common_dir) + "\n").encode())
    args = ["init", "-q", "--template=", f"--separate-git-dir={place.git_dir}"]
    if object_format and object_format != "sha1":
        args.append(f"--object-format={object_format}")
    git([*args, place.worktree], cwd=place.home)
    # Relative, so the home can be moved as a whole; git reads it relative to the worktree.
    atomic_write(os.path.join(place.worktree, ".git"), f"gitdir: ../{os.path.basename(place.git_dir)}\n".encode())
    faults.point("worktree.create.after_init")
    gd = place.git_dir
    os.makedirs(os.path.join(gd, "objects", "info"), exist_ok=True)
    # The run's own store first (what the host records for it), then your objects (sandbox.store.runstore).
    moved.write_alternates(gd, common_dir, run_id)
    moved.remember(common_dir)  # the fast read path trusts the homes of a repository that did not move
    for rel in COPIED_FILES:
        src = os.path.join(common_dir, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(gd, rel)), exist_ok=True)
            shutil.copyfile(src, os.path.join(gd, rel))
    # Git LFS stores into the run's own storage, not into this git dir, which the agent writes: an
    # unconfined git here (this start's checkout, yours after `cd`) would link your contents into it.
    settings = [*config, *lfsstore.settings(common_dir, run_id)]
    if "core.hookspath" not in {k.lower() for k, _ in settings}:
        _copy_hooks(os.path.join(common_dir, "hooks"), os.path.join(gd, "hooks"))
    # The settings every run's git has (sandbox.store.gitguard), then what it inherits.
    with open(os.path.join(gd, "config"), "a", encoding="utf-8") as fh:
        fh.write(config_text([*gitguard.SETTINGS, *settings]))
    gitguard.guard(gd)
    set_branch(place, run_id, commit)
    atomic_write(os.path.join(gd, "HEAD"), f"ref: refs/heads/{run_branch(run_id)}\n".encode())


def set_branch(place: Place, run_id: str, commit: str) -> None:
    """Point the run's starting branch at ``commit`` (only while the run is being made)."""
    branch = os.path.join(place.git_dir, "refs", "heads", *run_branch(run_id).split("/"))
    os.makedirs(os.path.dirname(branch), exist_ok=True)
    atomic_write(branch, f"{commit}\n".encode())


#: git's own checkout (as fast as cp -a; libgit2's is 2x slower), into the run's own index. Without
#: an fsync of that index: it is derived from the commit and rebuilt by the next status if lost. The
#: checkout runs with the user's checkout settings, like the ``git worktree add`` it is measured against.
_CHECKOUT = ["read-tree", "-u", "--reset", "HEAD"]


def start_checkout(
    place: Place,
    progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    view: tuple[list[str], dict[str, str]] | None = None,
) -> subprocess.Popen[bytes]:
    """Start checking out the run's HEAD into its empty worktree (in the background).

    With ``progress``, git's own progress meter (``read-tree -v``: "Updating files: 45% ...",
    shown by git after two seconds, as for a clone) is passed to it line by line. ``workers``: a
    parallel checkout with that many workers (:func:`checkout_workers`); None, the config's choice.
    ``view``: more options and environment (:func:`sandbox.store.lfsstore.host_checkout`).
    """
    options = ["-c", "core.fsync=none", *(["-c", f"checkout.workers={workers}"] if workers else [])]
    verbose = ["-v"] if progress is not None else []
    extra, env = view if view is not None else ([], None)
    argv = [*options, *extra, *_CHECKOUT[:2], *verbose, *_CHECKOUT[2:]]
    return spawn(argv, cwd=place.worktree, env=env, progress=progress)


def finish_checkout(proc: subprocess.Popen[bytes]) -> None:
    """Wait for :func:`start_checkout`; :class:`sandbox.store.gitcli.GitCommandError` when it failed."""
    wait(_CHECKOUT, proc)
    faults.point("worktree.add.after")


#: Up to this many paths changed by the snapshot, only they are checked out (``checkout --no-overlay``
#: by pathspec); above it, one two-tree ``read-tree -m`` over the whole index. git matches every
#: index entry against every pathspec, so the first grows with paths x files; at 100k files (medians
#: in docs/design.md, "Making a run"): 10 paths 0.17 s vs 0.26 s, 100 paths 0.45 s vs 0.54 s, 1,000
#: paths 4.9 s vs 0.72 s.
PATHS_AT_MOST = 32


def advance(place: Place, run_id: str, old: str, new: str) -> None:
    """Move the freshly checked-out worktree from commit ``old`` to ``new``: only the paths that differ
    are written, then the run's branch names ``new``. Nothing is written when the trees are equal."""
    listing = git(["diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new], cwd=place.worktree).stdout
    changed = [p for p in listing.split(b"\0") if p]
    if changed:
        # The checkout's files are as new as its index, so git would take every entry as racily clean
        # and re-hash all the files when it rewrites the index (0.4-0.9 s at 100k files). Nothing else
        # writes the worktree before the run exists: date the index after them, and git trusts the stat
        # data it has just written. The index written here gets its true time.
        index = os.path.join(place.git_dir, "index")
        later = time.time() + 2
        os.utime(index, (later, later))
        if len(changed) <= PATHS_AT_MOST:
            # Literal paths, NUL-separated: a path may hold pathspec magic, newlines or any byte.
            spec = ["--pathspec-from-file=-", "--pathspec-file-nul"]
            env = {"GIT_LITERAL_PATHSPECS": "1", **{f"GIT_{k}_PATHSPECS": "0" for k in ("GLOB", "NOGLOB", "ICASE")}}
            args = ["-c", "core.fsync=none", "checkout", "-q", "--no-overlay", new, *spec]
            git(args, cwd=place.worktree, env=env, input=b"\0".join(_outermost(changed)))
        else:
            git(["-c", "core.fsync=none", "read-tree", "-u", "-m", old, new], cwd=place.worktree)
        faults.point("worktree.advance.after_files")
    set_branch(place, run_id, new)


def _outermost(paths: list[bytes]) -> list[bytes]:
    """``paths`` without those below another of them. Where a file and a directory swapped places
    (``a`` and ``a/b``), the pathspec ``a`` covers both; ``a/b`` alone would match nothing once git
    has replaced one by the other, and ``checkout`` refuses a pathspec that matches nothing."""
    given = set(paths)
    return [p for p in paths if not any(p[:i] in given for i, c in enumerate(p) if c == 0x2F)]


def _copy_hooks(src: str, dst: str) -> None:
    # Copies, never links: the agent may rewrite its own hooks, which must not reach the user's files.
    try:
        names = os.listdir(src)
    except OSError:
        return
    for name in names:
        full = os.path.join(src, name)
        if name.endswith(".sample") or not os.path.isfile(full) or not os.stat(full).st_mode & stat.S_IXUSR:
            continue
        os.makedirs(dst, exist_ok=True)
        shutil.copy2(full, os.path.join(dst, name))


def config_text(settings: Iterable[tuple[str, str]]) -> str:
    """git config file text for ``(key, value)`` pairs (``section[.subsection].name``)."""
    return "".join(gitguard.entry_text(key, value) for key, value in settings)


def admin_dir_for(path: str) -> str | None:
    """The git dir a worktree's ``.git`` file points to (a legacy run's ``.git/worktrees/<name>``)."""
    return gitdir_of(path)


def admin_dirs_pointing_into(common_dir: str, root: str) -> dict[str, str]:
    """Admin dirs of worktrees whose working tree lies under ``root``: {admin dir: worktree path}."""
    out: dict[str, str] = {}
    base = layout.git_worktrees_dir(common_dir)
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


def remove_place(common_dir: str, place: Place) -> int:
    """Remove a run's worktree and git dir (its whole home); returns bytes freed. Idempotent."""
    if place.home is None:
        return remove(common_dir, place.worktree)
    freed = disk_usage(place.home)
    if os.path.lexists(place.worktree):
        remove_tree(place.worktree)
    faults.point("worktree.remove.after_files")
    if os.path.lexists(place.home):
        with contextlib.suppress(OSError):
            os.chmod(place.home, 0o755)
        # The origin file goes last: a home left half removed (a writer still adding files to the
        # worktree as the run is dropped) still names its repository, so the next gc removes it.
        with contextlib.suppress(FileNotFoundError):  # a concurrent gc may remove it first
            for name in os.listdir(place.home):
                if name != layout.ORIGIN_FILE:
                    path = os.path.join(place.home, name)
                    if os.path.isdir(path) and not os.path.islink(path):
                        remove_tree(path)
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(path)
            if set(os.listdir(place.home)) <= {layout.ORIGIN_FILE}:
                remove_tree(place.home)
    return freed


def remove(common_dir: str, path: str) -> int:
    """Remove a legacy run's worktree files and its admin dir; returns bytes freed. Idempotent."""
    admin = admin_dir_for(path)
    if admin is None:
        for candidate, wt in admin_dirs_pointing_into(common_dir, path).items():
            if os.path.realpath(wt) == os.path.realpath(path):
                admin = candidate
    freed = disk_usage(path)
    if os.path.lexists(path):
        remove_tree(path)
    faults.point("worktree.remove.after_files")
    if admin and os.path.isdir(admin) and os.path.dirname(admin) == layout.git_worktrees_dir(common_dir):
        remove_tree(admin)
    return freed
