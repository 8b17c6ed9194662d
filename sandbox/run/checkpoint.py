"""Checkpoints: immutable, content-addressed snapshots of a run's session, kept with the run.

Two kinds exist, and they are honest about what they hold:

* **Runtime checkpoints** (``run.checkpoint(...)``, ``sandbox checkpoint``) hold what only the
  runtime knows (message history, opaque run state, budget, trace) together with the ledger's tip
  and the run's head at that moment. Each is a :class:`~sandbox.models.Checkpoint` stored as
  canonical JSON; its id is ``ckpt_`` + 12 hex of the SHA-256 of that JSON with ``id`` empty, so
  ``verify`` re-hashes it. Its name (``ckpt_004``) is a per-run sequence number for humans.
* **Automatic checkpoints** are the ledger's own durable events (run start, call started, call
  finished with its files, apply, rollback, run end). Each already holds the ledger position and
  the run's head commit, so recording a call pays nothing extra for them: they are light
  references (``auto_<event commit>``), materialized on demand by :meth:`CheckpointStore.auto`
  for ``sandbox checkpoints --auto`` and ``rollback --files``. They carry no messages: the
  runtime owns those.

Storage: ``refs/sandbox/<run>/checkpoints`` points at a parentless commit whose tree has one
subtree per kept checkpoint (``<seq>-<id>/``: ``checkpoint.json`` plus its ``messages.json``,
``approvals.json`` and ``trace.json`` blobs). Pruning writes a new commit
without the dropped subtrees, so they become unreachable and ``git gc`` reclaims them; kept ones
are self-contained and never touched. Each save also appends a ``checkpoint`` ledger event
naming the checkpoint's blob and subtree ids *in its message only* (git does not follow ids in
messages), so the ledger is evidence of every checkpoint without keeping pruned ones alive; when
the ref is missing or unreadable, checkpoints whose objects still exist are recovered from that
evidence. A damaged object (zlib error, hash mismatch, bad JSON, failed validation) is reported
and skipped, never read as valid.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import pygit2
from pydantic import ValidationError

from sandbox import faults
from sandbox.errors import SandboxError, UsageError
from sandbox.models import (
    FORMAT_VERSION,
    Budget,
    Checkpoint,
    EventKind,
    FileChange,
    FileSnapshot,
    LedgerEntry,
    LedgerSnapshot,
    LedgerState,
)
from sandbox.models.payloads import CheckpointLogged
from sandbox.run.core import RunCore
from sandbox.run.fold import fold_event
from sandbox.store import layout, objects, trailers

DEFAULT_RETENTION = 20
#: Repository-local git config key (``git config sandbox.checkpointRetention 50``).
RETENTION_KEY = "sandbox.checkpointRetention"
AUTO_PREFIX = "auto_"
#: Ledger events that are automatic checkpoints (each holds the ledger position and the head).
AUTO_KINDS = frozenset(
    {
        EventKind.run_started,
        EventKind.call_started,
        EventKind.call_succeeded,
        EventKind.call_failed,
        EventKind.apply_finished,
        EventKind.rollback_files,
        EventKind.undo,
        EventKind.redo,
        EventKind.run_ended,
    }
)

faults.POINTS.update(
    {
        "checkpoint.save.before",
        "checkpoint.save.after_blobs",
        "checkpoint.save.after_commit",
        "checkpoint.save.after_ref",
        "checkpoint.save.after_ledger",
    }
)


class CheckpointNotFoundError(SandboxError):
    """No checkpoint of the run matches the given id, name or label."""

    exit_code = 2


def checkpoints_ref(run_id: str) -> str:
    """The ref holding a run's kept checkpoints."""
    return layout.ref_name(run_id, "checkpoints")


def checkpoint_id(ckpt: Checkpoint) -> str:
    """The content address of a checkpoint: ``ckpt_`` + 12 hex of its canonical JSON without id."""
    body = ckpt.model_dump(mode="json")
    body["id"] = ""
    return "ckpt_" + hashlib.sha256(layout.canonical_json(body, ascii_only=True)).hexdigest()[:12]


