"""Git LFS contents of a run: kept in the run's directory, yours only once you take them.

git-lfs keeps a file's content outside git, in its *storage* (``lfs.storage``; by default
``<git dir>/lfs``), and looks for content it lacks beside each object directory git borrows
(``<alternate>/../lfs/objects``, absolute alternates only), which it hard-links (or copies) into its
storage. Two consequences shape where a run's contents go:

- **Run b must not read what run a wrote.** The host cleans a run's files with your repository's filter
  driver (:mod:`sandbox.store.convert`); by default git-lfs would store the agent's content in your
  ``.git/lfs/objects``, which every run reads (your own LFS files, :mod:`sandbox.confine.gitview`). So a
  run's contents go to its own storage, ``<common>/sandbox/runs/<run>/lfs`` (:func:`storage`), beside its
  object store: bound read-only inside that run alone, and found by git-lfs there through the store's
  alternate (the run's git lists it first).
- **No unconfined git may link your files into the agent's directories.** A git run outside the sandbox
  in a run's worktree (the host's checkout at start, your own ``git checkout`` after ``cd`` there) reads
  the run's git config and, by default, stored into the run's git dir, which the agent writes: git-lfs
  hard-linked your ``.git/lfs/objects`` files there, and a confined ``printf x > .../lfs/objects/...``
  rewrote your stored content through the shared inode. The run's git config (written by the sandbox,
  read-only inside, :mod:`sandbox.store.gitguard`) names the run's storage instead (:func:`settings`);
  inside the sandbox the agent's own git is told its git dir's ``lfs`` (:func:`inside_config`), where a
  link from a read-only mount is refused (``EXDEV``) and git-lfs copies.

And no git outside the sandbox downloads for a run: git-lfs has an HTTP client of its own, which posts to
the ``lfs.url`` of the worktree's ``.lfsconfig`` (the agent's to write) for a content missing locally. The
run's config and every git the sandbox runs (:data:`sandbox.store.gitcli.LFS_OFFLINE`) name a URL that
cannot exist, and leave a missing content as its pointer.

Your contents reach a run's storage as links (git-lfs's own, from your store); a run's reach yours when
you take them: an apply's smudge finds them through the run's store given as an alternate
(:func:`reference_env`) and links them into your store, and a dropped run's storage is folded into yours
(:func:`fold`: a branch you exported or a commit you picked from it may name them). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat

from sandbox.store import layout
from sandbox.store.fsutil import fsync_dir, link_or_copy, temp_name
from sandbox.store.gitcli import LFS_OFFLINE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: In a run's directory: the run's git-lfs storage (its contents under ``objects/``).
LFS = "lfs"

_HEX = frozenset("0123456789abcdef")
#: How every pointer starts (git-lfs's specification), and the most a pointer blob holds.
_POINTER = b"version https://git-lfs.github.com/spec/v1\n"
POINTER_MAX = 1024


def storage(common_dir: str, run_id: str) -> str:
    """The run's git-lfs storage (``lfs.storage``): ``<common>/sandbox/runs/<run>/lfs``, absolute."""
    return os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), LFS)


def settings(common_dir: str, run_id: str) -> list[tuple[str, str]]:
    """The run's git config settings for git-lfs: its storage, and no download (a git started outside the
    sandbox in its worktree, yours included, never posts to the ``lfs.url`` of an ``.lfsconfig`` the agent
    wrote; a content missing here is left as its pointer: :data:`sandbox.store.gitcli.LFS_OFFLINE`)."""
    return [("lfs.storage", storage(common_dir, run_id)), *LFS_OFFLINE]


def inside_config(git_dir: str) -> tuple[str, str]:
    """What the agent's git is told inside the sandbox (as command-line config): its own git dir's storage,
    git-lfs's default, which the run's config overrides for the gits started outside."""
    return ("lfs.storage", os.path.join(git_dir, LFS))


