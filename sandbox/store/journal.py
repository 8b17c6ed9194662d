"""The journal that makes every write into a working tree all-or-nothing, and the writer it drives.

An apply, undo or redo first writes (and fsyncs) one journal per target working tree, listing
every path it will change with its state before and after, and the ledger event that will record
it. Then each file is written atomically, then the event is appended, then the journal is removed.
A crash at any instant leaves the journal behind, and each of its paths is then at its before or
its after state: :func:`sandbox.merge.writing.continue_pending` completes the operation (``sandbox
apply --continue``) and :func:`sandbox.merge.undo.roll_back` reverses it (``sandbox undo``).

Layout, under the repository's common git dir::

    sandbox/journal/<key>.json    the pending operation on one working tree
    sandbox/locks/tree-<key>.lock serialises applies and undos into that tree
    sandbox/staging/<key>/        temporaries of the files being written into that tree

Every temporary file is named by the journal before it exists: the journal carries a token, and
entry ``i`` is written through ``staging/<key>/<token>.<i>`` (outside the user's view) or, when
the staging directory is on another file system than the file, ``.sandbox-tmp-<token>.<i>`` next
to it. So a kill inside a write leaves only names the journal knows, and ``apply --continue``,
``undo`` and ``gc`` remove them (:func:`clear_temps`).

``<key>`` is a hash of the working tree's real path, so every run of the repository that targets
the same tree shares the lock and sees the same pending journal.

Paths are read and written without following symlinks in any parent directory (a symlinked parent
is refused), links are written as links, and git's modes are the only modes: a regular file, an
executable file, a symlink, or absent.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pygit2
from pydantic import ValidationError

from sandbox import faults
from sandbox.errors import CorruptionError, LockedError, PathRefusedError, SandboxError
from sandbox.models import FORMAT_VERSION, ApplyJournal, JournalEntry, from_json, to_json
from sandbox.store import agentread, fsutil, layout, objects, paths
from sandbox.store.locks import file_lock
from sandbox.store.objects import MODE_EXEC, MODE_FILE, MODE_LINK, Entry
from sandbox.store.project import Project

State = Entry | None
"""A path's state as git sees it: a blob entry (file, executable or symlink), or None for absent."""


class JournalPendingError(SandboxError):
    """A previous apply, undo or redo into this tree was interrupted; it must be finished or reversed."""


class TreeChangedError(SandboxError):
    """A path changed under a pending operation: it is at neither its before nor its after state."""


class WriteFailedError(SandboxError):
    """The system refused a write (disk full, I/O error, read-only file system, permission).

    The operation rolled itself back, or, where it could not, kept its journal; the message says
    which, and the exact command that finishes or reverses it.
    """


def describe(exc: OSError) -> str:
    """An OS error as a short phrase: 'No space left on device (ENOSPC)'."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


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
    #: Why the path cannot be read (an OS error, or no read permission for its owner), else None.
    unreadable: str | None = None

    @property
    def state(self) -> State:
        """The path's git state: its blob entry, or None when git would see nothing there."""
        return self.entry

    @property
    def known(self) -> bool:
        """False when the path holds something git cannot store (a fifo, a socket) or cannot be read."""
        return self.kind not in ("other", "unreadable")