@dataclass
class SessionState:
    """What the runtime hands to :meth:`CheckpointStore.save` (all optional, all opaque JSON)."""

    messages: Any = None
    run_state: Any = None
    step_id: str | None = None
    budget: Budget | dict[str, object] | None = None
    approvals: Any = None
    trace: Any = None
    trace_ref: str | None = None


@dataclass
class StoredCheckpoint:
    """A checkpoint that passed its checks, with where it is stored."""

    checkpoint: Checkpoint
    tree: str | None
    blob: str | None

    @property
    def name(self) -> str:
        """The human name (``ckpt_004``, or ``auto_<event>`` for an automatic one)."""
        return self.checkpoint.name


@dataclass
class Listing:
    """The run's checkpoints that verify (oldest first) and the problems found on the way."""

    checkpoints: list[StoredCheckpoint] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    recovered: bool = False

    def latest(self) -> StoredCheckpoint | None:
        """The newest good checkpoint, or None."""
        return self.checkpoints[-1] if self.checkpoints else None


_BLOB = pygit2.enums.ObjectType.BLOB
_TREE = pygit2.enums.ObjectType.TREE
_COMMIT = pygit2.enums.ObjectType.COMMIT


class _Damaged(Exception):
    """A stored object failed a check (unreadable, wrong hash, wrong type, invalid content)."""


def _read_raw(repo: pygit2.Repository, oid: str, kind: Any) -> bytes:
    """An object's bytes, verified (see :func:`sandbox.store.objects.read_object`); :class:`_Damaged` if not."""
    try:
        got_kind, data = objects.read_object(repo, oid)
    except objects.DamagedObjectError as exc:
        raise _Damaged(str(exc).replace(oid, oid[:12])) from None
    if got_kind != int(kind):
        raise _Damaged(f"object {oid[:12]} has the wrong type")
    return data


