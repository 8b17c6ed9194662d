"""The durable, append-only ledger of a run's events.

Storage: each event is one commit on ``refs/sandbox/<run>/ledger`` whose message carries the
event as JSON; its first parent is the previous event. Other parents are the commits the event
mentions (a call's file-change commit, a checkpoint), so everything the ledger refers to stays
reachable for the user's own ``git gc`` and travels with a plain push or fetch of the run's refs.

Appends are serialised by the run's lock and are also compare-and-swap on the ref (moved under
git's ``<ref>.lock`` only if its tip is the first parent), so concurrent writers neither lose nor
duplicate events. An append that returned survives kill -9 and power loss: its objects are durable
before the ref moves, and the ref's move before the append returns (:mod:`sandbox.store.durable`).
Objects are content-addressed and zlib-checked, so a garbled event is detected and reported, never
read as valid.

A call's state is the fold of its events in ledger order. The ledger does not interpret events:
the fold is handed to it (:class:`Fold`; the run's is :mod:`sandbox.run.fold`). The fold of the
whole ledger is cached beside the run and extended incrementally from the cached tip; the cache is
authenticated with a key that lives only in the ledger, and the ref is checked against the tip the
run last acknowledged (see :mod:`sandbox.store.integrity`), so neither an edited cache nor a deleted or
rewritten ref is taken for the truth.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import pygit2
from pydantic import ValidationError

from sandbox import faults
from sandbox.errors import CorruptionError, SandboxError, UnknownRunError
from sandbox.models import FORMAT_VERSION, Event, EventKind, LedgerState, eventdata, from_json, to_json
from sandbox.store import durable, integrity, layout, objects, provenance
from sandbox.store.fsutil import write_json_file
from sandbox.store.locks import run_lock

MESSAGE_PREFIX = "sandbox-event"
#: The first event of a ledger has no previous event; its parents are only commits it keeps alive.
ROOT_PREFIX = "sandbox-event-root"
CACHE_EVERY = 16

faults.POINTS.update({"ledger.append.before", "ledger.append.after"})


class Fold(Protocol):
    """How a ledger's events become its state; the ledger only stores, reads and caches them.

    The run package gives the one fold there is (:data:`sandbox.run.fold.FOLD`); the store has no
    words for calls or their statuses.
    """

    def fork(self, state: LedgerState) -> LedgerState:
        """A copy of ``state`` that :meth:`event` may change without touching ``state``."""
        ...

    def event(self, state: LedgerState, event: Event, oid: str | None) -> LedgerState:
        """Fold ``event`` (stored as commit ``oid``) into ``state``; returns it."""
        ...


class StorageError(SandboxError):
    """Writing the run's objects or ledger failed (a full disk, an I/O error); ``reason`` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def new_event_id() -> str:
    """A fresh, unique event id."""
    return uuid.uuid4().hex


def ledger_ref(run_id: str) -> str:
    """The ref holding a run's ledger."""
    return layout.ref_name(run_id, "ledger")


def _ensure_clone_id(common_dir: str) -> str:
    """Read ``<common>/sandbox/clone-id``, creating it (exclusively: a link of a whole file) if missing."""
    found = layout.clone_id(common_dir)
    if found is not None:
        return found
    directory = layout.state_dir(common_dir)
    os.makedirs(directory, exist_ok=True)
    final = layout.clone_file(common_dir)
    tmp = os.path.join(directory, f".{layout.CLONE_FILE}.{uuid.uuid4().hex}")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(uuid.uuid4().hex + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, final)  # fails if another process made it first: then theirs is the id
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    found = layout.clone_id(common_dir)
    if found is None:
        raise SandboxError(f"{final} is not a clone id; remove it and run the command again.")
    return found


