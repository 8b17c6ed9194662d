"""Your committed history: the only objects of yours a run's sandbox shows.

A run's git borrows your objects (:mod:`sandbox.store.worktree`), and your ``objects/`` holds more than
your history: the commits, trees and files of your stash, what your reflogs alone keep (an amended
commit, a branch you reset), objects nothing names any more, and what dropped runs left there (their
ledgers: every command line and output). Bound in as it is, an agent could read any of them by id, and
``git cat-file --batch-all-objects`` would list them all.

So inside a run's sandbox your ``objects/`` is a store of the sandbox's, ``<common>/sandbox/history``,
holding what your branches, tags, remote-tracking branches and the HEADs of your worktrees reach, and
nothing else (:mod:`sandbox.confine.gitview` binds it in your objects' place). It is made by git
(``pack-objects --revs``, reusing your packs' deltas) the first time a run's command is confined (O(your
history), once), and kept up by appending a pack of what new tips reach (O(new commits)); when a tip
went away without being merged (a branch deleted or rewritten), the next command makes a new
generation from scratch, so what you dropped does not stay visible. Each generation is a directory of
its own, named in ``current``; each process that shows one holds a shared lock on it while it lives (the
sandbox it spawned dies with it), and an older generation nobody holds is removed.

What a run's snapshot adds of yours that your history does not hold (a staged file, a tree written from
your index) is copied into the run's own store when the snapshot is made (:func:`complete`): the run's git
finds its starting commit whole without reading your objects. A fetched run's record came into your
objects by git: :func:`adopt` copies what its refs reach beyond your history into its store.

Standard library only: ``sandbox exec``'s fast path shows the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat

from sandbox.errors import LockedError
from sandbox.store import layout
from sandbox.store.fsutil import atomic_write, disk_usage, remove_tree
from sandbox.store.gitcli import NO_LAZY_FETCH_ENV, git, read
from sandbox.store.locks import file_lock

#: In the sandbox's directory: the generations of the history store and ``current``, naming the one shown.
HISTORY = "history"
CURRENT = "current"
#: In a generation: the tips (commit and tag ids) whose history it holds, one per line, sorted.
TIPS = "tips"
#: In a generation: the file each process showing it holds a shared lock on.
IN_USE = "in-use"

#: The refs whose history is shown; every other ref (your stash, notes, other runs' refs) is not.
REF_ROOTS = ("refs/heads/", "refs/tags/", "refs/remotes/")

_LOCK = "history.lock"
#: Seconds a command waits for another's build of the store (a first build of a large history included).
LOCK_WAIT = 600.0
_HEX = frozenset("0123456789abcdef")


def root(common_dir: str) -> str:
    """``<common>/sandbox/history``: the generations and ``current``."""
    return os.path.join(layout.state_dir(common_dir), HISTORY)


def _objects(common_dir: str, generation: str) -> str:
    return os.path.join(root(common_dir), generation, "objects")


def _is_id(text: str) -> bool:
    return len(text) in (40, 64) and set(text) <= _HEX


def tips(common_dir: str) -> list[str]:
    """The ids your branches, tags and remote-tracking branches name, and the detached HEADs of your
    worktrees (not a run's), sorted: read from the files (O(refs)), by git where the refs are a reftable."""
    found = _ref_ids(common_dir, REF_ROOTS)
    found.update(oid for oid in [_head(common_dir)] if oid)  # detached; a branch's is counted above
    base = layout.git_worktrees_dir(common_dir)
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            # A run made before homes is a linked worktree too: its HEAD is the agent's, not your history.
            if not os.path.isdir(layout.run_dir(common_dir, name)):
                found.update(oid for oid in [_head(os.path.join(base, name))] if oid)
    return sorted(found)


def _ref_ids(common_dir: str, roots: tuple[str, ...]) -> set[str]:
    """The ids the refs below ``roots`` (``refs/heads/``, ...) name, packed or loose."""
    found: set[str] = set()
    if os.path.isdir(os.path.join(common_dir, "reftable")):
        code, out = read(["for-each-ref", "--format=%(objectname)", *roots], common_dir)
        found.update(out.decode().split() if code == 0 else ())
        return found
    with contextlib.suppress(OSError), open(os.path.join(common_dir, "packed-refs"), "rb") as fh:
        for line in fh:
            oid, _, name = line.decode("utf-8", "surrogateescape").rstrip("\n").partition(" ")
            if name.startswith(roots) and _is_id(oid):
                found.add(oid)
    for ref_root in roots:
        # Each directory opened from its parent's descriptor, a linked one never entered (fwalk's rule).
        with contextlib.suppress(OSError):
            for _path, _dirs, files, dir_fd in os.fwalk(os.path.join(common_dir, ref_root), follow_symlinks=False):
                found.update(oid for oid in (_id_at(dir_fd, name) for name in files) if oid)
    return found


#: A ref file opened as a regular file: no link followed at its own name, a FIFO never waited on.
_REF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _head(directory: str) -> str | None:
    """The id ``directory``'s ``HEAD`` names (None for a symbolic ref or anything else): see :func:`_id_at`."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _id_at(dir_fd, "HEAD")
    finally:
        os.close(dir_fd)


def _id_at(dir_fd: int, name: str) -> str | None:
    """The id the ref file ``name`` in the directory ``dir_fd`` names, read from a regular file opened
    relative to that descriptor, following no link, its first 100 bytes only; None for a symbolic ref, a
    link, anything not a regular file or not an id. The descriptor calls are the standard library's:
    this is on ``sandbox exec``'s confined start, where :mod:`sandbox.store.agentread` (``openat2``
    through ``ctypes``) costs 6 ms of imports."""
    try:
        fd = os.open(name, _REF_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        oid = os.read(fd, 100).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return oid if _is_id(oid) else None


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii") as fh:
            return [line.strip() for line in fh if line.strip()]
    except (OSError, UnicodeError):
        return None


#: The generations this process shows (path -> descriptor holding the shared lock), until it exits.
_HELD: dict[str, int] = {}


def shown(common_dir: str) -> str:
    """The objects directory shown as your ``objects/`` inside a run: the current generation, brought up
    to your tips first, held (a shared lock) for as long as this process lives.
    :class:`sandbox.store.gitcli.GitCommandError` when git could not pack your history."""
    real = os.path.realpath(common_dir)
    # Waited for as long as a first build of a large history may take (it is O(your history), once).
    lock = os.path.join(layout.locks_dir(real), _LOCK)
    with file_lock(lock, "Your committed history, as runs see it", timeout=LOCK_WAIT):
        generation = _up_to_date(real)
        _hold(os.path.join(root(real), generation))
        _remove_unused(real, generation)
    return _objects(real, generation)


def _hold(path: str) -> None:
    """Hold a shared lock on generation ``path`` until this process exits (once: again only when the
    generation there is another one, its directory made anew)."""
    in_use = os.path.join(path, IN_USE)
    held = _HELD.get(path)
    if held is not None:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(held), os.stat(in_use)):
                return
        os.close(held)
    fd = os.open(in_use, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _HELD[path] = fd


def _up_to_date(common_dir: str) -> str:
    """The current generation, holding what your tips reach (under the lock)."""
    now = tips(common_dir)
    current = _current(common_dir)
    held = _read_lines(os.path.join(root(common_dir), current, TIPS)) if current else None
    if held is not None and os.path.isdir(_objects(common_dir, current)):
        if held == now:
            return current
        gone = sorted(set(held) - set(now))
        if not gone or not _unmerged(common_dir, gone, now):
            new = sorted(set(now) - set(held))
            if new:
                _pack(common_dir, _objects(common_dir, current), [*new, *(f"^{t}" for t in held)])
            atomic_write(os.path.join(root(common_dir), current, TIPS), _text(now))
            return current
    generation = _next_generation(common_dir, current)
    objects = _objects(common_dir, generation)
    os.makedirs(os.path.join(objects, "pack"), exist_ok=True)
    os.makedirs(os.path.join(objects, "info"), exist_ok=True)
    # An empty alternates file: where the run's own view of yours is bound (sandbox.confine.gitview).
    atomic_write(os.path.join(objects, "info", "alternates"), b"")
    if now:
        _pack(common_dir, objects, now)
    atomic_write(os.path.join(root(common_dir), generation, TIPS), _text(now))
    atomic_write(os.path.join(root(common_dir), CURRENT), f"{generation}\n".encode())
    return generation


def _text(ids: list[str]) -> bytes:
    return "".join(f"{i}\n" for i in ids).encode()


def _unmerged(common_dir: str, gone: list[str], now: list[str]) -> bool:
    """True when a tip in ``gone`` reaches a commit no tip in ``now`` reaches, or is not a commit (a deleted
    annotated tag: its message would stay), or git cannot tell."""
    code, kinds = read(["cat-file", "--batch-check=%(objecttype)"], common_dir, input=_text(gone))
    if code != 0 or set(kinds.split()) != {b"commit"}:
        return True
    code, out = read(["rev-list", "-n1", "--stdin"], common_dir, input=_text([*gone, *(f"^{t}" for t in now)]))
    return code != 0 or bool(out.strip())


def _pack(
    common_dir: str,
    objects: str,
    lines: list[str],
    *,
    revs: bool = True,
    local: bool = False,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> bool:
    """One pack in ``objects`` written (and synced) by git from your repository before anything names it:
    of what the revisions ``lines`` reach (``^id`` excluding what an id reaches), or with ``revs`` False of
    the objects ``lines`` name; ``local``: only what your own ``objects/`` holds (not your alternates).
    False when git failed and ``check`` is False."""
    os.makedirs(os.path.join(objects, "pack"), exist_ok=True)
    args = [
        *("-c", "core.fsync=pack,pack-metadata", "-c", "core.fsyncMethod=fsync", "pack-objects", "-q"),
        *(["--revs", "--missing=allow-any"] if revs else []),
        *(["--local"] if local else []),
        "--delta-base-offset",
        os.path.join(objects, "pack", "pack"),
    ]
    proc = git(args, cwd=common_dir, env={**(env or {}), **NO_LAZY_FETCH_ENV}, input=_text(lines), check=check)
    return proc.returncode == 0


def _next_generation(common_dir: str, current: str) -> str:
    number = int(current[1:]) + 1 if current[1:].isdigit() else 1
    while os.path.exists(os.path.join(root(common_dir), f"g{number}")):
        number += 1
    return f"g{number}"


def _remove_unused(common_dir: str, current: str | None) -> int:
    """Remove the generations but ``current`` that no process holds (under the lock); the bytes freed."""
    try:
        generations = [g for g in os.listdir(root(common_dir)) if g.startswith("g") and g != current]
    except OSError:
        return 0
    freed = 0
    for generation in generations:
        path = os.path.join(root(common_dir), generation)
        if path in _HELD:
            continue
        try:
            fd = os.open(os.path.join(path, IN_USE), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live sandbox shows it
        else:
            freed += disk_usage(path)
            if generation == _current(common_dir):
                os.unlink(os.path.join(root(common_dir), CURRENT))  # first: never a current that is gone
            remove_tree(path)
        finally:
            os.close(fd)
    return freed


def _current(common_dir: str) -> str:
    return (_read_lines(os.path.join(root(common_dir), CURRENT)) or [""])[0]


def reclaim(common_dir: str) -> int:
    """Remove every generation no process holds, the current one too (``sandbox gc`` when no run is
    left: the next confined command builds it again); the bytes freed."""
    real = os.path.realpath(common_dir)
    if not os.path.isdir(root(real)):
        return 0
    try:
        with file_lock(
            os.path.join(layout.locks_dir(real), _LOCK), "Your committed history, as runs see it", timeout=1.0
        ):
            return _remove_unused(real, None)
    except LockedError:
        return 0  # a command is bringing it up to date for a sandbox: in use, kept (the next gc tries again)


def complete(common_dir: str, run_id: str, commit: str, tree: str, head: str | None) -> None:
    """Copy into run ``run_id``'s store what ``commit`` (its snapshot, on your ``head``) reaches of yours
    beyond ``head``'s history: what only your ``objects/`` holds (a staged file, a tree your index had
    written) would be missing inside, where your objects are your committed history alone. O(changed
    paths): git compares the two trees, skipping what they share."""
    store = layout.run_store(common_dir, run_id)
    if not os.path.isdir(store):
        return
    from sandbox.store import runstore

    env = runstore.git_env(common_dir, run_id)
    args = ["diff-tree", "--no-commit-id", "-r", "-t", "-z", "--no-renames", *([head] if head else ["--root"]), commit]
    fields = git(args, cwd=common_dir, env=env).stdout.split(b"\0")
    wanted = {commit, tree}
    for meta in fields[0::2]:  # ":<old mode> <new mode> <old id> <new id> <status>", then the path
        parts = meta.decode("ascii", "replace").split()
        if len(parts) >= 4 and parts[1] != "160000" and _is_id(parts[3]) and set(parts[3]) != {"0"}:
            wanted.add(parts[3])
    only_store = {"GIT_OBJECT_DIRECTORY": store, "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""}
    check = git(
        ["cat-file", "--batch-check=%(objectname)"], cwd=common_dir, env=only_store, input=_text(sorted(wanted))
    )
    missing = [line.split()[0] for line in check.stdout.decode().splitlines() if line.endswith(" missing")]
    if missing:
        _pack(common_dir, store, missing, revs=False, env=env)


#: In a run's directory: the run's tips whose objects :func:`adopt` has copied into its store.
ADOPTED = "history-adopted"


def adopt(common_dir: str, run_id: str) -> None:
    """Copy into a fetched run's store what its refs reach that lies in your ``objects/`` alone (its
    ledger, calls and snapshot, fetched there by git) and not in your history: inside, your objects are
    your committed history. Once per change of the run's refs: git packs only what is your own
    (``pack-objects --local`` skips what the run's store, through your alternates, already has). What git
    cannot pack (a damaged object) is left out, and tried again at the next command."""
    real = os.path.realpath(common_dir)
    store = layout.run_store(real, run_id)
    now = sorted(_ref_ids(real, (layout.ref_prefix(run_id),)))
    record = os.path.join(layout.run_dir(real, run_id), ADOPTED)
    held = _read_lines(record)
    if held == now or not os.path.isdir(store):
        return
    current = _current(real)
    history_tips = (_read_lines(os.path.join(root(real), current, TIPS)) or []) if current else []
    new = sorted(set(now) - set(held or []))
    exclude = [f"^{t}" for t in sorted({*history_tips, *(held or [])})]
    if new and not _pack(real, store, [*new, *exclude], local=True, check=False):
        # A damaged record (a garbled object git cannot pack): left to the checks that report it (the run's
        # recorded tree, ``git fsck``); nothing of yours is shown for it, and the next command tries again.
        return
    atomic_write(record, _text(now), sync=False)


def give_store(common_dir: str, run_id: str) -> bool:
    """Give a run made before stores one of its own (``sandbox gc``): until then what is recorded for it lies
    in your ``objects/``, which its sandbox shows whole. What its refs reach beyond your history is packed
    into the store from your objects (where it also stays), and the store is listed (:mod:`sandbox.store.runstore`).
    Built beside and renamed into place: a crash leaves no store half made. False when it has one."""
    real = os.path.realpath(common_dir)
    store = layout.run_store(real, run_id)
    if os.path.isdir(store):
        return False
    building = f"{store}.building"
    remove_tree(building)
    os.makedirs(os.path.join(building, "info"))
    refs = sorted(_ref_ids(real, (layout.ref_prefix(run_id),)))
    if refs:
        _pack(real, building, [*refs, *(f"^{t}" for t in tips(real))], local=True)
    os.rename(building, store)
    from sandbox.store import runstore

    runstore.create(real, run_id)
    return True