def _alternate(path: str) -> str:
    """One entry of ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` (C-quoted when a colon or quote would split it)."""
    if not any(c in path for c in ':"\\\n'):
        return path
    escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def driver(common_dir: str, run_id: str) -> tuple[list[str], dict[str, str]]:
    """The options and environment of a filter driver the host runs for a run's worktree (against your
    repository): the run's storage, and your objects as an alternate so that git-lfs finds your own
    contents beside them (your store is otherwise not among its places once the storage is another)."""
    mine = os.path.join(os.path.realpath(common_dir), "objects")
    return ["-c", f"lfs.storage={storage(common_dir, run_id)}"], {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _alternate(mine)}


#: The filter keys of git-lfs that run a program: what :func:`host_checkout` wraps.
_DRIVER_KEYS = ("process", "smudge", "clean")


def host_checkout(git_dir: str, common_dir: str, run_id: str) -> tuple[list[str], dict[str, str]]:
    """The options and environment of a git the host runs in a run's worktree that may run git-lfs on a tree
    the agent wrote (a fork's, a fetched run's or a recreated worktree's checkout, an index refresh).

    git-lfs reads the work tree's ``.lfsconfig`` by name, or the index's, with ``git config --includes``,
    which opens whatever path an ``[include]`` names: a FIFO of another run's worktree, ``/dev/tty``
    (measured: ``sandbox resume`` waited for ever). So your configured git-lfs driver is run against your
    repository (its config, its index's ``.lfsconfig``) with an empty work tree of the host's, told the
    run's storage and your objects as an alternate (:func:`driver`), as the host's clean of a single file
    is (:mod:`sandbox.store.convert`). Where you configured no git-lfs driver, nothing changes."""
    from sandbox.store.gitcli import git

    keys = "|".join(_DRIVER_KEYS)
    listing = git(
        ["--git-dir", git_dir, "config", "-z", "--get-regexp", rf"^filter\.lfs\.({keys})$"],
        cwd=git_dir,
        check=False,
    ).stdout
    configured = dict(e.split("\n", 1) for e in listing.decode(errors="surrogateescape").split("\0") if "\n" in e)
    options, env = driver(common_dir, run_id)
    if not configured:
        return options, env
    import shlex

    # An empty directory of the sandbox's (read-only inside, so it stays empty), made once: nothing to
    # remove after a checkout, nothing left in /tmp by a killed one.
    empty = os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), "lfs-work-tree")
    os.makedirs(empty, exist_ok=True)
    view = (
        f"cd {shlex.quote(empty)} && unset GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR && "
        f"GIT_DIR={shlex.quote(os.path.realpath(common_dir))} GIT_WORK_TREE={shlex.quote(empty)} && "
        "export GIT_DIR GIT_WORK_TREE && "
    )
    for key in _DRIVER_KEYS:
        command = configured.get(f"filter.lfs.{key}")
        if command:  # git expands %f in a smudge or clean command (%% is a percent sign), not in process
            options += ["-c", f"filter.lfs.{key}={view if key == 'process' else view.replace('%', '%%')}{command}"]
    return options, env


def reference_env(store: str) -> dict[str, str]:
    """The environment of a smudge in your tree of a run's blob: the run's store as an alternate, so that
    git-lfs finds the run's contents beside it and links what it writes into your store."""
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _alternate(os.path.realpath(store))}


def _contents(root: str) -> list[tuple[str, str]]:
    """The content files of a git-lfs ``objects`` directory: (directory relative to it, name)."""
    out: list[tuple[str, str]] = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for one in sorted(os.listdir(root)):
            if len(one) != 2 or not set(one) <= _HEX:
                continue
            for two in sorted(os.listdir(os.path.join(root, one))):
                if len(two) != 2 or not set(two) <= _HEX:
                    continue
                sub = os.path.join(one, two)
                for name in sorted(os.listdir(os.path.join(root, sub))):
                    if len(name) == 64 and set(name) <= _HEX and name.startswith(one + two):
                        out.append((sub, name))
    return out