class CheckpointStore:
    """A run's checkpoint store: save, list, verify, load, prune, roll back."""

    def __init__(self, run: RunCore, retention: int | None = None) -> None:
        self.run = run
        self.repo = run.repo
        self.ref = checkpoints_ref(run.run_id)
        self.retention = retention if retention is not None else self._configured_retention()

    def _configured_retention(self) -> int:
        # Only the repository's own config file: the library reads no user-global settings.
        try:
            config = pygit2.Config(os.path.join(self.run.project.common_dir, "config"))
            value = int(str(config[RETENTION_KEY]))
        except (KeyError, ValueError, pygit2.GitError):
            return DEFAULT_RETENTION
        return max(value, 1)

    # -- reading -------------------------------------------------------------------------------

    def _load_subtree(self, name: str, tree_oid: str) -> StoredCheckpoint:
        """Read and check one checkpoint subtree (raises :class:`_Damaged`)."""
        _read_raw(self.repo, tree_oid, _TREE)  # verified before libgit2 parses it
        entries = objects.read_tree(self.repo, tree_oid)
        meta = entries.get("checkpoint.json")
        if meta is None:
            raise _Damaged("checkpoint.json is missing")
        data = _read_raw(self.repo, meta.oid, _BLOB)
        try:
            ckpt = Checkpoint.model_validate(json.loads(data))
        except (ValidationError, ValueError) as exc:
            raise _Damaged(f"checkpoint.json does not parse ({str(exc).splitlines()[0]})") from None
        if ckpt.version != FORMAT_VERSION:
            raise _Damaged(f"format version {ckpt.version} is unknown")
        if ckpt.run_id != self.run.run_id:
            raise _Damaged(f"it belongs to run {ckpt.run_id}")
        if checkpoint_id(ckpt) != ckpt.id:
            raise _Damaged("its content does not match its id")
        for blob_name, ref in (
            ("messages.json", ckpt.messages_ref),
            ("approvals.json", ckpt.approvals_ref),
            ("ledger.json", ckpt.tool_ledger.entries_ref),
        ):
            entry = entries.get(blob_name)
            if (entry.oid if entry else None) != ref:
                raise _Damaged(f"{blob_name} does not match the checkpoint")
        if name and not name.endswith(ckpt.id):
            raise _Damaged(f"it is stored under the wrong name {name}")
        return StoredCheckpoint(ckpt, tree_oid, meta.oid)

    def verify(self, stored: StoredCheckpoint) -> None:
        """Deep check: every blob a checkpoint refers to reads back intact (raises :class:`_Damaged`)."""
        ckpt = stored.checkpoint
        for ref in (ckpt.messages_ref, ckpt.approvals_ref, ckpt.tool_ledger.entries_ref):
            if ref:
                _read_raw(self.repo, ref, _BLOB)
        if stored.tree is not None:
            trace = objects.read_tree(self.repo, stored.tree).get("trace.json")
            if trace is not None:
                _read_raw(self.repo, trace.oid, _BLOB)
        for commit in (ckpt.file_snapshot.commit, ckpt.tool_ledger.tip):
            if commit and commit not in self.repo.odb:
                raise _Damaged(f"commit {commit[:12]} it refers to is missing")

    def _store_entries(self) -> tuple[dict[str, str] | None, builtins.list[str]]:
        """The store's ``{name: subtree}``, or None (with a problem) when the ref is absent/damaged."""
        try:
            ref = self.repo.references.get(self.ref)
        except pygit2.GitError as exc:
            return None, [f"The checkpoints ref {self.ref} cannot be read ({exc})."]
        if ref is None:
            return None, []
        oid = str(ref.target)
        try:
            data = _read_raw(self.repo, oid, _COMMIT)
            tree_line = data.split(b"\n", 1)[0]
            if not tree_line.startswith(b"tree "):
                raise _Damaged("not a commit")
            tree = tree_line[5:].decode()
            _read_raw(self.repo, tree, _TREE)
            entries = objects.read_tree(self.repo, tree)
        except (_Damaged, ValueError, UnicodeDecodeError) as exc:
            return None, [f"The checkpoint store commit {oid[:12]} is damaged ({exc})."]
        return {name: e.oid for name, e in entries.items() if e.is_tree}, []

    def _evidence(self, state: LedgerState | None = None) -> builtins.list[CheckpointLogged]:
        state = state if state is not None else self.run.state()
        return [d for d in state.data.checkpoint if d.get("tree")]

    def list(self, *, deep: bool = False) -> Listing:
        """Every checkpoint that passes its checks, oldest first, with the problems found.

        ``deep`` also re-reads every blob a checkpoint refers to. When the ref is missing or its
        commit is damaged, checkpoints are recovered from the ledger's evidence.
        """
        listing = Listing()
        stored, problems = self._store_entries()
        listing.problems.extend(problems)
        if stored is None:
            evidence = self._evidence()
            if evidence:
                if not problems:
                    listing.problems.append(f"The checkpoints ref {self.ref} is missing.")
                listing.recovered = True
                stored = {f"{int(d.get('seq', 0)):08d}-{d['id']}": d["tree"] for d in evidence}
                listing.problems[-1] += f" {len(stored)} checkpoint(s) were looked up from the ledger's evidence."
            else:
                stored = {}
        seen: set[str] = set()
        for name in sorted(stored):
            try:
                item = self._load_subtree(name, stored[name])
                if deep:
                    self.verify(item)
            except _Damaged as exc:
                listing.problems.append(f"Checkpoint {_describe(name)} is damaged ({exc}); it is skipped.")
                continue
            if item.checkpoint.id in seen:
                continue
            seen.add(item.checkpoint.id)
            listing.checkpoints.append(item)
        listing.checkpoints.sort(key=lambda s: s.checkpoint.seq)
        return listing

    def load_latest(self) -> tuple[StoredCheckpoint | None, builtins.list[str]]:
        """The newest checkpoint that passes the deep check, and the problems met (newer bad ones)."""
        listing = self.list()
        problems = list(listing.problems)
        for item in reversed(listing.checkpoints):
            try:
                self.verify(item)
            except _Damaged as exc:
                problems.append(f"Checkpoint {item.name} ({item.checkpoint.id}) is damaged ({exc}); it is skipped.")
                continue
            return item, problems
        return None, problems

    def find(self, ref: str) -> StoredCheckpoint:
        """The checkpoint named by id, id prefix, name (``ckpt_004``), label, or ``auto_<event>``."""
        if ref.startswith(AUTO_PREFIX):
            for auto in self.auto():
                if auto.checkpoint.id.startswith(ref) or ref.startswith(auto.checkpoint.id):
                    return auto
            raise CheckpointNotFoundError(f"Run {self.run.run_id} has no automatic checkpoint {ref!r}.")
        listing = self.list()
        good = listing.checkpoints
        tests: builtins.list[Callable[[Checkpoint], bool]] = [
            lambda c: c.id == ref,
            lambda c: c.name == ref,
            lambda c: len(ref) >= 9 and c.id.startswith(ref),
            lambda c: c.label == ref,
        ]
        for test in tests:
            matches = [s for s in good if test(s.checkpoint)]
            if matches:
                item = matches[-1]
                try:
                    self.verify(item)
                except _Damaged as exc:
                    raise SandboxError(f"Checkpoint {item.name} is damaged ({exc}); pick another one.") from None
                return item
        extra = f" ({'; '.join(listing.problems)})" if listing.problems else ""
        raise CheckpointNotFoundError(
            f"Run {self.run.run_id} has no checkpoint {ref!r}{extra}; see 'sandbox checkpoints {self.run.run_id}'."
        )

    def messages(self, ckpt: Checkpoint) -> Any:
        """The message history a checkpoint refers to (None when it has none)."""
        return self._json_blob(ckpt.messages_ref)

    def ledger_entries(self, ckpt: Checkpoint) -> builtins.list[LedgerEntry]:
        """The tool-ledger entries as of a checkpoint, materialized from its ledger tip.

        A checkpoint stores the tip (a commit id that content-addresses every event before it)
        rather than a copy of the entries, so saving stays O(changed files), not O(calls).
        """
        if ckpt.tool_ledger.entries_ref:
            return [LedgerEntry.model_validate(e) for e in self._json_blob(ckpt.tool_ledger.entries_ref)]
        state = self.run.new_state()
        if ckpt.tool_ledger.tip:
            for oid, event in self.run.events(ckpt.tool_ledger.tip):
                fold_event(state, event, oid)
        return [state.calls[c] for c in state.order]

    def _json_blob(self, oid: str | None) -> Any:
        if oid is None:
            return None
        try:
            return json.loads(_read_raw(self.repo, oid, _BLOB))
        except (_Damaged, ValueError) as exc:
            raise SandboxError(f"Blob {oid[:12]} of run {self.run.run_id} is damaged ({exc}).") from None

    # -- automatic checkpoints -----------------------------------------------------------------

    def auto(self) -> builtins.list[StoredCheckpoint]:
        """The automatic checkpoints (ledger events), materialized by folding the ledger: O(events)."""
        out: builtins.list[StoredCheckpoint] = []
        state = self.run.new_state()
        for oid, event in self.run.events():
            fold_event(state, event, oid)
            if event.kind not in AUTO_KINDS or state.head is None or state.run is None:
                continue
            label = event.kind.value + (f" {event.call_id}" if event.call_id else "")
            ckpt = Checkpoint(
                id=AUTO_PREFIX + oid[:12],
                seq=0,
                name=AUTO_PREFIX + oid[:12],
                run_id=self.run.run_id,
                label=label,
                kind="auto",
                created_at=event.at,
                step_id=state.calls[event.call_id].step_id if event.call_id in state.calls else None,
                tool_ledger=LedgerSnapshot(tip=oid, count=state.count, epoch=state.epoch),
                file_snapshot=objects_snapshot(self.repo, state.run.base, state.head, with_files=False),
            )
            out.append(StoredCheckpoint(ckpt, None, None))
        return out

    # -- writing -------------------------------------------------------------------------------

    def save(self, state: SessionState | None = None, label: str | None = None) -> Checkpoint:
        """Save a runtime checkpoint durably and return it (prunes beyond the retention setting)."""
        session = state or SessionState()
        if label is not None:
            from sandbox.run.labels import check_label

            check_label(label, "checkpoint")
        budget = _budget_of(session)
        run = self.run
        objects.enable_fsync()
        with run.lock():
            faults.point("checkpoint.save.before")
            ledger_state = run.state()
            assert ledger_state.run is not None and ledger_state.head is not None
            listing = self.list()
            seqs = [c.checkpoint.seq for c in listing.checkpoints]
            seqs += [int(d.get("seq", 0)) for d in self._evidence(ledger_state)]
            seq = max(seqs, default=0) + 1
            blobs: dict[str, bytes] = {}
            if session.messages is not None:
                blobs["messages.json"] = _as_bytes(session.messages)
            blobs["approvals.json"] = layout.canonical_json(
                {"ledger": _ledger_approvals(ledger_state), "runtime": session.approvals}, ascii_only=True
            )
            if session.trace is not None:
                blobs["trace.json"] = _as_bytes(session.trace)
            oids = {name: objects.write_blob(self.repo, data) for name, data in blobs.items()}
            ckpt = Checkpoint(
                seq=seq,
                name=f"ckpt_{seq:03d}",
                run_id=run.run_id,
                step_id=session.step_id,
                label=label,
                messages_ref=oids.get("messages.json"),
                run_state=session.run_state,
                tool_ledger=LedgerSnapshot(
                    tip=ledger_state.tip,
                    count=ledger_state.count,
                    epoch=ledger_state.epoch,
                ),
                file_snapshot=objects_snapshot(self.repo, ledger_state.run.base, ledger_state.head),
                approvals_ref=oids["approvals.json"],
                budget=budget,
                trace_ref=oids.get("trace.json", session.trace_ref),
            )
            ckpt.id = checkpoint_id(ckpt)
            body = layout.canonical_json(ckpt.model_dump(mode="json"), ascii_only=True)
            sub = {name: objects.Entry(objects.MODE_FILE, oid) for name, oid in oids.items()}
            sub["checkpoint.json"] = objects.Entry(objects.MODE_FILE, objects.write_blob(self.repo, body))
            subtree = objects.write_tree(self.repo, sub)
            faults.point("checkpoint.save.after_blobs")
            pruned = self._store_with(listing, f"{seq:08d}-{ckpt.id}", subtree)
            event = run.new_event(
                EventKind.checkpoint,
                epoch=ledger_state.epoch,
                data={
                    "id": ckpt.id,
                    "seq": seq,
                    "name": ckpt.name,
                    "label": label,
                    "step_id": session.step_id,
                    "blob": sub["checkpoint.json"].oid,
                    "tree": subtree,
                    "head": ledger_state.head,
                    "pruned": [p.split("-", 1)[1] for p in pruned],
                },
            )
            run.record_event(event)
            faults.point("checkpoint.save.after_ledger")
        return ckpt

    def _store_with(self, listing: Listing, name: str, subtree: str) -> builtins.list[str]:
        """Point the store ref at a new commit keeping ``listing``'s checkpoints and ``subtree`` (as
        ``name``), less the oldest beyond the retention setting; the names of those pruned."""
        kept = [(f"{c.checkpoint.seq:08d}-{c.checkpoint.id}", c.tree) for c in listing.checkpoints if c.tree]
        kept.append((name, subtree))
        pruned = [n for n, _ in kept[: max(len(kept) - self.retention, 0)]]
        kept = kept[len(pruned) :]
        top = objects.write_tree(self.repo, {n: objects.Entry(objects.MODE_TREE, t) for n, t in kept if t})
        sig = objects.signature()
        run_id = self.run.run_id
        # Parentless on purpose: a history of store commits would keep pruned checkpoints alive.
        message = trailers.message(f"sandbox checkpoints of run {run_id}", [(trailers.RUN, run_id)])
        with objects.git_writes():
            commit = self.repo.create_commit(None, sig, sig, message, top, [])
        faults.point("checkpoint.save.after_commit")
        with objects.git_writes():
            self.repo.references.create(self.ref, commit, force=True)
        faults.point("checkpoint.save.after_ref")
        return pruned

    def repair(self, listing: Listing) -> bool:
        """Rewrite the store ref from a listing recovered from evidence; True when it wrote one."""
        if not listing.recovered or not listing.checkpoints:
            return False
        with self.run.lock():
            kept = {
                f"{c.checkpoint.seq:08d}-{c.checkpoint.id}": objects.Entry(objects.MODE_TREE, c.tree)
                for c in listing.checkpoints[-self.retention :]
                if c.tree
            }
            top = objects.write_tree(self.repo, kept)
            sig = objects.signature()
            message = trailers.message(
                f"sandbox checkpoints of run {self.run.run_id} (repaired)", [(trailers.RUN, self.run.run_id)]
            )
            with objects.git_writes():
                commit = self.repo.create_commit(None, sig, sig, message, top, [])
            with objects.git_writes():
                self.repo.references.create(self.ref, commit, force=True)
        return True

    def capture_before_write(self, path: str) -> None:
        """Note, in O(1), that this process is about to write ``path`` (see
        :func:`sandbox.run.beforewrite.capture_before_write`)."""
        from sandbox.run.beforewrite import capture_before_write

        capture_before_write(self.run, path)


