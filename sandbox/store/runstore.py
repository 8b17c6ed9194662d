"""Each run's own object store: what the host records for a run is readable by that run alone.

The host records a run's snapshot (your uncommitted and untracked files as they were), its calls'
files and its ledger (every command line, output tail and path) as git objects. They go into the
run's store, ``<common>/sandbox/runs/<run>/objects``, not into your ``objects/``: a run's git
(and so its agent) reaches your objects and its own store, bound read-only into its sandbox, and
no other run's (:mod:`sandbox.confine.gitview` shows your ``objects/info/alternates`` without the
hub inside). The agent cannot write its store: its own git writes into the run's git dir.

Your git still sees every live run, so ``git log refs/sandbox/...``, ``fsck``, ``gc`` and ``push`` keep
working: your ``objects/info/alternates`` names, once, a hub (``<common>/sandbox/run-objects``, an
objects directory holding no object) whose own ``info/alternates`` lists each live run's store. A
store is listed there before anything names its objects (it is made with the run's directory,
before the run's first ref), and unlisted only once its objects have moved into your store
(:func:`retire`, at ``drop`` and ``gc``): whatever outlives the run (a branch you exported, an undo
record, a fork) keeps its objects. ``git gc`` (``repack -l``) leaves the stores' objects where they
are.

The gits that write a run's objects (the snapshot's ``git add``) must not see the other runs' stores:
git writes no object it finds anywhere, and an object found only in run b's store would be missing
inside run a. They run with ``GIT_OBJECT_DIRECTORY`` set to the store and your objects through a view
without the hub (:func:`user_view`: ``pack`` and the fan-out directories linked to yours). libgit2
repositories of a run get an object database of their own the same way
(:func:`sandbox.store.repository.open_repository`).

Standard library only: ``sandbox start``'s early part (:mod:`sandbox.run.prestart`) makes the store.
"""

from __future__ import annotations

import contextlib
import errno
import os

from sandbox import faults
from sandbox.store import layout, lfsstore, packs
from sandbox.store.fsutil import atomic_write, fsync_dir, link_or_copy, remove_tree
from sandbox.store.locks import file_lock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

faults.POINTS.update({"runstore.retire.after_move", "runstore.retire.after_remove"})

_LOCK = "run-objects.lock"


def _lock(common_dir: str) -> contextlib.AbstractContextManager[None]:
    return file_lock(os.path.join(layout.locks_dir(common_dir), _LOCK), "The list of runs' object stores")


