"""A ledger checked against its commits before anything uses it (issue 25).

A run's record travels through shared remotes, so whoever controls a remote writes its events. The
commits are what ``diff`` shows; the events are what ``apply``, ``undo``, ``redo`` and ``branch``
act on. This module makes them agree, or refuses the ledger with the first bad event named:

* the first event starts the run (``run_started``, this run's id, a base that is a commit), and no
  later event starts it again; every event names this run;
* every file change an event lists is a path git itself would accept (:mod:`sandbox.store.gitpath`),
  with modes 100644, 100755 or 120000 only, blob ids that are blobs in the object store, and each
  path once;
* an event that lists files names its commit and the commit's parent, the commit's only parent is
  that one, and the files are exactly the diff of the commit against it (paths, modes, blob ids);
* the run's head chains from the base: an event that moves the head (as the fold moves it) names
  the head before it as its parent commit, and the fold never ignores a commit an event names;
  an undo or redo in the run's worktree changes exactly the call's paths, back or forth.

The check folds the events as the ledger does (:func:`sandbox.run.fold.fold_event`), so it judges each event against the
state the run is really in. Where it runs: ``sandbox fetch`` (:mod:`sandbox.runs.remote`) before a
ref moves, and :meth:`Run.verified_state <sandbox.run.run.Run.verified_state>` before every
decision (apply, undo, redo, branch). The verified fold is kept beside the run, keyed by the
ledger commit it was verified at: a later read checks only the events after it, and a cache whose
tip is not in the ledger's chain is ignored (the ledger is checked from its first event again).
"""

from __future__ import annotations

import contextlib
import os

import pygit2
from pydantic import ValidationError

from sandbox.errors import CorruptionError, PathRefusedError
from sandbox.models import Event, EventKind, FileChange, LedgerState, from_json, to_json
from sandbox.run.fold import fold_event, fork_state
from sandbox.store import gitpath, objects
from sandbox.store.fsutil import write_json_file
from sandbox.store.ledger import Ledger

#: The only modes a recorded file may have: a file, an executable, a symlink.
MODES = frozenset({objects.MODE_FILE, objects.MODE_EXEC, objects.MODE_LINK})
#: Event kinds that may move the run's head (their commit becomes it).
HEAD_KINDS = frozenset(
    {
        EventKind.call_succeeded,
        EventKind.call_failed,
        EventKind.head_moved,
        EventKind.rollback_files,
        EventKind.undo,
        EventKind.redo,
    }
)
#: Kinds whose ``files`` are the diff of their commit against its parent.
DIFF_KINDS = frozenset(
    {EventKind.call_succeeded, EventKind.call_failed, EventKind.head_moved, EventKind.rollback_files}
)
CACHE_FILE = "verified"


class LedgerRefusedError(CorruptionError):
    """A ledger whose events do not agree with its commits; ``index`` and ``oid`` name the first bad event."""

    def __init__(self, message: str, index: int, oid: str, reason: str) -> None:
        super().__init__(message)
        self.index = index
        self.oid = oid
        self.reason = reason


class LedgerPathRefusedError(LedgerRefusedError, PathRefusedError):
    """A ledger refused for a path git would not write (``..``, absolute, a ``.git`` variant)."""


