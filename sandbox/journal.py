"""The journal that makes every write into a working tree all-or-nothing, and the writer it drives.

An apply, undo or redo first writes (and fsyncs) one journal per target working tree, listing
every path it will change with its state before and after, and the ledger event that will record
it. Then each file is written atomically, then the event is appended, then the journal is removed.
A crash at any instant leaves the journal behind, and each of its paths is then at its before or
its after state: :func:`sandbox.mergeback.continue_pending` completes the operation (``sandbox
apply --continue``) and :func:`sandbox.undo.roll_back` reverses it (``sandbox undo``).

Layout, under the repository's common git dir::

    sandbox/journal/<key>.json    the pending operation on one working tree
    sandbox/locks/tree-<key>.lock serialises applies and undos into that tree

``<key>`` is a hash of the working tree's real path, so every run of the repository that targets
the same tree shares the lock and sees the same pending journal.

Paths are read and written without following symlinks in any parent directory (a symlinked parent
is refused), links are written as links, and git's modes are the only modes: a regular file, an
executable file, a symlink, or absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pygit2
from pydantic import ValidationError

from sandbox import faults, fsutil, objects, paths
from sandbox.errors import CorruptionError, PathRefusedError, SandboxError
from sandbox.locks import file_lock
from sandbox.models import FORMAT_VERSION, ApplyJournal, JournalEntry, from_json, to_json
from sandbox.objects import MODE_EXEC, MODE_FILE, MODE_LINK, Entry
from sandbox.project import Project

State = Entry | None
"""A path's state as git sees it: a blob entry (file, executable or symlink), or None for absent."""


class JournalPendingError(SandboxError):
    """A previous apply, undo or redo into this tree was interrupted; it must be finished or reversed."""


class TreeChangedError(SandboxError):
    """A path changed under a pending operation: it is at neither its before nor its after state."""


# -- reading the state of a path --------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What is on disk at a path: ``kind`` is absent, file, link, dir, other, blocked or via_link.

    ``blocked``: a parent is a file (the path cannot exist); ``via_link``: a parent is a symlink
    (the path must never be read or written through it). ``blocker`` names that parent.
    """

    kind: str
    entry: Entry | None = None
    blocker: str | None = None
    st_mode: int = 0

    @property
    def state(self) -> State:
        """The path's git state: its blob entry, or None when git would see nothing there."""
        return self.entry

    @property
    def known(self) -> bool:
        """False when the path holds something git cannot store (a fifo, a socket)."""
        return self.kind != "other"