class Ledger:
    """One run's ledger: append events durably, read them back, and fold them."""

    def __init__(self, repo: pygit2.Repository, run_id: str, run_dir: str, fold: Fold) -> None:
        self.repo = repo
        #: How the events fold into the state :meth:`state` returns (:data:`sandbox.run.fold.FOLD`).
        self.fold = fold
        self.run_id = run_id
        self.ref = ledger_ref(run_id)
        self.run_dir = run_dir
        self.cache_path = os.path.join(run_dir, integrity.CACHE_FILE)
        self.lock = run_lock(os.path.join(run_dir, layout.LOCK_FILE), f"Run {run_id}")
        self._state: LedgerState | None = None
        self._key: bytes | None = None
        self._resave = False
        #: The tip of the fold cache on disk, as far as this process knows (read or written by it).
        self._cached_tip: str | None = None
        #: Derived state that did not match the ledger and was rebuilt (one sentence each); the CLI
        #: prints them and ``resume`` reports them.
        self.problems: list[str] = []
        #: This clone's id (see :func:`ensure_clone`): shown with events; what is this clone's is
        #: decided by :attr:`owner` (see :mod:`sandbox.store.provenance`).
        self.clone = layout.clone_id(repo.path)
        self._owner: provenance.Key | None | bool = False  # False: not looked up yet
        self._adopted: frozenset[str] = frozenset()
        self._state_adopted = ""  # the adopted list's MAC (provenance.adopted_id) _state was folded with

    def new_state(self) -> LedgerState:
        """An empty fold for this clone (fold a ledger's events into it)."""
        return LedgerState(clone=self.clone, foreign=0)

    def ensure_clone(self) -> str:
        """This clone's id, made on first use (a random id in ``<common>/sandbox/clone-id``).

        Before it exists no event carries it, so a fold made without it stays valid with it.
        """
        if self.clone is None:
            self.clone = _ensure_clone_id(self.repo.path)
            if self._state is not None and self._state.clone is None:
                self._state = self.fold.fork(self._state)
                self._state.clone = self.clone
        return self.clone

    @property
    def owner(self) -> provenance.Key | None:
        """This clone's provenance key, made on first need (None: it cannot be made here, e.g. a
        read-only repository: then no event reads as this clone's)."""
        if self._owner is False:
            try:
                key, made = provenance.ensure(self.repo.path, lambda: ledger_tips(self.repo))
            except (OSError, SandboxError):
                self._owner = None
                return None
            note = provenance.notice(made) if made is not None else None
            if note is not None:
                self.problems.append(note)
            self._owner = key
            self._adopted = provenance.adopted(self.repo.path, self.run_id, key)
        return self._owner if isinstance(self._owner, provenance.Key) else None

    def adopt(self) -> int:
        """Count every event of the ledger, up to its tip, as this clone's (``sandbox adopt``: the user
        says the run is theirs); how many events were not before."""
        key, tip = self.owner, self.tip()
        if key is None or tip is None:
            raise SandboxError(
                f"Run {self.run_id} cannot be adopted: this repository's provenance key cannot be made "
                "or the run has no ledger; check that .git/sandbox is writable."
            )
        added = provenance.adopt_run(self.repo.path, key, self.run_id, tip)
        self._adopted = provenance.adopted(self.repo.path, self.run_id, key)
        self._state = None
        return added

    def _own(self, oid: str, head: str, body: str) -> bool:
        key = self.owner
        if key is None:
            return False
        return key.verify(self.run_id, body, provenance.message_mac(head)) or oid in self._adopted

    # -- reading -------------------------------------------------------------------------------

    def tip(self) -> str | None:
        """The id of the newest event commit, or None when the ledger does not exist."""
        try:
            ref = self.repo.references.get(self.ref)
        except pygit2.GitError as exc:
            raise CorruptionError(f"The ledger ref {self.ref} cannot be read ({exc}).") from exc
        if ref is None:
            return None
        return str(ref.target)

    def exists(self) -> bool:
        """True when the run's ledger ref exists (:class:`LedgerDamagedError` if it vanished)."""
        return integrity.check(self.repo, self.run_id, self.run_dir, self.tip()) is not None

    def key(self, tip: str | None) -> bytes | None:
        """The ledger's MAC key for its fold cache (None for a ledger written before keys existed)."""
        if self._key is None:
            self._key = integrity.key_at(self.repo, tip)
        return self._key

    def _read(self, oid: str) -> tuple[Event, str | None]:
        try:
            commit = objects.read_commit(self.repo, oid)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise CorruptionError(
                f"Ledger event {oid} of run {self.run_id} is missing or damaged ({exc}); "
                "the ledger cannot be trusted past this point."
            ) from exc
        message, parents = commit.message, commit.parents
        head, _, body = message.partition("\n\n")
        if not head.startswith(MESSAGE_PREFIX):
            raise CorruptionError(f"Commit {oid} on {self.ref} is not a sandbox ledger event.")
        try:
            event = from_json(Event, body)
        except ValueError as exc:  # JSON or validation error (pydantic's is a ValueError)
            first = str(exc).splitlines()[0]
            raise CorruptionError(f"Ledger event {oid} of run {self.run_id} does not parse ({first}).") from exc
        if event.version != FORMAT_VERSION:
            raise CorruptionError(
                f"Ledger event {oid} has format version {event.version}; this sandbox reads {FORMAT_VERSION}."
            )
        why = eventdata.refusal(event)  # typed when read as when written: never folded as if fine
        if why is not None:
            raise CorruptionError(
                f"Ledger event {oid} of run {self.run_id} {why}; the ledger cannot be trusted past this point."
            )
        prev = None if head.startswith(ROOT_PREFIX) or not parents else parents[0]
        event.mark_own(self._own(oid, head, body))
        return event, prev

    def _walk_back(self, tip: str | None, stop: str | None) -> list[tuple[str, Event]]:
        """Events from ``tip`` back to (excluding) ``stop``, oldest first; raises if ``stop`` unseen."""
        out: list[tuple[str, Event]] = []
        oid = tip
        while oid is not None and oid != stop:
            event, prev = self._read(oid)
            out.append((oid, event))
            oid = prev
        if stop is not None and oid != stop:
            raise LookupError(stop)
        out.reverse()
        return out

    def events(self) -> list[tuple[str, Event]]:
        """All events, oldest first, with their commit ids."""
        return self._walk_back(self.tip(), None)

    def events_since(self, stop: str | None, tip: str) -> list[tuple[str, Event]]:
        """The events after ``stop`` (None: from the first) up to the one at ``tip``, oldest first;
        :class:`LookupError` when ``stop`` is not on the way (``tip`` does not contain it)."""
        return self._walk_back(tip, stop)

    def events_to(self, tip: str) -> list[tuple[str, Event]]:
        """The events from the first up to the one at commit ``tip``, oldest first."""
        return self._walk_back(tip, None)

    def state(self) -> LedgerState:
        """The fold of the whole ledger, extended incrementally from the cached fold.

        The returned state is shared with the cache and with later callers: treat it as read-only
        (fold into ``fold.fork()`` of it to derive another). Raises
        :class:`~sandbox.store.integrity.LedgerDamagedError` when the ref was deleted, rewound or rewritten.
        """
        tip = self.tip()
        adopted = provenance.adopted_id(self.repo.path, self.run_id)
        if adopted != self._state_adopted:  # `sandbox adopt` since (in another process): fold anew,
            self._state, self._owner, self._cached_tip = None, False, None  # key, list looked up again
        if self._state is not None and self._state.tip == tip:
            return self._state
        tip = integrity.check(self.repo, self.run_id, self.run_dir, tip)
        base = self._state if self._state is not None else self._load_cache(tip, adopted)
        self._state_adopted = adopted
        if base is not None and base.clone != self.clone:
            if base.clone is None:  # folded before this clone had an id: no event carried it
                base = self.fold.fork(base)
                base.clone = self.clone
            else:
                base = None
        if base is not None and base.tip == tip:
            self._state = base
            return base
        new: list[tuple[str, Event]] | None = None
        if base is not None and base.tip is not None:
            try:
                new = self._walk_back(tip, base.tip)
            except LookupError:
                new = None
        if new is None or base is None:
            base = self.new_state()
            new = self._walk_back(tip, None)
        state = self.fold.fork(base)
        for oid, event in new:
            self.fold.event(state, event, oid)
        self._state = state
        if len(new) >= CACHE_EVERY or self._resave:
            self._resave = False  # a cache that failed its check is replaced at once
            self.save_cache(state)
        return state

    def adopt_verified(self, fresh: LedgerState) -> bool:
        """Compare the derived fold with ``fresh`` (a fold of every event); adopt it. True if they differed."""
        derived = self._state
        if derived is None or derived.tip != fresh.tip:
            return False
        differed = derived.model_dump(warnings=False) != fresh.model_dump(warnings=False)
        if differed:
            self._state = fresh
            self.save_cache(fresh)
        return differed

    def _load_cache(self, tip: str | None, adopted: str) -> LedgerState | None:
        try:
            with open(self.cache_path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            return None
        state_json, forged = integrity.open_cache(self.key(tip), text, adopted)
        if forged:
            self._resave = True
            self.problems.append(
                f"The ledger cache of run {self.run_id} did not match the ledger (it was edited or damaged); "
                "it was ignored and rebuilt from the ledger's events."
            )
        if state_json is None:
            return None
        try:
            state = from_json(LedgerState, state_json)
        except (ValidationError, ValueError):
            return None
        if state.version != FORMAT_VERSION or state.foreign is None:
            return None  # another format, or folded before the events from elsewhere were counted
        self._cached_tip = state.tip
        return state

    def save_cache(self, state: LedgerState) -> None:
        """Write the fold cache for ``state`` (sealed with the ledger's key; not synced)."""
        # Not synced: a cache lost or cut short by a power cut fails to parse and is rebuilt from
        # the ledger (which is durable), and one with an older tip is extended from it.
        key = self.key(state.tip)
        if key is None:
            return  # a ledger without a key: its cache could not be verified, so none is kept
        with contextlib.suppress(OSError):
            write_json_file(self.cache_path, integrity.seal_cache(key, to_json(state), self._state_adopted), sync=False)
            self._cached_tip = state.tip

    def seal(self) -> None:
        """Bring the fold cache up to the ledger's tip if it is behind (read commands call this, so
        the next one reads it without git or pydantic: see :mod:`sandbox.fast.foldcache`)."""
        state = self.state()
        # Never made again for a run a drop or gc removed meanwhile (the write would make its directory).
        if state.tip is not None and state.tip != self._cached_tip and os.path.isdir(self.run_dir):
            self.save_cache(state)

    # -- writing -------------------------------------------------------------------------------

    def append(
        self,
        event: Event,
        *,
        keep: list[str] | None = None,
        attachments: Mapping[str, bytes] | None = None,
        check: Callable[[LedgerState], None] | None = None,
    ) -> LedgerState:
        """Append one event durably and return the new fold.

        ``keep`` lists commits the event refers to (made parents so they stay reachable);
        ``attachments`` are stored as blobs in the event commit's tree; ``check`` runs on the
        current fold under the lock and may raise to refuse the append (fencing, transitions).
        """
        objects.enable_fsync()
        with self.lock.hold():
            state = self.state()
            if check is not None:
                check(state)
            if event.event_id in state.event_ids:
                return state
            faults.point("ledger.append.before")
            if state.tip is None and event.kind != EventKind.run_started:
                integrity.check(self.repo, self.run_id, self.run_dir, None)  # vanished, not dropped?
                # The run was dropped (or never finished starting): never bring it back to life.
                raise UnknownRunError(f"Run {self.run_id} no longer exists (it was dropped); nothing was recorded.")
            try:
                new_oid = self._write_event(state, event, keep, attachments)
            except (pygit2.GitError, OSError, ValueError) as exc:
                self._state = None  # re-derive from disk: never trust a fold the failure may have skewed
                landed = self._landed(event)
                if landed is not None:  # the ref moved before the error (e.g. a full disk at fsync)
                    new_oid = landed
                else:
                    what = "the call did not start" if event.kind == EventKind.call_started else "earlier events stay"
                    raise StorageError(
                        f"Could not append to the ledger of run {self.run_id} ({exc}); this {event.kind.value} "
                        f"event was not recorded ({what}). If the disk is full, free some space and try again.",
                        reason=str(exc),
                    ) from exc
            integrity.write_ack(self.run_dir, self.run_id, str(new_oid), state.count + 1)
            faults.point("ledger.append.after")
            event.mark_own(self.owner is not None)
            state = self.fold.event(self.fold.fork(state), event, str(new_oid))
            self._state = state
            if state.count % CACHE_EVERY == 0:
                self.save_cache(state)
            return state

    def _landed(self, event: Event) -> str | None:
        """The commit holding ``event`` if it is the ledger's tip after all, else None."""
        try:
            tip = self.tip()
            if tip is None:
                return None
            found, _prev = self._read(tip)
        except (SandboxError, OSError):
            return None
        return tip if found.event_id == event.event_id else None

    def _write_event(
        self,
        state: LedgerState,
        event: Event,
        keep: list[str] | None,
        attachments: Mapping[str, bytes] | None,
    ) -> str:
        """Write the event's objects and commit, moving the ref (compare-and-swap); its id.

        The objects go into the caller's batch (a call's blob, trees and commit, then the event), made
        durable in one write just before the ref moves (see :mod:`sandbox.store.packs`).
        """
        with objects.batch(self.repo) as pending:
            tree = objects.EMPTY_TREE_HEX
            blobs = {
                name: objects.Entry(objects.MODE_FILE, objects.write_blob(self.repo, data))
                for name, data in (attachments or {}).items()
            }
            key_entry = self._key_entry(state.tip)
            if key_entry is not None:
                blobs[integrity.KEY_NAME] = key_entry
            if attachments:
                tree = objects.write_tree(self.repo, blobs)
            elif blobs:
                tree = objects.ensure_tree(self.repo, blobs)  # the same key-only tree for every event
            else:
                self._ensure_empty_tree()
            parents: list[str] = [state.tip] if state.tip else []
            for oid in keep or []:
                if oid and oid not in parents:
                    parents.append(oid)
            prefix = MESSAGE_PREFIX if state.tip else ROOT_PREFIX
            message = f"{prefix} {event.kind.value} {event.call_id or ''}".rstrip()
            body = to_json(event) + "\n"
            key = self.owner
            if key is not None:  # this clone's word (sandbox.store.provenance): never the JSON's own claim
                message += f"\n{provenance.MAC_PREFIX}{key.mac(self.run_id, body)}"
            message += "\n\n" + body
            new_oid = objects.write_commit(self.repo, tree, parents, message, objects.now())
            self._clear_stale_ref_lock()
            # The compare-and-swap: the ref moves only if its tip is still the first parent (is made
            # only if there is none). Its new content is synced with the objects', the objects made
            # durable before the ref moves.
            update = durable.lock_ref(self.repo, objects.common_dir(self.repo), self.ref, state.tip, new_oid)
            durable.flush_with(pending.flush, update)
            return new_oid

    def _clear_stale_ref_lock(self) -> None:
        """Remove ``<ledger ref>.lock`` left by a process killed inside its ref update.

        Called under the ledger lock, which every writer of this ref holds: a lock file found now
        belongs to a dead process, and would refuse every later append (found by random kill -9).
        """
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(objects.common_dir(self.repo), self.ref + ".lock"))

    def _key_entry(self, tip: str | None) -> objects.Entry | None:
        """The MAC key's tree entry for the next event: a new key for a new ledger, else the tip's."""
        if tip is None:
            self._key = integrity.new_key()
            return objects.Entry(objects.MODE_FILE, objects.write_blob(self.repo, self._key))
        entry = objects.lookup(self.repo, objects.commit_tree(self.repo, tip), integrity.KEY_NAME)
        return entry if entry is not None and not entry.is_tree else None

    def _ensure_empty_tree(self) -> None:
        if objects.EMPTY_TREE_HEX not in self.repo.odb:
            objects.write_tree(self.repo, {})