class _Bad(Exception):
    """One event's fault (a phrase completing "Event N of run R ...")."""

    def __init__(self, reason: str, path: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


def _commit(repo: pygit2.Repository, oid: str | None, what: str) -> objects.CommitInfo:
    if not oid:
        raise _Bad(f"names no {what}")
    try:
        return objects.read_commit(repo, oid)  # read and checked by the sandbox, never a hang
    except (KeyError, ValueError, pygit2.GitError):
        raise _Bad(f"names {what} {oid[:12]}, which is not a commit here") from None


def _blob(repo: pygit2.Repository, oid: str, path: str) -> None:
    try:
        kind, _data = objects.read_object(repo, oid)  # checked against its id; never a hang on a bad object
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise _Bad(f"lists {path!r} with object {oid[:12]}, which is missing or damaged") from exc
    if kind != pygit2.enums.ObjectType.BLOB:
        raise _Bad(f"lists {path!r} with object {oid[:12]}, which is not a blob")


def _check_entry(repo: pygit2.Repository, path: str, mode: int | None, oid: str | None) -> None:
    if (mode is None) != (oid is None):
        raise _Bad(f"lists {path!r} with a mode but no object, or an object but no mode")
    if mode is None or oid is None:
        return
    if mode not in MODES:
        raise _Bad(f"lists {path!r} with mode {mode:o} (only 100644, 100755 and 120000 are files)")
    _blob(repo, oid, path)


def _check_files(repo: pygit2.Repository, files: list[FileChange]) -> None:
    seen: set[str] = set()
    for f in files:
        why = gitpath.refusal(f.path, f.after_mode)
        if why is not None:
            raise _Bad(f"lists the path {f.path!r}, which {why}", path=True)
        if f.path in seen:
            raise _Bad(f"lists {f.path!r} twice")
        seen.add(f.path)
        _check_entry(repo, f.path, f.before_mode, f.before_hash)
        _check_entry(repo, f.path, f.after_mode, f.after_hash)
        if (f.before_mode, f.before_hash) == (f.after_mode, f.after_hash):
            raise _Bad(f"lists {f.path!r} as changed to what it was")


Change = tuple[str, int | None, str | None, int | None, str | None]


def _diff(repo: pygit2.Repository, parent: objects.CommitInfo, commit: objects.CommitInfo) -> set[Change]:
    try:
        out = set()
        for c in objects.diff_trees(repo, parent.tree, commit.tree):
            why = gitpath.refusal(c.path, c.new.mode if c.new else None)
            if why is not None:
                raise _Bad(f"has a commit with the path {c.path!r}, which {why}", path=True)
            out.add(
                (
                    c.path,
                    c.old.mode if c.old else None,
                    c.old.oid if c.old else None,
                    c.new.mode if c.new else None,
                    c.new.oid if c.new else None,
                )
            )
        return out
    except (KeyError, ValueError, pygit2.GitError, objects.DamagedObjectError) as exc:
        raise _Bad(f"has a commit whose trees cannot be read ({exc})") from exc


def _as_changes(files: list[FileChange]) -> set[Change]:
    return {(f.path, f.before_mode, f.before_hash, f.after_mode, f.after_hash) for f in files}


def _first_difference(listed: set[Change], actual: set[Change]) -> str:
    extra = sorted(listed - actual)
    if extra:
        return f"lists a change to {extra[0][0]!r} that its commit does not make"
    missing = sorted(actual - listed)
    return f"leaves out the change its commit makes to {missing[0][0]!r}"


def booked_drift(event: Event) -> bool:
    """True for a drift event that books what it found to the call it names (a killed call's writes)."""
    return event.kind == EventKind.drift and bool(event.call_id) and event.data.get("booked_to") == event.call_id


def _single_parent(commit: objects.CommitInfo, parent_oid: str | None) -> None:
    if commit.parents != [parent_oid]:
        raise _Bad("names a commit whose only parent is not the event's parent commit")


def _before(repo: pygit2.Repository, run_id: str, state: LedgerState, event: Event) -> None:
    """What one event must be on its own, and against the state before it."""
    if event.run_id != run_id:
        raise _Bad(f"belongs to run {event.run_id!r}, not {run_id}")
    if event.kind == EventKind.run_started:
        if state.count or state.run is not None:
            raise _Bad("starts the run again")
        if event.run is None or event.run.run_id != run_id:
            raise _Bad("starts another run")
        base = _commit(repo, event.run.base, "base")
        # The snapshot is a commit on the user's HEAD at start (none on an unborn branch): the HEAD a
        # branch export builds on is the one the snapshot was taken from.
        if base.parents != ([event.run.head] if event.run.head else []):
            raise _Bad("names a HEAD at start that is not the parent of its base snapshot")
        return
    if state.run is None:
        raise _Bad("comes before the run's start")
    _check_files(repo, event.files)
    if event.files and (not event.commit or not event.parent_commit):
        raise _Bad("lists files but names no commit and parent")
    if not event.commit:
        return
    commit = _commit(repo, event.commit, "commit")
    parent = _commit(repo, event.parent_commit, "parent commit")
    if event.kind in DIFF_KINDS:
        _single_parent(commit, event.parent_commit)
        actual = _diff(repo, parent, commit)
        listed = _as_changes(event.files)
        if listed != actual:
            raise _Bad(_first_difference(listed, actual))
    elif event.kind == EventKind.drift:
        _single_parent(commit, event.parent_commit)
        if event.parent_commit != state.head:
            raise _Bad("records drift on a commit that is not the run's head")
        actual = _diff(repo, parent, commit)  # its paths must pass git's checks too
        # Drift booked to the killed call that wrote it is that call's change: listed exactly.
        booked = booked_drift(event)
        if (event.files or booked) and (not booked or _as_changes(event.files) != actual):
            raise _Bad("lists files on a drift event that books them to no call, or not its commit's")
    elif event.files:
        raise _Bad(f"lists files on a {event.kind.value} event")
    elif event.kind in (EventKind.undo, EventKind.redo):
        _undo_moves(repo, state, event, parent, commit)
    else:
        raise _Bad(f"names a commit on a {event.kind.value} event")


def _undo_moves(
    repo: pygit2.Repository, state: LedgerState, event: Event, parent: objects.CommitInfo, commit: objects.CommitInfo
) -> None:
    """An undo (redo) in the run's worktree takes exactly the call's changes back (forth)."""
    entry = state.calls.get(event.call_id or "")
    if entry is None or not entry.files:
        raise _Bad(f"moves the head for call {event.call_id!r}, which changed no files")
    undo = event.kind == EventKind.undo
    expected = {
        (f.path, f.after_mode, f.after_hash, f.before_mode, f.before_hash)
        if undo
        else (f.path, f.before_mode, f.before_hash, f.after_mode, f.after_hash)
        for f in entry.files
    }
    if _diff(repo, parent, commit) != expected:
        raise _Bad(f"moves the head to a commit that does not {event.kind.value} exactly call {entry.call_id}")


def _after(before_head: str | None, state: LedgerState, event: Event) -> None:
    """What the fold made of the event: a head move chains from the head before it."""
    if event.kind == EventKind.run_started:
        return
    if state.head != before_head:
        if (event.kind not in HEAD_KINDS and not booked_drift(event)) or event.parent_commit != before_head:
            raise _Bad("moves the run's head from a commit that is not its head (the commits do not chain)")
    elif event.commit and event.kind in HEAD_KINDS and event.commit != before_head:
        raise _Bad("names a commit the run's head does not move to")


def check(
    repo: pygit2.Repository, run_id: str, base: LedgerState, events: list[tuple[str, Event]], first: int = 1
) -> LedgerState:
    """Check ``events`` (oldest first) on top of the verified fold ``base``; the new fold.

    Raises :class:`LedgerRefusedError` naming the first bad event (``first`` is its number in the
    ledger when ``base`` is empty; numbers count from 1).
    """
    state = fork_state(base)
    for i, (oid, event) in enumerate(events):
        number = base.count + i + first
        try:
            _before(repo, run_id, state, event)
            head = state.head
            fold_event(state, event, oid)
            _after(head, state, event)
        except _Bad as bad:
            call = f", call {event.call_id!r}" if event.call_id else ""
            kind = LedgerPathRefusedError if bad.path else LedgerRefusedError
            raise kind(
                f"Event {number} of run {run_id} ({event.kind.value}{call}, ledger commit {oid[:12]}) {bad.reason}",
                number,
                oid,
                bad.reason,
            ) from None
    return state


# -- the verified tip, kept beside the run --------------------------------------------------------


def _cached_tip(path: str) -> str | None:
    """The tip the kept fold was verified at (its first line: read without parsing the fold)."""
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline().strip()
    except (OSError, UnicodeError):
        return None
    return line or None


def _load(path: str) -> LedgerState | None:
    try:
        with open(path, encoding="utf-8") as fh:
            fh.readline()
            state = from_json(LedgerState, fh.read())
    except (OSError, ValueError, ValidationError):
        return None
    # One verified before the events from elsewhere were counted is verified again from the first event.
    return state if state.tip is not None and state.foreign is not None else None


def verified(ledger: Ledger, tip: str) -> None:
    """Check the events of ``ledger`` up to commit ``tip`` (:func:`check`); raises
    :class:`LedgerRefusedError` for the first bad one.

    O(events after the last verified tip): the fold verified last is kept in the run's directory,
    its tip on the first line, and used only when that tip is in ``tip``'s chain.
    """
    path = os.path.join(ledger.run_dir, CACHE_FILE)
    if _cached_tip(path) == tip:
        return  # this very ledger was verified: a commit id names its whole chain
    cached = _load(path)
    if cached is not None and cached.clone != ledger.clone:
        if cached.clone is None:  # verified before this clone had an id: no event carried it
            cached = fork_state(cached)
            cached.clone = ledger.clone
        else:
            cached = None
    new = None
    if cached is not None and cached.tip is not None:
        with contextlib.suppress(LookupError):
            new = ledger.events_since(cached.tip, tip)
    if new is None or cached is None:
        cached, new = ledger.new_state(), ledger.events_to(tip)
    state = check(ledger.repo, ledger.run_id, cached, new)
    if os.path.isdir(ledger.run_dir):
        with contextlib.suppress(OSError):
            write_json_file(path, tip + "\n" + to_json(state), sync=False)