def _link_all(src_root: str, dest_root: str) -> int:
    """Every content of ``src_root`` given its name under ``dest_root`` too; how many were added."""
    return _link(
        [(os.path.join(src_root, sub, name), os.path.join(dest_root, sub, name)) for sub, name in _contents(src_root)]
    )


def _link(pairs: Iterable[tuple[str, str]]) -> int:
    """Each (content, name) given that name too: a hard link, a copy where the file system refuses one; a
    content already there is kept (its name is its hash), a missing source skipped. How many were added."""
    added = 0
    touched: set[str] = set()
    for src, dest in pairs:
        if os.path.exists(dest) or not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if link_or_copy(src, dest, temp_name(os.path.dirname(dest), os.path.basename(dest))):
            added += 1
            touched.add(os.path.dirname(dest))
    for directory in sorted(touched):
        fsync_dir(directory)
    return added


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def unlink_shared(git_dir: str) -> int:
    """Unlink the files of a run's git dir's ``lfs/objects`` that have another name: links to your store
    that git-lfs made there, run unconfined, before the run's config named its own storage (a run made
    before it). The name in your store stays; the agent's git copies again what it needs. Walked by
    descriptor, no link followed (the agent writes that directory). How many were unlinked."""
    removed = 0
    opened: list[int] = []
    try:
        fd = os.open(git_dir, _DIR)
        opened.append(fd)
        for name in (LFS, "objects"):
            fd = os.open(name, _DIR, dir_fd=fd)
            opened.append(fd)
        removed = _unlink_shared_below(fd, depth=2)
    except OSError:
        pass
    finally:
        for fd in opened:
            os.close(fd)
    return removed


def _unlink_shared_below(fd: int, depth: int) -> int:
    removed = 0
    for name in os.listdir(fd):
        if depth:
            if len(name) != 2 or not set(name) <= _HEX:
                continue
            try:
                sub = os.open(name, _DIR, dir_fd=fd)
            except OSError:
                continue
            try:
                removed += _unlink_shared_below(sub, depth - 1)
            finally:
                os.close(sub)
            continue
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            os.unlink(name, dir_fd=fd)
            removed += 1
    return removed


def pointer_oid(data: bytes) -> str | None:
    """The content a Git LFS pointer names (its sha256), or None when ``data`` is no pointer."""
    if len(data) > POINTER_MAX or not data.startswith(_POINTER):
        return None
    for line in data.split(b"\n"):
        if line.startswith(b"oid sha256:"):
            oid = line[len(b"oid sha256:") :].decode("ascii", "replace")
            return oid if len(oid) == 64 and set(oid) <= _HEX else None
    return None


def _path(objects_dir: str, oid: str) -> str:
    return os.path.join(objects_dir, oid[:2], oid[2:4], oid)


def give(common_dir: str, run_id: str, oids: Iterable[str]) -> int:
    """The run's contents ``oids`` (sha256) linked into your store: what you take from a run by a branch
    (``sandbox branch``) checks out in your git while the run lives. How many were added."""
    src = os.path.join(storage(common_dir, run_id), "objects")
    dest = os.path.join(os.path.realpath(common_dir), LFS, "objects")
    return _link([(_path(src, oid), _path(dest, oid)) for oid in oids])


def fold(common_dir: str, run_id: str) -> int:
    """The run's contents linked into your store (``.git/lfs/objects``) before its directory goes (a drop,
    ``gc``): what outlives the run (an exported branch, a commit you picked) may name them. How many."""
    src = os.path.join(storage(common_dir, run_id), "objects")
    if not os.path.isdir(src):
        return 0
    return _link_all(src, os.path.join(os.path.realpath(common_dir), LFS, "objects"))


def share(common_dir: str, source: str, target: str) -> int:
    """Run ``target``'s storage given every content of run ``source``'s (a fork continues its source)."""
    src = os.path.join(storage(common_dir, source), "objects")
    if not os.path.isdir(src):
        return 0
    return _link_all(src, os.path.join(storage(common_dir, target), "objects"))