def probe(root: str, rel: str) -> Probe:
    """Read the state of ``rel`` below ``root`` without following any symlink (O(depth) lstats)."""
    current = root
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return Probe("absent")
        except OSError as exc:
            return Probe("unreadable", blocker="/".join(parts[: i + 1]), unreadable=describe(exc))
        if stat.S_ISLNK(st.st_mode):
            return Probe("via_link", blocker="/".join(parts[: i + 1]))
        if not stat.S_ISDIR(st.st_mode):
            return Probe("blocked", blocker="/".join(parts[: i + 1]))
    full = os.path.join(root, rel)
    st_mode = 0
    try:
        st = os.lstat(full)
        st_mode = st.st_mode
        if stat.S_ISDIR(st.st_mode):
            return Probe("dir", st_mode=st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            data = os.fsencode(os.readlink(full))
            return Probe("link", Entry(MODE_LINK, str(pygit2.hash(data))), st_mode=st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            return Probe("other", st_mode=st.st_mode)
        # From a checked descriptor, not by name: the run's worktree (undo in the run) is the agent's
        # to write, and a file swapped for a link or a FIFO after the lstat is refused (agentread).
        oid = _blob_id(root, rel, st)
    except FileNotFoundError:
        return Probe("absent")
    except OSError as exc:  # EACCES for another user, EIO from a failing disk: an obstacle, not a crash
        return Probe("unreadable", st_mode=st_mode, unreadable=describe(exc))
    except agentread.NotRegularError:
        return Probe("other", st_mode=st_mode)
    except agentread.AgentReadError as exc:
        return Probe("unreadable", st_mode=st_mode, unreadable=exc.message)
    mode = objects.mode_of(st)
    assert mode is not None
    # No read permission for the owner is the user's statement even where root can read it anyway.
    unreadable = None if st.st_mode & stat.S_IRUSR else "it has no read permission"
    return Probe("file", Entry(mode, oid), st_mode=st.st_mode, unreadable=unreadable)


def _blob_id(root: str, rel: str, st: os.stat_result) -> str:
    fd = agentread.open_root(os.path.realpath(root))
    try:
        return agentread.blob_id(fd, rel, st)
    finally:
        os.close(fd)


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
    return os.path.join(layout.journal_dir(project.common_dir), tree_key(target_dir) + ".json")


def staging_area(project: Project, target_dir: str) -> str:
    """The directory the temporaries of writes into ``target_dir`` go to (created on first use)."""
    return os.path.join(layout.staging_dir(project.common_dir), tree_key(target_dir))


@contextlib.contextmanager
def tree_lock(project: Project, target_dir: str, timeout: float = 30.0) -> Iterator[None]:
    """Serialise applies, undos and redos into one working tree (flock: a killed holder releases it)."""
    with key_lock(project, tree_key(target_dir), f"The working tree {target_dir}", timeout):
        yield


@contextlib.contextmanager
def key_lock(project: Project, key: str, what: str, timeout: float = 30.0) -> Iterator[None]:
    """The tree lock by its key (``gc`` knows staging areas by key, not by tree)."""
    path = os.path.join(project.locks_dir, f"tree-{key}.lock")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(path, what, timeout))
        except OSError as exc:  # a full disk cannot even take the lock: nothing was written yet
            raise WriteFailedError(
                f"{what} could not be locked ({describe(exc)}); nothing was written. Fix the cause "
                "(free some space, if the disk is full), then try again."
            ) from exc
        yield


def new_token() -> str:
    """A fresh token naming the temporaries of one operation."""
    return secrets.token_hex(6)


@dataclass(frozen=True)
class Temps:
    """The temporaries of one journaled operation, each named from the journal before it exists."""

    root: str
    area: str
    token: str

    def for_entry(self, index: int, rel: str) -> list[str]:
        """Where entry ``index`` may be staged: the staging area first, else next to the file."""
        staged = os.path.join(self.area, f"{self.token}.{index}")
        beside = os.path.join(self.root, os.path.dirname(rel), f"{fsutil.TEMP_PREFIX}{self.token}.{index}")
        return [staged, beside]


def temps_of(project: Project, j: ApplyJournal) -> Temps:
    """The temporaries of journal ``j`` (a journal of an older version derives its token from its event)."""
    token = j.token or hashlib.sha256(j.event.event_id.encode()).hexdigest()[:12]
    return Temps(j.target_dir, staging_area(project, j.target_dir), token)


def clear_temps(project: Project, j: ApplyJournal | None, target_dir: str) -> list[str]:
    """Remove what killed writes into ``target_dir`` left: the temps ``j`` names, and the staging area.

    Call under the tree lock. Never follows a symlinked parent; returns the paths removed.
    """
    removed: list[str] = []
    if j is not None:
        temps = temps_of(project, j)
        for i, e in enumerate(j.entries):
            beside = temps.for_entry(i, e.path)[1]
            rel = os.path.relpath(beside, target_dir).replace(os.sep, "/")
            if _parents_are_dirs(target_dir, rel):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    if not stat.S_ISDIR(os.lstat(beside).st_mode):
                        os.unlink(beside)
                        removed.append(beside)
    area = staging_area(project, target_dir)
    try:
        names = os.listdir(area)
    except FileNotFoundError:
        names = []
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(area, name))
            removed.append(os.path.join(area, name))
    removed += _journal_temps(project, tree_key(target_dir))
    return removed