def _alternates(objects_dir: str) -> str:
    return os.path.join(objects_dir, "info", "alternates")


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return [line.rstrip("\n") for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def _write_lines(path: str, lines: Iterable[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    atomic_write(path, text.encode("utf-8", "surrogateescape"))


def listed(common_dir: str) -> set[str]:
    """The stores the hub lists now (what a repository opened after this sees through your alternates)."""
    return layout.listed_stores(common_dir)


def user_lines(common_dir: str) -> list[str]:
    """Your own lines of ``objects/info/alternates`` (the hub's left out), each an absolute path."""
    return layout.user_alternates(common_dir)


def create(common_dir: str, run_id: str) -> str:
    """Make the run's store and list it in the hub (your alternates naming the hub, once); its path.

    Listed before the run has any object or ref, and durably: every later ref of the run names objects
    your git finds. The hub is listed afresh from the stores that exist (:func:`_relist`): a repository
    moved since keeps seeing its runs."""
    store = layout.run_store(common_dir, run_id)
    for sub in ("pack", "info"):
        os.makedirs(os.path.join(store, sub), exist_ok=True)
    with _lock(common_dir):
        _relist(common_dir)
        mine = _alternates(os.path.join(common_dir, "objects"))
        have = _lines(mine)
        if layout.HUB_LINE not in (line.strip() for line in have):
            _write_lines(mine, [*have, layout.HUB_LINE])
    return store


def _relist(common_dir: str) -> None:
    """The hub names every store that exists, at this repository's path, and nothing else (under the lock)."""
    runs = layout.runs_dir(common_dir)
    try:
        names = sorted(os.listdir(runs))
    except FileNotFoundError:
        names = []
    # Relative to the hub (git reads nested alternates relative to the naming directory): a repository
    # moved as a whole keeps them right, and your git never warns of a store that is not there.
    wanted = [
        f"../{layout.RUNS}/{name}/{layout.RUN_OBJECTS}"
        for name in names
        if os.path.isdir(os.path.join(runs, name, layout.RUN_OBJECTS))
    ]
    path = _alternates(layout.stores_hub(common_dir))
    if _lines(path) != wanted:
        _write_lines(path, wanted)


def _link(src: str, dest: str) -> bool:
    """Give the object file ``src`` the name ``dest`` too (an object's content is its name: one there already
    is kept); False when the file system has no hard links and it was renamed instead (atomic: one name)."""
    try:
        os.link(src, dest)
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        os.replace(src, dest)
        return False
    return True


def retire(common_dir: str, run_id: str) -> None:
    """Move the run's objects into your store, then unlist its store (the run is dropped or garbage).

    Whatever outlives the run keeps its objects: a branch exported from it, an apply's undo record, a
    run forked from it. A crash at any point leaves every object in one of the two places, both seen
    by your git (the store stays listed until its objects are out; :func:`sweep` finishes it)."""
    store = layout.run_store(common_dir, run_id)
    lfsstore.fold(common_dir, run_id)  # its Git LFS contents too, for the same reason
    if os.path.isdir(store):
        _fold(store, os.path.join(common_dir, "objects"))
    faults.point("runstore.retire.after_move")
    with _lock(common_dir):  # gone and unlisted together: a start relisting meanwhile never names it
        remove_tree(store)
        faults.point("runstore.retire.after_remove")
        _relist(common_dir)


def _fold(store: str, objects_dir: str) -> None:
    """Every object file of ``store`` moved into ``objects_dir``: linked there, the new names synced, and only
    then unlinked from ``store`` (a power cut in between leaves it in both)."""
    moves: list[tuple[str, str]] = []
    pack_src = os.path.join(store, "pack")
    with contextlib.suppress(FileNotFoundError):
        names = sorted(os.listdir(pack_src))
        # The pack before its index: git looks for packs by their ``.idx``.
        for ext in (".pack", ".rev", ".idx"):
            moves += [
                (os.path.join(pack_src, n), os.path.join(objects_dir, "pack", n))
                for n in names
                if n.startswith("pack-") and n.endswith(ext)
            ]
    with contextlib.suppress(FileNotFoundError):
        for fan in sorted(os.listdir(store)):
            if len(fan) == 2 and all(c in "0123456789abcdef" for c in fan):
                names = sorted(os.listdir(os.path.join(store, fan)))
                moves += [
                    (os.path.join(store, fan, n), os.path.join(objects_dir, fan, n))
                    for n in names
                    if not n.startswith("tmp")
                ]
    linked: list[str] = []
    touched: set[str] = set()
    for src, dest in moves:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if _link(src, dest):
            linked.append(src)
        touched.add(os.path.dirname(dest))
    for directory in sorted(touched):
        fsync_dir(directory)
    if touched:
        fsync_dir(objects_dir)
    for src in linked:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(src)


def sweep(common_dir: str) -> int:
    """Finish what a crash inside :func:`retire` left: the store of a run directory without its ``place``
    (dropped) moved into your store and removed; the hub listed afresh. How many stores were retired."""
    runs = layout.runs_dir(common_dir)
    try:
        names = sorted(os.listdir(runs))
    except FileNotFoundError:
        names = []
    done = 0
    for name in names:
        store = os.path.join(runs, name, layout.RUN_OBJECTS)
        if os.path.isdir(store) and not os.path.exists(os.path.join(runs, name, layout.PLACE_FILE)):
            retire(common_dir, name)
            done += 1
    with _lock(common_dir):
        _relist(common_dir)
    return done


def share(common_dir: str, source: str, target: str) -> None:
    """Give run ``target``'s store every object of run ``source``'s (hard links; a fork, runs of one snapshot)."""
    src = layout.run_store(common_dir, source)
    dest = layout.run_store(common_dir, target)
    lfsstore.share(common_dir, source, target)
    if not os.path.isdir(src):
        return  # a run made before stores, or fetched: its objects are in yours
    touched: set[str] = set()
    for sub in sorted(os.listdir(src)):
        if sub == "info" or not os.path.isdir(os.path.join(src, sub)):
            continue
        os.makedirs(os.path.join(dest, sub), exist_ok=True)
        names = sorted(os.listdir(os.path.join(src, sub)), key=lambda n: n.endswith(".idx"))  # .idx last
        for name in names:
            if name.startswith("tmp"):
                continue
            # A copy's temporary is named as a killed pack write's: `sandbox gc` removes what a kill leaves.
            tmp = os.path.join(dest, sub, f"{packs.TEMP_PREFIX}{os.urandom(6).hex()}")
            if link_or_copy(os.path.join(src, sub, name), os.path.join(dest, sub, name), tmp, mode=0o444):
                touched.add(os.path.join(dest, sub))
    for directory in sorted(touched):
        fsync_dir(directory)


def user_view(common_dir: str) -> str:
    """Your objects without the hub: an objects directory whose ``pack`` and fan-out directories are links
    to yours and whose alternates are your own lines. Made once; its path."""
    view = layout.user_objects_view(common_dir)
    mine = os.path.join(os.path.realpath(common_dir), "objects")
    wanted = user_lines(common_dir)
    if os.path.isdir(os.path.join(view, "info")) and _lines(_alternates(view)) == wanted:
        return view
    os.makedirs(os.path.join(view, "info"), exist_ok=True)
    for name in ["pack", *(f"{n:02x}" for n in range(256))]:
        link = os.path.join(view, name)
        if not os.path.islink(link):
            with contextlib.suppress(FileExistsError):
                os.symlink(os.path.join(mine, name), link)
    _write_lines(_alternates(view), wanted)
    return view


def git_env(common_dir: str, run_id: str) -> dict[str, str]:
    """The environment of a git that writes run ``run_id``'s objects: into its store, reading yours (no
    other run's); empty for a run without a store."""
    store = layout.run_store(common_dir, run_id)
    if not os.path.isdir(store):
        return {}
    return {"GIT_OBJECT_DIRECTORY": store, "GIT_ALTERNATE_OBJECT_DIRECTORIES": user_view(common_dir)}