def ledger_tips(repo: pygit2.Repository) -> dict[str, str]:
    """Every run's ledger tip in ``repo``: {run id: commit id}."""
    out: dict[str, str] = {}
    for name in repo.references:
        if name.startswith("refs/sandbox/") and name.endswith("/ledger"):
            run_id = name[len("refs/sandbox/") : -len("/ledger")]
            if layout.valid_run_id(run_id):
                with contextlib.suppress(pygit2.GitError, KeyError):
                    out[run_id] = str(repo.references[name].target)
    return out


@dataclass
class RepairReport:
    """What :func:`repair` found and did."""

    run_id: str
    problem: str | None
    restored: str | None = None
    #: The commit the damaged ref pointed at (kept in git's object store until its own gc).
    replaced: str | None = None
    events: int = 0


def repair(
    repo: pygit2.Repository,
    run_id: str,
    run_dir: str,
    lock: contextlib.AbstractContextManager[None],
    fold: Fold,
) -> RepairReport:
    """Restore a deleted, rewound or rewritten ledger ref to the acknowledged tip.

    The acknowledged tip's whole chain is read first (every event must parse and belong to this
    run); only then is the ref set, so a repair never installs a ledger it cannot read.
    """
    with lock:
        ack = integrity.read_ack(run_dir)
        tip = integrity.ref_tip(repo, run_id)
        if ack is None or ack.run_id != run_id:
            if tip is None:
                raise SandboxError(
                    f"Run {run_id} has neither a ledger ref nor an acknowledged tip; there is nothing to restore."
                )
            return RepairReport(run_id, None)
        what = integrity.damage(repo, run_id, ack, tip)
        if what is None:
            return RepairReport(run_id, None)
        probe = Ledger(repo, run_id, run_dir, fold)
        try:
            events = probe.events_to(ack.tip)
        except CorruptionError as exc:
            raise CorruptionError(
                f"The ledger of run {run_id} {what}, and the acknowledged tip {ack.tip[:12]} cannot be read back "
                f"({exc.message}); it cannot be restored."
            ) from exc
        if not events or any(e.run_id != run_id for _oid, e in events):
            raise CorruptionError(f"The acknowledged tip of run {run_id} is not this run's ledger; it is not restored.")
        objects.enable_fsync()
        with objects.git_writes():
            repo.references.create(layout.ref_name(run_id, "ledger"), ack.tip, force=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, integrity.CACHE_FILE))  # derived from the damaged ref, maybe
        return RepairReport(run_id, what, restored=ack.tip, replaced=tip, events=len(events))