def _describe(name: str) -> str:
    seq, _, ident = name.partition("-")
    with contextlib.suppress(ValueError):
        return f"ckpt_{int(seq):03d} ({ident})"
    return name


def _as_bytes(value: Any) -> bytes:
    return bytes(value) if isinstance(value, (bytes, bytearray)) else layout.canonical_json(value, ascii_only=True)


def _budget_of(session: SessionState) -> Budget | None:
    """The session's budget as the model (a dict is validated; :class:`UsageError` says what is wrong)."""
    budget = session.budget
    if isinstance(budget, dict):
        try:
            return Budget.model_validate(budget)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "budget"
            raise UsageError(f"The budget is not valid: {where}: {err['msg']}.") from None
    return budget


class LedgerApproval(TypedDict):
    """A user's answer to a call, as a checkpoint keeps it (in ``approvals.json``, beside the runtime's)."""

    call_id: str
    tool_name: str
    input_hash: str
    approval: str
    reason: str | None


def _ledger_approvals(state: LedgerState) -> list[LedgerApproval]:
    out: list[LedgerApproval] = []
    for call_id in state.order:
        entry = state.calls[call_id]
        if entry.approval is not None:
            out.append(
                {
                    "call_id": call_id,
                    "tool_name": entry.tool_name,
                    "input_hash": entry.input_hash,
                    "approval": entry.approval.value,
                    "reason": entry.denial_reason,
                }
            )
    return out


def objects_snapshot(repo: pygit2.Repository, base: str, head: str, with_files: bool = True) -> FileSnapshot:
    """The :class:`~sandbox.models.FileSnapshot` of ``head``: each path changed since ``base``.

    Costs O(changed paths of the run): identical subtrees are skipped.
    """
    files: list[FileChange] = []
    if with_files:
        base_tree = objects.commit_tree(repo, base)
        head_tree = objects.commit_tree(repo, head)
        for change in objects.diff_trees(repo, base_tree, head_tree):
            files.append(objects.file_change(change.path, change.old, change.new, f"{base}..{head}"))
    return FileSnapshot(commit=head, base=base, files=files)
