"""A run's state and its one write path: what :class:`~sandbox.run.run.Run` stands on.

Refs of a run (never under refs/heads, refs/tags or refs/stash)::

    refs/sandbox/<run>/base     the snapshot of the user's working tree the run started from
    refs/sandbox/<run>/head     the run's newest recorded state (a commit per changing call)
    refs/sandbox/<run>/ledger   the event log (see :mod:`sandbox.store.ledger`)

The ledger is the source of truth: ``head`` is a convenience ref kept equal to the ledger's head
and repaired from it when a crash left it behind. :class:`RunCore` makes, reads, writes and drops a
run; the operations on its calls (:mod:`sandbox.run.calls`, :mod:`sandbox.run.recording`,
:mod:`sandbox.run.approvals`, :mod:`sandbox.run.checkpoint`) take a ``RunCore`` and write only through
:meth:`RunCore.record` and :meth:`RunCore.move_head`; :class:`~sandbox.run.run.Run` names them all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pygit2

from sandbox import faults
from sandbox.errors import CorruptionError, SandboxError, UnknownCallError, UnknownRunError
from sandbox.models import Event, EventKind, LedgerEntry, LedgerState, RunInfo, eventdata
from sandbox.run.fold import FOLD
from sandbox.store import integrity, layout, objects, repository
from sandbox.store.ledger import Ledger, StorageError, new_event_id
from sandbox.store.project import Project

if TYPE_CHECKING:
    # typing has Self from Python 3.11 on; the library runs on 3.10 too.
    from typing_extensions import Self

    from sandbox.run.prestart import Prestart
    from sandbox.store.rulemirror import RuleMirror

faults.POINTS.update(
    {
        "drop.after_ledger_ref",
        "drop.after_worktree",
        "drop.after_refs",
    }
)


class RunCore:
    """One run of an agent: its state and write path (use :class:`~sandbox.run.run.Run`, which adds
    the operations on its calls). Create runs with :meth:`start`."""

    def __init__(self, project: Project, run_id: str) -> None:
        self.project = project
        #: The run's objects (its own store: :meth:`Project.run_repository`).
        self.repo = project.run_repository(run_id)
        self.run_id = run_id
        self.dir = project.run_dir(run_id)
        # Private: every write goes through :meth:`record` / :meth:`move_head`, every read through
        # :meth:`state` / :meth:`events`, so the fold's checks and the lock cannot be bypassed.
        self._ledger = Ledger(self.repo, run_id, self.dir, FOLD)
        self._wt_repo: pygit2.Repository | None = None
        #: The host's copies of the worktree's ignore rules (sandbox.store.rulemirror), made at first use.
        self._rules: RuleMirror | None = None
        self._info: RunInfo | None = None
        self._place: layout.Place | None = None
        self._user_workdir: str | None = None
        self._limits: dict[str, int | None] = {}
        #: What :meth:`start` copied or linked into the worktree (see :mod:`sandbox.run.include`).
        self.include_report: Any = None
        #: Called with (run, relative path) before a write helper changes a file.
        self.before_write_hooks: list[Callable[[RunCore, str], None]] = []
        #: Entered while a recording reads the agent's files: the host lets go of the lock its runs
        #: share for that time (:mod:`sandbox.store.preread`); elsewhere there is no such lock.
        self.outside_shared_lock: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
        #: A scan runs in a child process (the host's: a scan that blocks must not stop its other runs).
        self.scan_in_worker = False
        self._read: tuple[str | None, list[tuple[str, Event]]] | None = None

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def open(cls, project: Project, run_id: str) -> Self:
        """Open an existing run; :class:`UnknownRunError` when it has no ledger."""
        run = cls(project, run_id)
        if not run.exists():
            raise UnknownRunError(f"No run {run_id!r} in this repository; see 'sandbox list'.")
        return run

    @classmethod
    def start(
        cls,
        project: Project,
        workdir: str,
        label: str | None = None,
        progress: Callable[[str], None] | None = None,
        begun: Prestart | None = None,
    ) -> Self:
        """Snapshot ``workdir`` and create a run: refs, its home (worktree and own git dir), a ledger.

        The home is made under ``project.homes_dir`` and recorded in the run's directory before it
        is created. The run becomes visible (its ledger ref is created) only as the last step; a
        start interrupted earlier leaves pieces that ``sandbox gc`` reclaims. ``progress`` is told
        each step as a line of text, git's own progress meter included (the caller shows them).
        ``begun``: the start's first part, made already (:func:`sandbox.run.prestart.begin`, which
        ``sandbox start`` calls before it imports pygit2); abandoned when it was not begun for
        ``project`` and ``workdir``. The steps are in :mod:`sandbox.run.starting`.
        """
        from sandbox.run.starting import start

        return start(cls, project, workdir, label, progress, begun)

    # -- reading -------------------------------------------------------------------------------

    def load(self) -> LedgerState:
        """Read (and verify) the ledger now: its fold, whatever it holds (:attr:`problems` says what was rebuilt)."""
        return self._ledger.state()

    def seal_cache(self) -> None:
        """Leave the fold cache at the ledger's tip (read commands: the next one takes the fast path)."""
        self._ledger.seal()

    def state(self) -> LedgerState:
        """The fold of the run's ledger."""
        state = self._ledger.state()
        if state.run is None and state.tip is None:
            # No ledger at all any more (a vanished ref with an acknowledged tip is reported as
            # damage before this): the run was dropped since it was opened.
            raise UnknownRunError(f"Run {self.run_id} no longer exists (it was dropped); see 'sandbox list'.")
        if state.run is None:
            raise CorruptionError(f"The ledger of run {self.run_id} has no start event; it is damaged.")
        return state

    def verified_state(self) -> LedgerState:
        """The fold of the run's ledger, after every event was checked against its commits
        (:mod:`sandbox.run.verify`): what apply, undo, redo and branch decide from."""
        from sandbox.run.verify import LedgerRefusedError, verified

        state = self.state()
        if state.tip is not None:
            try:
                verified(self._ledger, state.tip)
            except LedgerRefusedError as exc:
                raise type(exc)(
                    f"{exc.message}; the run's record disagrees with its commits, so nothing was done. Drop the run "
                    f"('sandbox drop {self.run_id} --force') or fetch it again from a remote you trust.",
                    exc.index,
                    exc.oid,
                    exc.reason,
                ) from None
        return state

    @property
    def info(self) -> RunInfo:
        """Where the run came from (its start event)."""
        if self._info is None:
            # Immutable once the run exists: read once per Run object, not per access.
            self._info = self.state().run
        assert self._info is not None
        return self._info

    @property
    def place(self) -> layout.Place:
        """Where the run's worktree and git dir are on this machine (from the repository, not the record)."""
        if self._place is None:
            self._place = self.project.place(self.run_id)
        return self._place

    @property
    def worktree(self) -> str:
        """Absolute path of the run's worktree (writable by the agent)."""
        return self.place.worktree

    @property
    def git_dir(self) -> str:
        """Absolute path of the run's own git directory (writable by the agent; a legacy run's admin dir)."""
        return self.place.git_dir

    def make_place(self, commit: str, home: str | None = None) -> layout.Place:
        """Create the run's worktree and own git dir, checked out at ``commit``, in ``home`` (default: a
        new home under the project's homes dir).

        The home is recorded in the run's directory first, so an interrupted creation is found and
        reclaimed by ``sandbox gc``. Used by :meth:`start`, and by ``resume`` when the worktree is gone.
        """
        from sandbox.store import worktree

        place = self.reserve_place(home)
        worktree.create(place, self.project.common_dir, commit, self.run_id, *self.git_settings())
        return place

    def reserve_place(self, home: str | None = None) -> layout.Place:
        """Record a new home for the run (``home``, or one under the project's homes dir) before anything
        is made there, so ``sandbox gc`` finds leftovers; the place, not yet created."""
        from sandbox.run.prestart import reserve

        place = reserve(
            self.project.common_dir,
            self.run_id,
            layout.home_place(home) if home else self.project.new_place(self.run_id),
        )
        self.set_place(place)
        self.make_store()
        return place

    def make_store(self) -> None:
        """Give the run being made its own object store (:mod:`sandbox.store.runstore`): what is recorded for it
        from now on goes there."""
        from sandbox.store import runstore

        runstore.create(self.project.common_dir, self.run_id)
        self.repo = self._ledger.repo = self.project.run_repository(self.run_id)

    def set_start_refs(self, commit: str) -> None:
        """Point the run's ``base`` and ``head`` refs at ``commit``, the snapshot it is made from (while it is made)."""
        with objects.git_writes():
            self.repo.references.create(layout.ref_name(self.run_id, "base"), commit, force=True)
            set_head_ref(self.repo, self.run_id, commit)

    def set_place(self, place: layout.Place) -> None:
        """Take ``place`` as where the run's files are from now on (after they were moved there)."""
        self._place = place
        self._wt_repo = None
        self._rules = None

    def git_settings(self) -> tuple[list[tuple[str, str]], str | None]:
        """What the run's own git dir takes from the user's repository config
        (:func:`sandbox.store.worktree.settings_of`)."""
        from sandbox.store import worktree

        return worktree.settings_of(self.project.common_dir)

    def max_call_bytes(self) -> int | None:
        """``max_call_size`` of the user's settings, else ``config.DEFAULT_MAX_CALL_SIZE`` (read once per Run)."""
        from sandbox.run import config

        return self._limit("max_call_size", config.DEFAULT_MAX_CALL_SIZE)

    def max_read_bytes(self) -> int | None:
        """``max_read_size`` of the user's settings: the largest agent file read into memory (None: the
        default of :mod:`sandbox.store.agentread`)."""
        return self._limit("max_read_size", None)

    def _limit(self, name: str, default: int | None) -> int | None:
        """One of the user's ``[limits]`` (``default`` when unset or unreadable), read once per Run."""
        if name not in self._limits:
            from sandbox.run import config

            try:
                self._limits[name] = config.load(self.user_workdir).limits.get(name, default)
            except (config.ConfigError, OSError):
                self._limits[name] = default
        return self._limits[name]

    @property
    def user_workdir(self) -> str:
        """The user's working tree the run applies to: found from the repository this command runs
        in (:meth:`Project.target_workdir <sandbox.store.project.Project.target_workdir>`), never
        taken from the run's record, which a run fetched from another clone brings with it."""
        if self._user_workdir is None:
            self._user_workdir = self.project.target_workdir(self.run_id, self.info.user_workdir)
        return self._user_workdir

    @property
    def base(self) -> str:
        """The snapshot commit the run started from."""
        return self.info.base

    def head(self) -> str:
        """The run's newest recorded commit (repairs the head ref if a crash left it behind)."""
        return self.sync_head()

    def sync_head(self) -> str:
        """Move the ``head`` ref to the fold's head, and return it: how the head moves after anything that
        records a new one (a call's commit, an undo or redo in the run), and repairs a ref a crash left."""
        state = self.state()
        assert state.head is not None
        self._sync_head_ref(state.head)
        return state.head

    def _sync_head_ref(self, head: str) -> None:
        name = layout.ref_name(self.run_id, "head")
        try:
            ref = self.repo.references.get(name)
            if ref is None or str(ref.target) != head:
                # A mirror of the durable ledger, written without fsync (repository.mirror_repository).
                set_head_ref(repository.mirror_repository(self.repo), self.run_id, head)
        except (pygit2.GitError, OSError):
            # Only a mirror of the ledger's head (which is durable already): the next read repairs it.
            pass

    def entries(self) -> list[LedgerEntry]:
        """The run's calls in the order they were first recorded."""
        state = self.state()
        return [state.calls[c] for c in state.order]

    def entry(self, call_id: str) -> LedgerEntry:
        """One call's ledger entry; :class:`UnknownCallError` when there is none."""
        state = self.state()
        if call_id not in state.calls:
            raise UnknownCallError(f"Run {self.run_id} has no call {call_id!r}; see 'sandbox log'.")
        return state.calls[call_id]

    def wt_repo(self) -> pygit2.Repository:
        """The run's own repository, opened on its worktree (ignore rules, the agent's git activity)."""
        if self._wt_repo is None:
            self._wt_repo = pygit2.Repository(self.worktree)
        return self._wt_repo

    def is_ignored(self, rel: str) -> bool:
        """True when the worktree's ignore rules exclude ``rel`` (an untracked path; a directory when it
        ends with ``/``). libgit2 reads the host's copies of the rule files, each read beneath the worktree
        by descriptor (:mod:`sandbox.store.rulemirror`); one that is not a plain file counts as absent."""
        try:
            if self._rules is None:
                from sandbox.store import rulemirror

                self._rules = rulemirror.for_run(self.project.common_dir, self.run_id, self.worktree)
            return bool(self._rules.for_path(rel, ".gitignore").path_is_ignored(rel))
        except (pygit2.GitError, UnicodeError, ValueError, OSError):
            return False

    def is_private(self, rel: str) -> bool:
        """True for the run's private paths (hook settings, links into the user's tree): never captured."""
        from sandbox.run.include import is_private

        return is_private(self.dir, rel)

    def worktree_exists(self) -> bool:
        """True when the worktree directory is there and its ``.git`` names an existing git dir."""
        return os.path.isfile(os.path.join(self.worktree, ".git")) and os.path.isdir(self.git_dir)

    def events(self, tip: str | None = None) -> list[tuple[str, Event]]:
        """The run's ledger events, oldest first, with their commit ids (up to ``tip``: default, all)."""
        if tip is not None:
            return self._ledger.events_to(tip)
        return self._ledger.events()

    def events_read(self) -> list[tuple[str, Event]]:
        """:meth:`events`, each event read once by this object: the ledger only grows, so a new tip
        reads only the events after the last one read (all again if the ledger was rewritten).
        The list is shared: read it, never change it."""
        tip = self._ledger.tip()
        cached = self._read
        if cached is not None and cached[0] == tip:
            return cached[1]
        events: list[tuple[str, Event]] = []
        if tip is not None and cached is not None and cached[0] is not None:
            try:
                events = cached[1] + self._ledger.events_since(cached[0], tip)
            except LookupError:
                events = []  # the cached tip is not on the way: read the whole ledger
        if tip is not None and not events:
            events = self.events(tip)
        self._read = (tip, events)
        return events

    def adopt(self) -> int:
        """Count the run's whole ledger as this clone's own (see :mod:`sandbox.store.provenance`); how
        many events were not before."""
        added = self._ledger.adopt()
        self._read = None  # read again: each event's provenance changed
        return added

    def ledger_tip(self) -> str | None:
        """The commit id of the run's newest ledger event (None: the ledger does not exist)."""
        return self._ledger.tip()

    def exists(self) -> bool:
        """True while the run's ledger exists (False once it was dropped)."""
        return self._ledger.exists()

    @property
    def problems(self) -> list[str]:
        """Derived state (the fold cache) found not to match the ledger and rebuilt: one sentence each."""
        return self._ledger.problems

    def verify_fold(self, fresh: LedgerState) -> bool:
        """Compare the cached fold with ``fresh`` (a fold of every event) and adopt it; True if they differed."""
        return self._ledger.adopt_verified(fresh)

    # -- writing the ledger ----------------------------------------------------------------------

    def lock(self, timeout: float = 30.0) -> contextlib.AbstractContextManager[None]:
        """The run's lock, re-entrant within this process: every writer of its ledger holds it."""
        return self._ledger.lock.hold(timeout)

    def new_state(self) -> LedgerState:
        """An empty fold for this clone, to fold the run's events into (see :meth:`events`)."""
        return self._ledger.new_state()

    def new_event(self, kind: EventKind, call_id: str | None = None, **fields: Any) -> Event:
        """An event of this run, not yet recorded (for operations that journal it before :meth:`record_event`).

        It names this clone: an apply, undo or redo in the user's tree concerns this clone's tree only
        (runs travel: see :mod:`sandbox.runs.remote`).
        """
        clone = self._ledger.ensure_clone()
        run_id, pid = self.run_id, os.getpid()
        return Event(event_id=new_event_id(), kind=kind, run_id=run_id, call_id=call_id, pid=pid, clone=clone, **fields)

    def record(
        self,
        kind: EventKind,
        call_id: str | None = None,
        *,
        keep: Iterable[str] = (),
        attachments: Mapping[str, bytes] | None = None,
        check: Callable[[LedgerState], None] | None = None,
        **fields: Any,
    ) -> LedgerState:
        """Append one event to the run's ledger, durably, under the run's lock; the new fold.

        ``fields`` are the :class:`~sandbox.models.Event` fields; ``keep`` lists commits the event
        refers to (kept reachable); ``check`` runs on the current fold under the lock and may raise
        to refuse the event (fencing, transitions). An event that moves the run's head is written
        with :meth:`move_head` instead.
        """
        event = self.new_event(kind, call_id, **fields)
        return self.record_event(event, keep=keep, attachments=attachments, check=check)

    def record_event(
        self,
        event: Event,
        *,
        keep: Iterable[str] = (),
        attachments: Mapping[str, bytes] | None = None,
        check: Callable[[LedgerState], None] | None = None,
    ) -> LedgerState:
        """Append an event made by :meth:`new_event` (see :meth:`record`); appending it again is a no-op."""
        eventdata.check_event(event)  # typed when written as when read: unknown keys refused
        return self._ledger.append(event, keep=[c for c in keep if c], attachments=attachments, check=check)

    def write_commit(self, tree: str, parent: str, message: str) -> str:
        """Store a commit of ``tree`` on ``parent`` through the run's durable object path; its id.

        Inside a :meth:`move_head` (or a batch) the commit goes into the same pack as its event;
        alone, it is made durable before this returns (an operation that journals the commit before
        recording its event relies on that).
        """
        with objects.batch(self.repo):  # the outermost batch makes it durable as it ends
            return objects.write_commit(self.repo, tree, [parent], message, objects.now())

    def move_head(
        self,
        kind: EventKind,
        call_id: str | None = None,
        *,
        tree: str,
        parent: str,
        message: str,
        keep: Iterable[str] = (),
        attachments: Mapping[str, bytes] | None = None,
        check: Callable[[LedgerState], None] | None = None,
        fields_of: Callable[[str], Mapping[str, Any]] | None = None,
        fault: str | None = None,
        **fields: Any,
    ) -> tuple[str, LedgerState]:
        """The one writer of a new state of the run's files: tree -> commit -> event -> head ref.

        The commit of ``tree`` on ``parent`` and the event naming it (``commit``/``parent_commit``,
        plus ``fields`` and what ``fields_of(commit)`` adds) are made durable together in one pack,
        then the ``head`` ref follows the fold (an event kind that does not move the head, such as
        drift, leaves it). ``fault`` names the crash points ``<fault>.after_commit``,
        ``.after_ledger`` and ``.after_head_ref``. Returns the commit and the new fold.
        """
        with self.lock(), objects.batch(self.repo):
            try:
                commit = self.write_commit(tree, parent, message)
            except (pygit2.GitError, OSError) as exc:
                raise StorageError(f"Could not store a commit of run {self.run_id} ({exc}).", reason=str(exc)) from exc
            if fault:
                faults.point(f"{fault}.after_commit")
            if fields_of is not None:
                fields.update(fields_of(commit))
            state = self.record(
                kind,
                call_id,
                commit=commit,
                parent_commit=parent,
                keep=[commit, *keep],
                attachments=attachments,
                check=check,
                **fields,
            )
            if fault:
                faults.point(f"{fault}.after_ledger")
            if state.head == commit:
                self._sync_head_ref(commit)
                if fault:
                    faults.point(f"{fault}.after_head_ref")
        return commit, state

    # -- dropping ------------------------------------------------------------------------------

    def changed_paths(self) -> list[str]:
        """Paths where the run's head differs from its base (the run's whole patch)."""
        base_tree = objects.commit_tree(self.repo, self.base)
        head_tree = objects.commit_tree(self.repo, self.head())
        return [c.path for c in objects.diff_trees(self.repo, base_tree, head_tree)]

    def unapplied_calls(self) -> list[LedgerEntry]:
        """Calls whose changes are in the run's files but not applied to the user's tree.

        A call undone in the user's tree is still in the run (unapplied again); one undone in the
        run or taken out by ``rollback --files`` is not.
        """
        return [e for e in self.state().live_calls() if not e.applied]

    def drop(self, force: bool = False, before_remove: Callable[[Self], object] | None = None) -> int:
        """Remove the run: its worktree, refs and scratch files. Returns bytes freed.

        Refuses while the run has changes not applied to the user's tree, unless ``force``.
        ``before_remove(run)`` is called once the checks passed, before anything is removed: the
        CLI stops a background ``sandbox serve`` of the run there (the agent layer, above this one;
        a host left running notices the drop and exits by itself within a second).
        """
        if not force:
            pending = self.unapplied_calls()
            if pending and self.changed_paths():
                raise SandboxError(
                    f"Run {self.run_id} has {len(pending)} recorded change(s) not applied to your tree; "
                    f"apply them ('sandbox apply {self.run_id}') or drop with --force to discard them."
                )
        place = self.place
        if before_remove is not None:
            before_remove(self)
        with self.lock():
            # First forget the acknowledged tip: a drop interrupted after this is garbage for gc,
            # never a run that vanished behind the sandbox's back (sandbox.store.integrity).
            integrity.forget_ack(self.dir)
            with objects.git_writes():
                self.repo.references.delete(self._ledger.ref)
            faults.point("drop.after_ledger_ref")
            from sandbox.store import worktree

            freed = worktree.remove_place(self.project.common_dir, place)
            faults.point("drop.after_worktree")
            delete_run_refs(self.repo, self.run_id)
            faults.point("drop.after_refs")
            from sandbox.store import runstore

            # Its objects into yours (what outlives the run keeps them), then its store unlisted.
            runstore.retire(self.project.common_dir, self.run_id)
        from sandbox.store.fsutil import remove_tree

        remove_tree(self.dir)  # iterative: an agent home nested past Python's recursion limit is removed too
        return freed


def delete_run_refs(repo: pygit2.Repository, run_id: str) -> None:
    """Delete every ref under ``refs/sandbox/<run>/``."""
    prefix = layout.ref_prefix(run_id)
    for name in list(repo.references):
        if name.startswith(prefix):
            with contextlib.suppress(KeyError, pygit2.GitError), objects.git_writes():
                repo.references.delete(name)


def set_head_ref(repo: pygit2.Repository, run_id: str, commit: str) -> None:
    """The one writer of a run's ``head`` ref (``refs/sandbox/<run>/head``): set to the base when a run is
    made (start, fork), to the remote's at a fetch, and otherwise only to the fold's head
    (:meth:`RunCore.sync_head`), which the ledger holds durably: the ref is its mirror."""
    repo.references.create(layout.ref_name(run_id, "head"), commit, force=True)