def probe(root: str, rel: str) -> Probe:
    """Read the state of ``rel`` below ``root`` without following any symlink (O(depth) lstats)."""
    current = root
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return Probe("absent")
        if stat.S_ISLNK(st.st_mode):
            return Probe("via_link", blocker="/".join(parts[: i + 1]))
        if not stat.S_ISDIR(st.st_mode):
            return Probe("blocked", blocker="/".join(parts[: i + 1]))
    full = os.path.join(root, rel)
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        return Probe("absent")
    if stat.S_ISDIR(st.st_mode):
        return Probe("dir", st_mode=st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(full))
        return Probe("link", Entry(MODE_LINK, str(pygit2.hash(data))), st_mode=st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        return Probe("other", st_mode=st.st_mode)
    with open(full, "rb") as fh:
        data = fh.read()
    mode = objects.mode_of(st)
    assert mode is not None
    return Probe("file", Entry(mode, str(pygit2.hash(data))), st_mode=st.st_mode)


def entry_state(mode: int | None, oid: str | None) -> State:
    """A state from a (mode, oid) pair as stored in ledger events and journals."""
    if mode is None or oid is None:
        return None
    return Entry(mode, oid)


# -- where journals and locks live ------------------------------------------------------------


def tree_key(target_dir: str) -> str:
    """A short stable key for a working tree (a hash of its real path)."""
    return hashlib.sha256(os.fsencode(os.path.realpath(target_dir))).hexdigest()[:20]


def journal_path(project: Project, target_dir: str) -> str:
    """Where the pending journal of ``target_dir`` is stored."""
    return os.path.join(project.state_dir, "journal", tree_key(target_dir) + ".json")


@contextlib.contextmanager
def tree_lock(project: Project, target_dir: str, timeout: float = 30.0) -> Iterator[None]:
    """Serialise applies, undos and redos into one working tree (flock: a killed holder releases it)."""
    path = os.path.join(project.locks_dir, f"tree-{tree_key(target_dir)}.lock")
    with file_lock(path, f"The working tree {target_dir}", timeout):
        yield


def load(project: Project, target_dir: str) -> ApplyJournal | None:
    """The pending journal of ``target_dir``, or None. A damaged journal is reported, never guessed."""
    path = journal_path(project, target_dir)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    try:
        journal = from_json(ApplyJournal, text)
    except (ValidationError, ValueError) as exc:
        raise CorruptionError(
            f"The journal {path} of an interrupted apply or undo is damaged ({exc.__class__.__name__}); "
            "check the files it names by hand, then remove it."
        ) from exc
    if journal.version != FORMAT_VERSION:
        raise CorruptionError(f"The journal {path} has format version {journal.version}; this sandbox reads 1.")
    return journal


def pending_message(journal: ApplyJournal) -> str:
    """The one line telling the user what to do about a pending journal."""
    return (
        f"An interrupted {journal.op} of run {journal.run_id} left {len(journal.entries)} path(s) of "
        f"{journal.target_dir} pending; run 'sandbox apply --continue {journal.run_id}' to finish it or "
        f"'sandbox undo {journal.run_id}' to roll it back."
    )


def ensure_none_pending(project: Project, target_dir: str) -> None:
    """Refuse with :class:`JournalPendingError` while an interrupted operation on the tree is pending."""
    journal = load(project, target_dir)
    if journal is not None:
        raise JournalPendingError(pending_message(journal))


def save(project: Project, journal: ApplyJournal) -> None:
    """Durably write the journal (temp file, fsync, rename, fsync of its directory)."""
    path = journal_path(project, journal.target_dir)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
        fsutil.fsync_dir(os.path.dirname(directory))
    fsutil.atomic_write(path, to_json(journal).encode(), 0o644)


def remove(project: Project, target_dir: str) -> None:
    """Remove the journal of ``target_dir`` durably (the operation is complete)."""
    path = journal_path(project, target_dir)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        fsutil.fsync_dir(os.path.dirname(path))


# -- writing states ---------------------------------------------------------------------------


def _file_mode(existing_mode: int | None, git_mode: int) -> int:
    """Permission bits for a file written with ``git_mode``: keep the user's bits, set the x bits."""
    if existing_mode is None or not stat.S_ISREG(existing_mode):
        return 0o755 if git_mode == MODE_EXEC else 0o644
    perm = existing_mode & 0o777
    if git_mode == MODE_EXEC:
        return perm | ((perm & 0o444) >> 2)
    return perm & ~0o111


def _make_parents(root: str, rel: str) -> None:
    """Create the missing parent directories of ``rel`` durably, refusing any symlinked parent."""
    paths.check_parents(root, rel)
    current = root
    for part in rel.split("/")[:-1]:
        parent, current = current, os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            st = os.lstat(current)
            if not stat.S_ISDIR(st.st_mode):
                raise TreeChangedError(
                    f"Cannot write {rel!r}: {os.path.relpath(current, root)!r} is not a directory."
                ) from None
            continue
        fsutil.fsync_dir(parent)


def put(repo: pygit2.Repository, root: str, rel: str, state: State, current: Probe) -> None:
    """Make ``rel`` hold ``state`` (atomically per file; absent removes it and empty parents)."""
    full = os.path.join(root, rel)
    if current.kind == "via_link":
        raise PathRefusedError(
            f"The path {rel!r} goes through the symlink {current.blocker!r}; the sandbox never writes through it."
        )
    if state is None:
        if current.kind in ("file", "link"):
            fsutil.remove_path(full)
            fsutil.prune_empty_dirs(root, os.path.dirname(rel))
        return
    if current.kind == "dir":
        # A file replaces a directory: the plan removed everything in it first, so it is empty.
        os.rmdir(full)
    _make_parents(root, rel)
    data = objects.read_blob(repo, state.oid)
    if state.mode == MODE_LINK:
        fsutil.atomic_symlink(full, os.fsdecode(data))
    elif state.mode in (MODE_FILE, MODE_EXEC):
        existing = current.st_mode if current.kind == "file" else None
        fsutil.atomic_write(full, data, _file_mode(existing, state.mode))
    else:
        raise PathRefusedError(f"The path {rel!r} has git mode {state.mode:o}, which the sandbox does not write.")


def matches(current: Probe, state: State) -> bool:
    """True when the path on disk is in ``state`` (a directory or a blocked path counts as absent)."""
    if state is None:
        # What git would see: nothing at this path (a directory, or a parent that is a file or a link).
        return current.kind in ("absent", "dir", "blocked", "via_link")
    return current.entry == state


def play(
    repo: pygit2.Repository,
    root: str,
    entries: Iterable[JournalEntry],
    point: str,
    reverse: bool = False,
    on_write: Callable[[str], None] | None = None,
) -> list[str]:
    """Bring every entry to its after state (its before state when ``reverse``); returns paths written.

    Idempotent: a path already at its target is left alone, so a journal can be played again after a
    crash. A path at neither state raises :class:`TreeChangedError` (the journal stays for the user).
    Removals run first, deepest first, so a directory can become a file and a file a directory.
    ``point`` names the fault point fired after each file written.
    """
    steps: list[tuple[str, State, State]] = []
    for e in entries:
        before = entry_state(e.before_mode, e.before_oid)
        after = entry_state(e.after_mode, e.after_oid)
        steps.append((e.path, after, before) if reverse else (e.path, before, after))
    removals = sorted((s for s in steps if s[2] is None), key=lambda s: s[0], reverse=True)
    writes = sorted((s for s in steps if s[2] is not None), key=lambda s: s[0])
    written: list[str] = []
    for rel, source, target in removals + writes:
        current = probe(root, rel)
        if matches(current, target):
            continue
        if current.kind == "via_link":
            raise PathRefusedError(
                f"The path {rel!r} goes through the symlink {current.blocker!r}; the sandbox never writes through it."
            )
        if not matches(current, source):
            raise TreeChangedError(
                f"{rel!r} in {root} changed while an apply or undo was writing it; it is at neither the state "
                "before nor the state after. Check it by hand; the journal is kept."
            )
        put(repo, root, rel, target, current)
        written.append(rel)
        if on_write is not None:
            on_write(rel)
        faults.point(point)
    return written


def check(root: str, entries: Iterable[JournalEntry], reverse: bool = False) -> list[str]:
    """The paths of ``entries`` that are at neither their before nor their after state."""
    bad = []
    for e in entries:
        current = probe(root, e.path)
        before = entry_state(e.before_mode, e.before_oid)
        after = entry_state(e.after_mode, e.after_oid)
        if not (matches(current, before) or matches(current, after)):
            bad.append(e.path)
    return bad


def pending_run_id(project: Project, target_dir: str | None) -> str | None:
    """The run whose interrupted operation is pending on ``target_dir`` (for commands given no RUN)."""
    if target_dir is None:
        return None
    try:
        pending = load(project, target_dir)
    except CorruptionError:
        return None
    return pending.run_id if pending is not None else None