def _journal_temps(project: Project, key: str) -> list[str]:
    """Temporaries of a journal write killed before its rename (:func:`save`), for tree ``key``."""
    directory = layout.journal_dir(project.common_dir)
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name.startswith(f"{fsutil.TEMP_PREFIX}{key}.json-"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
                    removed.append(os.path.join(directory, name))
    return removed


def remove_write_leftovers(project: Project) -> list[str]:
    """What killed writes into any tree left (for ``gc``): temporaries only, never a journal.

    Each tree is visited under its tree lock, taken without waiting: a tree being written right now
    is skipped. A pending journal stays (it is how the operation is finished or reversed).
    """
    keys: set[str] = set()
    with contextlib.suppress(OSError):
        keys.update(os.listdir(layout.staging_dir(project.common_dir)))
    with contextlib.suppress(OSError):
        for name in os.listdir(layout.journal_dir(project.common_dir)):
            # <key>.json, or the temporary .sandbox-tmp-<key>.json-<hex> of a killed save
            keys.add(name.removeprefix(fsutil.TEMP_PREFIX).partition(".json")[0])
    removed: list[str] = []
    for key in sorted(keys):
        try:
            with key_lock(project, key, f"The working tree of journal {key}", timeout=0):
                pending = _load_path(os.path.join(layout.journal_dir(project.common_dir), key + ".json"))
                area = os.path.join(layout.staging_dir(project.common_dir), key)
                if pending is not None:
                    removed += clear_temps(project, pending, pending.target_dir)
                else:
                    with contextlib.suppress(OSError):
                        for name in os.listdir(area):
                            os.unlink(os.path.join(area, name))
                            removed.append(os.path.join(area, name))
                    removed += _journal_temps(project, key)
                with contextlib.suppress(OSError):
                    os.rmdir(area)
        except (LockedError, CorruptionError):
            continue
    return removed


def _parents_are_dirs(root: str, rel: str) -> bool:
    current = root
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except OSError:
            return False
    return True


def load(project: Project, target_dir: str) -> ApplyJournal | None:
    """The pending journal of ``target_dir``, or None. A damaged journal is reported, never guessed."""
    return _load_path(journal_path(project, target_dir))


def _load_path(path: str) -> ApplyJournal | None:
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


def _file_modes(existing_mode: int | None, git_mode: int) -> tuple[int, int | None]:
    """(mode for open(2), mode to set after) of a file written with ``git_mode``.

    A new file is created 0666 or 0777 and nothing more: the umask decides the rest, as for git
    checkout. An existing file keeps the user's bits, with the x bits following ``git_mode``.
    """
    if existing_mode is None or not stat.S_ISREG(existing_mode):
        return (0o777 if git_mode == MODE_EXEC else 0o666), None
    perm = existing_mode & 0o777
    if git_mode == MODE_EXEC:
        return 0o600, perm | ((perm & 0o444) >> 2)
    return 0o600, perm & ~0o111


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


def put(
    repo: pygit2.Repository, root: str, rel: str, state: State, current: Probe, temps: list[str] | None = None
) -> None:
    """Make ``rel`` hold ``state`` (atomically per file; absent removes it and empty parents).

    ``temps`` are the journaled temporary names to write through (see :class:`Temps`).
    """
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
    if temps is None:
        temps = [fsutil.temp_name(os.path.dirname(full), os.path.basename(full))]
    if state.mode == MODE_LINK:
        fsutil.replace_symlink(full, os.fsdecode(data), temps)
    elif state.mode in (MODE_FILE, MODE_EXEC):
        existing = current.st_mode if current.kind == "file" else None
        create_mode, chmod = _file_modes(existing, state.mode)
        fsutil.replace_file(full, data, temps, create_mode=create_mode, chmod=chmod)
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
    temps: Temps | None = None,
) -> list[str]:
    """Bring every entry to its after state (its before state when ``reverse``); returns paths written.

    Idempotent: a path already at its target is left alone, so a journal can be played again after a
    crash. A path at neither state raises :class:`TreeChangedError` (the journal stays for the user).
    Removals run first, deepest first, so a directory can become a file and a file a directory.
    ``point`` names the fault point fired after each file written; ``temps`` names the temporaries
    (entry ``i`` of ``entries`` is written through ``temps.for_entry(i, path)``).
    """
    steps: list[tuple[int, str, State, State]] = []
    for i, e in enumerate(entries):
        before = entry_state(e.before_mode, e.before_oid)
        after = entry_state(e.after_mode, e.after_oid)
        steps.append((i, e.path, after, before) if reverse else (i, e.path, before, after))
    removals = sorted((s for s in steps if s[3] is None), key=lambda s: s[1], reverse=True)
    writes = sorted((s for s in steps if s[3] is not None), key=lambda s: s[1])
    written: list[str] = []
    for index, rel, source, target in removals + writes:
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
        if temps is not None and temps.area and not os.path.isdir(temps.area):
            os.makedirs(temps.area, exist_ok=True)
        try:
            put(repo, root, rel, target, current, temps.for_entry(index, rel) if temps is not None else None)
        except OSError as exc:
            exc.filename = os.path.join(root, rel)  # name the path, not a temporary, in the report
            raise
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
