"""The repositories the sandbox writes through: durable ones (:func:`open_repository`), a mirror's
(:func:`mirror_repository`), and a run's, which reads and writes its own object store
(:mod:`sandbox.store.runstore`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import pygit2

from sandbox.store import layout, objects


def open_repository(path: str, store: str | None = None) -> pygit2.Repository:
    """Open a repository the sandbox writes to, with fsync on for its objects and refs.

    libgit2 reads its fsync option once per repository, when the reference database is first
    used (objects check it on every write): a repository opened, or a ref read, before the option
    was on would write refs without fsync for good. So the option goes on first, and the reference
    database is created here, under the guard :func:`mirror_repository` holds while the option is off.

    ``store``: a run's object store (:mod:`sandbox.store.runstore`). The repository's objects are then
    the store's (where every object is written) and yours, with your own alternates but not the hub:
    libgit2 writes no object it finds anywhere, so an object found only in another run's store would
    be missing from this run's.
    """
    with objects.write_guard():
        objects.enable_fsync()
        repo = pygit2.Repository(path)
        if store is not None:
            _use_store(repo, store)
        with contextlib.suppress(pygit2.GitError, ValueError):
            repo.references.get("HEAD")
    return repo


def _use_store(repo: pygit2.Repository, store: str) -> None:
    repo.set_odb(_odb(objects.common_objects_dir(repo), store))
    repo.sandbox_store = store  # type: ignore[attr-defined]


def _odb(common: str, store: str | None) -> pygit2.Odb:
    """Your objects (``common``) with your own alternates but not the hub, behind ``store`` when given.

    Highest priority first: reads look in the store, then in yours; writes go to the first writable
    backend (the store's loose one, else yours)."""
    odb = pygit2.Odb()
    if store is not None:
        odb.add_backend(pygit2.OdbBackendPack(store), 4)
        odb.add_backend(pygit2.OdbBackendLoose(store, -1, True), 3)
    odb.add_backend(pygit2.OdbBackendPack(common), 2)
    odb.add_backend(pygit2.OdbBackendLoose(common, -1, True), 1)
    for alternate in layout.user_alternates(os.path.dirname(common)):
        if os.path.isdir(alternate):
            odb.add_disk_alternate(alternate)
    return odb


_MIRRORS: dict[str, pygit2.Repository] = {}


def mirror_repository(repo: pygit2.Repository) -> pygit2.Repository:
    """The same repository opened with libgit2's fsync off: only for mirror refs, repaired on read.

    The run's ``head`` ref mirrors the ledger's head, which is durable already; syncing it cost two
    more fsyncs per call. The option is off only while this repository's reference database is
    created, under the guard every durable open and write holds.
    """
    key = objects.objects_dir_of(repo)
    found = _MIRRORS.get(key)
    if found is not None:
        return found
    with objects.write_guard():
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, False)
        try:
            mirror = pygit2.Repository(repo.path)
            if key != objects.common_objects_dir(repo):
                _use_store(mirror, key)
            with contextlib.suppress(pygit2.GitError, ValueError):
                mirror.references.get("HEAD")
        finally:
            pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, objects.fsync_enabled())
    _MIRRORS[key] = mirror
    return mirror


_OWN: dict[str, pygit2.Repository] = {}


def users_own(repo: pygit2.Repository) -> pygit2.Repository:
    """Your repository with your own objects only (no run's store): what is written through it goes into
    your ``objects/``, and what it finds is what every run's git reads too."""
    common = objects.common_objects_dir(repo)
    found = _OWN.get(common)
    if found is not None:
        return found
    with objects.write_guard():
        objects.enable_fsync()
        own = pygit2.Repository(os.path.dirname(common))
        own.set_odb(_odb(common, None))
    _OWN[common] = own
    return own


def give_to_user(repo: pygit2.Repository, oids: Iterable[str]) -> int:
    """Copy into your own store each object of ``oids`` that it lacks (read through a run's ``repo``), with
    the trees and blobs a commit or tree reaches that it lacks too (a commit's parents are not followed);
    how many were copied, made durable as one pack.

    What leaves a run for your tree or your branches (an apply's files, an exported branch) must not live
    in the run's store alone: git writes no object it finds anywhere, so your next ``git add`` or commit of
    the same content would name an object that only that run's store holds, which every other run's git
    (seeing your objects and its own store) could not read.
    """
    own = users_own(repo)
    todo = [oid for oid in oids if oid]
    seen: set[str] = set()
    copied = 0
    with objects.git_writes(), objects.batch(own):
        while todo:
            oid = todo.pop()
            if oid in seen or oid in own.odb:
                continue
            seen.add(oid)
            kind, data = objects.read_object(repo, oid)
            if kind == _COMMIT:
                todo.append(objects.read_commit(repo, oid).tree)
            elif kind == _TREE:
                todo += [e.oid for e in objects.read_tree(repo, oid).values() if e.mode != objects.MODE_GITLINK]
            objects.write_raw(own, kind, data)
            copied += 1
    return copied


_COMMIT = 1
_TREE = 2
