"""A run: one agent session in its own worktree, with its refs and its ledger.

Refs of a run (never under refs/heads, refs/tags or refs/stash)::

    refs/sandbox/<run>/base     the snapshot of the user's working tree the run started from
    refs/sandbox/<run>/head     the run's newest recorded state (a commit per changing call)
    refs/sandbox/<run>/ledger   the event log (see :mod:`sandbox.store.ledger`)

The ledger is the source of truth: ``head`` is a convenience ref kept equal to the ledger's head
and repaired from it when a crash left it behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import pygit2

from sandbox import faults
from sandbox.errors import (
    CorruptionError,
    SandboxError,
    StaleWriterError,
    UnknownCallError,
    UnknownRunError,
    UsageError,
)
from sandbox.models import (
    Approval,
    CallSpec,
    CallStatus,
    Event,
    EventKind,
    Idempotency,
    LedgerEntry,
    LedgerState,
    ProcessScope,
    ReplayPolicy,
    RunInfo,
)
from sandbox.run.fold import FAILED_MARKS, FOLD, TERMINAL_STATUSES
from sandbox.run.ids import input_hash, new_call_id, new_run_id
from sandbox.store import integrity, layout, objects
from sandbox.store.ledger import Ledger, StorageError, new_event_id
from sandbox.store.project import Project

if TYPE_CHECKING:
    from sandbox.run.recording import PathsSeen, ToolCall

faults.POINTS.update(
    {
        "start.after_lock",
        "start.after_refs",
        "start.after_worktree",
        "start.after_ledger",
        "call.start.before",
        "call.start.after",
        "call.finish.before",
        "call.finish.after_capture",
        "call.finish.after_commit",
        "call.finish.after_ledger",
        "call.finish.after_head_ref",
        "drop.after_ledger_ref",
        "drop.after_worktree",
        "drop.after_refs",
    }
)


#: Inputs and results up to this many bytes of JSON live in the event itself, not in a blob.
INLINE_LIMIT = 4096


class RecordingFailedError(SandboxError):
    """A started call's changes could not be stored; the message says how it ended and what to do."""


class Run:
    """One run of an agent, opened from its project. Create runs with :meth:`Run.start`."""

    def __init__(self, project: Project, run_id: str) -> None:
        self.project = project
        self.repo = project.repo
        self.run_id = run_id
        self.dir = project.run_dir(run_id)
        # Private: every write goes through :meth:`record` / :meth:`move_head`, every read through
        # :meth:`state` / :meth:`events`, so the fold's checks and the lock cannot be bypassed.
        self._ledger = Ledger(self.repo, run_id, self.dir, FOLD)
        self._wt_repo: pygit2.Repository | None = None
        self._info: RunInfo | None = None
        self._place: layout.Place | None = None
        self._user_workdir: str | None = None
        #: What :meth:`start` copied or linked into the worktree (see :mod:`sandbox.run.include`).
        self.include_report: Any = None
        #: Called with (run, relative path) before a write helper changes a file.
        self.before_write_hooks: list[Callable[[Run, str], None]] = []
        # O(1) per path: lets a resume attribute a crashed call's half-written files to it.
        self.before_write_hooks.append(_capture_before_write)

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def open(cls, project: Project, run_id: str) -> Run:
        """Open an existing run; :class:`UnknownRunError` when it has no ledger."""
        run = cls(project, run_id)
        if not run.exists():
            raise UnknownRunError(f"No run {run_id!r} in this repository; see 'sandbox list'.")
        return run

    @classmethod
    def start(
        cls, project: Project, workdir: str, label: str | None = None, progress: Callable[[str], None] | None = None
    ) -> Run:
        """Snapshot ``workdir`` and create a run: refs, its home (worktree and own git dir), a ledger.

        The home is made under ``project.homes_dir`` and recorded in the run's directory before it
        is created. The run becomes visible (its ledger ref is created) only as the last step; a
        start interrupted earlier leaves pieces that ``sandbox gc`` reclaims. ``progress`` is told
        each step as a line of text, git's own progress meter included (the caller shows them).
        """
        from sandbox.run.labels import check_label
        from sandbox.store import snapshot, worktree

        if label is not None:
            check_label(label, "run")
        say = progress or (lambda _line: None)
        objects.enable_fsync()
        run_id = new_run_id()
        while os.path.exists(project.run_dir(run_id)) or os.path.lexists(project.new_place(run_id).home or ""):
            run_id = new_run_id()
        run = cls(project, run_id)
        # Taking the lock makes the run's directory (again, if a concurrent gc removes it first).
        with run.lock():
            faults.point("start.after_lock")
            # Checking out the user's HEAD is most of a start at 100k files: it runs (in git) while
            # the snapshot is taken; then only the paths the snapshot changes are written on top.
            place = run.reserve_place()
            user_head = snapshot.user_head(workdir)
            checkout = None
            if user_head is not None:
                worktree.init(place, project.common_dir, user_head, run_id, *run.git_settings())
                checkout = worktree.start_checkout(place, progress)
            try:
                say("Taking a snapshot of your working tree")
                message = f"sandbox snapshot of {workdir}\n\nSandbox-Run: {run_id}\n"
                snap = snapshot.take(project.repo, workdir, run.dir, message)
                with objects.git_writes():
                    project.repo.references.create(layout.ref_name(run_id, "base"), snap.commit, force=True)
                    project.repo.references.create(layout.ref_name(run_id, "head"), snap.commit, force=True)
                faults.point("start.after_refs")
                if checkout is not None and user_head is not None:
                    proc, checkout = checkout, None
                    say("Checking out the run's worktree")
                    worktree.finish_checkout(proc)
                    worktree.advance(place, run_id, user_head, snap.commit)
                else:
                    worktree.create(place, project.common_dir, snap.commit, run_id, *run.git_settings())
            finally:
                if checkout is not None:  # the snapshot failed: stop the checkout (gc reclaims the home)
                    checkout.kill()
                    checkout.wait()
            path = place.worktree
            faults.point("start.after_worktree")
            from sandbox.run import include

            say("Finishing the worktree")
            run.include_report = include.populate(workdir, path, run.dir)
            info = RunInfo(
                run_id=run_id,
                label=label,
                base=snap.commit,
                head=snap.head,
                head_ref=snap.head_ref,
                worktree=path,
                user_workdir=workdir,
                submodules=snap.submodules,
                host=socket.gethostname(),
            )
            event = Event(event_id=new_event_id(), kind=EventKind.run_started, run_id=run_id, run=info, pid=os.getpid())
            run.record_event(event, keep=[snap.commit])
            faults.point("start.after_ledger")
        return run

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
        from sandbox.store.fsutil import atomic_write

        place = layout.home_place(home) if home else self.project.new_place(self.run_id)
        assert place.home is not None
        if os.path.lexists(place.worktree) or os.path.lexists(place.git_dir):
            raise SandboxError(
                f"The home {place.home} of run {self.run_id} is in use already; run 'sandbox gc' and try again."
            )
        os.makedirs(self.dir, exist_ok=True)
        atomic_write(os.path.join(self.dir, layout.PLACE_FILE), (place.home + "\n").encode())
        self.set_place(place)
        return place

    def set_place(self, place: layout.Place) -> None:
        """Take ``place`` as where the run's files are from now on (after they were moved there)."""
        self._place = place
        self._wt_repo = None

    def git_settings(self) -> tuple[list[tuple[str, str]], str | None]:
        """What the run's own git dir takes from the user's repository config: settings, object format."""
        local: list[tuple[str, str]] = []
        with contextlib.suppress(pygit2.GitError):
            local = [
                (e.name, e.value) for e in self.repo.config if e.level == pygit2.enums.ConfigLevel.LOCAL and e.value
            ]
        object_format = {k.lower(): v for k, v in local}.get("extensions.objectformat")
        from sandbox.store import worktree

        return worktree.inherited(local), object_format

    def max_call_bytes(self) -> int | None:
        """``max_call_size`` of the user's settings (read once per Run; None: not bounded or unreadable)."""
        if not hasattr(self, "_max_call_bytes"):
            from sandbox.run import config

            try:
                self._max_call_bytes = config.load(self.user_workdir).limits.get("max_call_size")
            except (config.ConfigError, OSError):
                self._max_call_bytes = None
        return self._max_call_bytes

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
        state = self.state()
        assert state.head is not None
        self._sync_head_ref(state.head)
        return state.head

    def _sync_head_ref(self, head: str) -> None:
        name = layout.ref_name(self.run_id, "head")
        try:
            ref = self.repo.references.get(name)
            if ref is None or str(ref.target) != head:
                # A mirror of the durable ledger: written without fsync (objects.mirror_repository).
                objects.mirror_repository(self.repo).references.create(name, head, force=True)
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
        """True when the worktree's ignore rules exclude ``rel`` (an untracked path); False when a
        file libgit2 would read for them is not a plain file (a FIFO would hang it: the agent's)."""
        from sandbox.store import gitfiles

        if not gitfiles.repository_plain(self.worktree) or not gitfiles.path_rules_plain(self.worktree, rel):
            return False
        try:
            return bool(self.wt_repo().path_is_ignored(rel))
        except (pygit2.GitError, UnicodeError, ValueError):
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
        (runs travel: see :mod:`sandbox.run.remote`).
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

    # -- recording calls -----------------------------------------------------------------------

    def _spec(
        self,
        tool_name: str,
        input: Any,
        step_id: str | None,
        idempotency: Idempotency | str,
        replay: ReplayPolicy | str,
        side_effects: Iterable[str],
        summary: str | None,
        compensation: dict[str, Any] | None,
        agent_session: str | None = None,
    ) -> tuple[CallSpec, dict[str, bytes]]:
        if not tool_name or len(tool_name) > 200:
            raise UsageError("A tool name must be 1 to 200 characters.")
        try:
            idem = Idempotency(idempotency)
            rep = ReplayPolicy(replay)
        except ValueError as exc:
            raise UsageError(f"{exc}; see 'sandbox call start --help' for the allowed values.") from exc
        data = layout.canonical_json(input)
        inline = input is not None and len(data) <= INLINE_LIMIT
        attachments = {"input.json": data} if input is not None and not inline else {}
        spec = CallSpec(
            tool_name=tool_name,
            step_id=step_id,
            input_hash=input_hash(tool_name, input),
            input_ref=str(pygit2.hash(data)) if attachments else None,
            input=input if inline else None,
            idempotency=idem,
            replay_policy=rep,
            side_effects=list(side_effects),
            summary=summary,
            compensation=compensation,
            agent_session=agent_session,
        )
        return spec, attachments

    def plan_call(
        self,
        tool_name: str,
        input: Any = None,
        *,
        call_id: str | None = None,
        step_id: str | None = None,
        idempotency: Idempotency | str = Idempotency.conditional,
        replay: ReplayPolicy | str = ReplayPolicy.ask,
        side_effects: Iterable[str] = (),
        summary: str | None = None,
        compensation: dict[str, Any] | None = None,
    ) -> str:
        """Record a planned call (for runtimes that ask before acting); returns its call id."""
        call_id = call_id or new_call_id()
        spec, attachments = self._spec(
            tool_name, input, step_id, idempotency, replay, side_effects, summary, compensation
        )

        def check(state: LedgerState) -> None:
            if call_id in state.calls:
                raise UsageError(f"Run {self.run_id} already has a call {call_id!r}.")

        self.record_event(
            self.new_event(EventKind.call_planned, call_id, call=spec, epoch=self.state().epoch),
            attachments=attachments,
            check=check,
        )
        return call_id

    def start_call(
        self,
        tool_name: str,
        input: Any = None,
        *,
        call_id: str | None = None,
        step_id: str | None = None,
        idempotency: Idempotency | str = Idempotency.conditional,
        replay: ReplayPolicy | str = ReplayPolicy.ask,
        side_effects: Iterable[str] = (),
        summary: str | None = None,
        compensation: dict[str, Any] | None = None,
        procs: ProcessScope | None = None,
        agent_session: str | None = None,
    ) -> str:
        """Durably record that a call is starting; returns its call id.

        When this returns, the ``started`` event is on disk (fsync'd): the tool may run. A call id
        that was planned and approved continues; a denied one is refused. ``agent_session`` is
        the agent's own session id (its end settles the calls it never ran, see :meth:`not_run`).
        """
        call_id = call_id or new_call_id()
        spec, attachments = self._spec(
            tool_name, input, step_id, idempotency, replay, side_effects, summary, compensation, agent_session
        )
        faults.point("call.start.before")
        if not self.worktree_exists():
            raise SandboxError(
                f"The worktree of run {self.run_id} is missing; run 'sandbox resume {self.run_id}' to recreate "
                "it before recording calls."
            )
        existing: list[LedgerEntry] = []

        def check(state: LedgerState) -> None:
            entry = state.calls.get(call_id)
            if entry is None:
                return
            if entry.approval == Approval.denied:
                raise SandboxError(
                    f"Call {call_id} was denied ({entry.denial_reason or 'no reason given'}); it must not run."
                )
            if entry.status in TERMINAL_STATUSES or entry.status == CallStatus.uncertain:
                raise SandboxError(f"Call {call_id} already ended as {entry.status.value}; use a new call id.")
            if entry.status == CallStatus.started:
                existing.append(entry)

        state = self.state()
        event = self.new_event(EventKind.call_started, call_id, call=spec, epoch=state.epoch, procs=procs)
        self.record_event(event, attachments=attachments, check=check)
        faults.point("call.start.after")
        return call_id

    def finish_call(
        self,
        call_id: str,
        status: CallStatus | str,
        *,
        paths: Iterable[str] | None = (),
        result: Any = None,
        error: str | None = None,
        mark: str | None = None,
        ran_ms: int | None = None,
    ) -> LedgerEntry:
        """Record a call's end, with its file changes as exactly one commit on the run's head.

        ``paths`` are the candidate paths the call may have changed; ``None`` means unknown, and
        the worktree is scanned (correct, but costs O(repository)). Refused with
        :class:`StaleWriterError` if the run was resumed since the call started. ``mark``
        (``interrupted`` or ``violation``, with ``status`` failed) ends it so (see
        :class:`~sandbox.models.CallStatus`); ``ran_ms``: how long the tool itself ran, as the agent
        measured it (its start was after the agent's permission prompt).
        """
        try:
            final = CallStatus(status)
        except ValueError:
            raise UsageError(f"Unknown status {status!r}; use succeeded or failed.") from None
        if final not in (CallStatus.succeeded, CallStatus.failed):
            raise UsageError(f"A call finishes as succeeded or failed, not {final.value}.")
        data: dict[str, Any] = {}
        if mark is not None:
            if mark not in FAILED_MARKS or final != CallStatus.failed:
                raise UsageError(f"A call is marked {mark!r} only as failed, and only interrupted or violation.")
            data[mark] = True
        if ran_ms is not None and ran_ms >= 0:
            data["ran_ms"] = int(ran_ms)
        faults.point("call.finish.before")
        try:
            return self._finish(call_id, final, paths, result, error, data)
        except StorageError as exc:
            self._record_failure(call_id, final, error, exc)

    def _record_failure(self, call_id: str, final: CallStatus, error: str | None, exc: StorageError) -> NoReturn:
        """The call's changes could not be stored: end it as failed with the reason, or say how to finish it.

        Its ``started`` event is durable, so "nothing was recorded" would be false: the call either
        ends ``failed`` (one small event, which often still fits when a pack did not) or stays
        ``started``, and the message says which and what to do.
        """
        reason = exc.reason
        why = f"its changes could not be recorded ({reason})" + (f"; {error}" if error else "")
        try:
            state = self.state()
            event = self.new_event(EventKind.call_failed, call_id, error=why, epoch=state.epoch)
            self.record_event(event, check=lambda s: self._check_writer(s, s.calls[call_id]))
        except StorageError as again:
            raise RecordingFailedError(
                f"Call {call_id} of run {self.run_id} started (that is recorded), but neither its changes nor its "
                f"end could be recorded ({reason}); it stays started and its files stay in the worktree. Free some "
                f"space, then run 'sandbox call finish {self.run_id} {call_id} --status {final.value}' to record it."
            ) from again
        raise RecordingFailedError(
            f"Call {call_id} of run {self.run_id} started, but its changes could not be recorded ({reason}); it "
            "was recorded as failed with that reason, and its files stay in the worktree unrecorded "
            f"('sandbox resume {self.run_id}' reports them). Free some space before the next call."
        ) from exc

    def _finish(
        self,
        call_id: str,
        final: CallStatus,
        paths: Iterable[str] | None,
        result: Any,
        error: str | None,
        data: dict[str, Any] | None = None,
    ) -> LedgerEntry:
        # The call's objects and its event are made durable together, in one pack (sandbox.store.packs).
        with self.lock(), objects.batch(self.repo):
            state = self.state()
            entry = state.calls.get(call_id)
            if entry is None:
                raise UnknownCallError(f"Run {self.run_id} has no call {call_id!r}; start it first.")
            self._check_writer(state, entry)
            head = state.head
            assert head is not None
            head_tree = objects.commit_tree(self.repo, head)
            if paths is None:
                from sandbox.store import scan

                candidates = scan.candidates(self.repo, self.worktree, head_tree)
            else:
                candidates = set(paths)
            from sandbox.store.capture import CallTooLargeError, capture

            try:
                cap = capture(
                    self.repo,
                    self.worktree,
                    head_tree,
                    candidates,
                    self.is_ignored,
                    self.is_private,
                    max_bytes=self.max_call_bytes(),
                )
                faults.point("call.finish.after_capture")
                tree = objects.edit_tree(self.repo, head_tree, cap.changes) if cap.changes else head_tree
            except CallTooLargeError as exc:  # the call ends failed; its files stay in the worktree
                raise StorageError(f"Call {call_id} is too large ({exc.message}).", reason=exc.message) from exc
            except (pygit2.GitError, OSError) as exc:
                raise StorageError(f"Could not record the changes of call {call_id} ({exc}).", reason=str(exc)) from exc
            result_data = layout.canonical_json(result) if result is not None else b""
            inline_result = result is not None and len(result_data) <= INLINE_LIMIT
            attachments = {"result.json": result_data} if result is not None and not inline_result else {}
            kind = EventKind.call_succeeded if final == CallStatus.succeeded else EventKind.call_failed
            fields: dict[str, Any] = dict(
                _error_fields(error, attachments),
                result_ref=str(pygit2.hash(attachments["result.json"])) if "result.json" in attachments else None,
                result=result if inline_result else None,
                epoch=state.epoch,
            )
            if data:
                fields["data"] = data

            def check(s: LedgerState) -> None:
                self._check_writer(s, s.calls[call_id])

            if tree is not None and tree != head_tree:
                msg = (
                    f"sandbox: {entry.tool_name} ({call_id})\n\n"
                    f"Sandbox-Run: {self.run_id}\nSandbox-Call: {call_id}\nSandbox-Status: {final.value}\n"
                )

                def files_of(commit: str) -> dict[str, Any]:
                    files = [
                        objects.file_change(rel, cap.before[rel], cap.changes[rel], f"{head}..{commit}", call_id)
                        for rel in sorted(cap.changes)
                    ]
                    return {"files": files}

                _commit, new_state = self.move_head(
                    kind,
                    call_id,
                    tree=tree,
                    parent=head,
                    message=msg,
                    attachments=attachments,
                    check=check,
                    fields_of=files_of,
                    fault="call.finish",
                    **fields,
                )
            else:
                new_state = self.record(kind, call_id, attachments=attachments, check=check, files=[], **fields)
                faults.point("call.finish.after_ledger")
            return new_state.calls[call_id]

    def _check_writer(self, state: LedgerState, entry: LedgerEntry) -> None:
        if entry.status in TERMINAL_STATUSES:
            raise SandboxError(f"Call {entry.call_id} already ended as {entry.status.value}.")
        if entry.status == CallStatus.uncertain or entry.epoch != state.epoch:
            raise StaleWriterError(
                f"Run {self.run_id} was resumed after call {entry.call_id} started; this process no longer "
                "owns the run, so its changes were not committed (resume reports them as drift)."
            )
        if entry.status != CallStatus.started:
            raise SandboxError(f"Call {entry.call_id} is {entry.status.value}, not started; start it first.")

    def tool_call(
        self,
        tool_name: str,
        input: Any = None,
        *,
        call_id: str | None = None,
        step_id: str | None = None,
        idempotency: Idempotency | str = Idempotency.conditional,
        replay: ReplayPolicy | str = ReplayPolicy.ask,
        side_effects: Iterable[str] = (),
        summary: str | None = None,
        compensation: dict[str, Any] | None = None,
        watcher: PathsSeen | None = None,
        agent_session: str | None = None,
    ) -> ToolCall:
        """A context manager recording one tool call; see :class:`sandbox.run.recording.ToolCall`."""
        from sandbox.run.recording import ToolCall

        return ToolCall(
            self,
            tool_name,
            input,
            call_id=call_id,
            step_id=step_id,
            idempotency=idempotency,
            replay=replay,
            side_effects=side_effects,
            summary=summary,
            compensation=compensation,
            watcher=watcher,
            agent_session=agent_session,
        )

    # -- checkpoints, approvals, uncertain calls (see sandbox.run.checkpoint, approvals, resume) -----

    def checkpoint(
        self,
        label: str | None = None,
        *,
        step_id: str | None = None,
        messages: Any = None,
        run_state: Any = None,
        approvals: Any = None,
        budget: Any = None,
        trace: Any = None,
        trace_ref: str | None = None,
    ) -> Any:
        """Save a runtime checkpoint (messages, state, budget...) and return it (a ``Checkpoint``)."""
        from sandbox.run.checkpoint import CheckpointStore, SessionState

        state = SessionState(messages, run_state, step_id, budget, approvals, trace, trace_ref)
        return CheckpointStore(self).save(state, label)

    def approve(self, call_id: str) -> LedgerEntry:
        """Approve a planned call; ``start_call`` with its id then continues it."""
        from sandbox.run import approvals

        return approvals.approve(self, call_id)

    def deny(self, call_id: str, reason: str | None = None) -> LedgerEntry:
        """Deny a planned call; it never starts, and the same tool and input are known denied."""
        from sandbox.run import approvals

        return approvals.deny(self, call_id, reason)

    def not_run(self, call_id: str, reason: str) -> LedgerEntry:
        """Record that a planned, approved or started call never ran (the agent refused or skipped it).

        For evidence from the agent itself: its permission check refused the call, another hook
        blocked it, the user said no, or its turn ended with no result for the call. No files are
        captured (nothing ran); a call that already ended, or that a resume made uncertain, is left
        as it is. ``reason`` is kept as the call's ``error``.
        """

        def check(state: LedgerState) -> None:
            entry = state.calls.get(call_id)
            if entry is None:
                raise UnknownCallError(f"Run {self.run_id} has no call {call_id!r}; see 'sandbox log'.")
            if entry.status in TERMINAL_STATUSES or entry.status == CallStatus.uncertain:
                raise _Settled
            if entry.status == CallStatus.started and entry.epoch != state.epoch:
                raise _Settled  # a resume owns it now: it reports the call, not this process

        event = self.new_event(EventKind.call_not_run, call_id, epoch=self.state().epoch, **_error_fields(reason, {}))
        try:
            return self.record_event(event, check=check).calls[call_id]
        except _Settled:
            return self.entry(call_id)

    def violation(self, call_id: str, reason: str) -> LedgerEntry:
        """Record that the agent ran a call the sandbox had refused (``not_run``): it becomes a
        ``violation`` with ``reason`` as its error. No files are captured here (the next cut or
        call records what changed); a call already marked so is left as it is."""

        def check(state: LedgerState) -> None:
            entry = state.calls.get(call_id)
            if entry is None:
                raise UnknownCallError(f"Run {self.run_id} has no call {call_id!r}; see 'sandbox log'.")
            if entry.status != CallStatus.not_run:
                raise _Settled

        event = self.new_event(
            EventKind.call_failed,
            call_id,
            epoch=self.state().epoch,
            data={"violation": True},
            **_error_fields(reason, {}),
        )
        try:
            return self.record_event(event, check=check).calls[call_id]
        except _Settled:
            return self.entry(call_id)

    def refuse_call(
        self,
        tool_name: str,
        input: Any,
        reason: str,
        *,
        call_id: str | None = None,
        idempotency: Idempotency | str = Idempotency.conditional,
        replay: ReplayPolicy | str = ReplayPolicy.ask,
        summary: str | None = None,
        agent_session: str | None = None,
    ) -> LedgerEntry:
        """Record a call the sandbox refused before it started (a denial): one ``not_run`` event.

        The agent asked for it, so it is one call in the ledger, with the refusal as its ``error``;
        a repeated refusal of the same call id is a no-op.
        """
        call_id = call_id or new_call_id()
        spec, attachments = self._spec(tool_name, input, None, idempotency, replay, (), summary, None, agent_session)

        def check(state: LedgerState) -> None:
            if call_id in state.calls:
                raise _Settled

        event = self.new_event(
            EventKind.call_not_run, call_id, call=spec, epoch=self.state().epoch, **_error_fields(reason, {})
        )
        try:
            return self.record_event(event, attachments=attachments, check=check).calls[call_id]
        except _Settled:
            return self.entry(call_id)

    def error_text(self, entry: LedgerEntry) -> str | None:
        """The full text of a call's error (its ``error`` is one line; the rest is kept beside it)."""
        if entry.error_ref:
            try:
                return objects.read_blob(self.repo, entry.error_ref).decode("utf-8", "replace")
            except (KeyError, ValueError, pygit2.GitError):
                return entry.error_detail or entry.error
        return entry.error_detail or entry.error

    def resolve_call(self, call_id: str, status: CallStatus | str, reason: str | None = None) -> LedgerEntry:
        """Record the checked outcome of an uncertain call (succeeded or failed); no files are captured."""
        try:
            final = CallStatus(status)
        except ValueError:
            raise UsageError(f"Unknown status {status!r}; use succeeded or failed.") from None
        if final not in (CallStatus.succeeded, CallStatus.failed):
            raise UsageError(f"An uncertain call resolves as succeeded or failed, not {final.value}.")

        def check(state: LedgerState) -> None:
            entry = state.calls.get(call_id)
            if entry is None:
                raise UnknownCallError(f"Run {self.run_id} has no call {call_id!r}; see 'sandbox log'.")
            if entry.status != CallStatus.uncertain:
                raise SandboxError(
                    f"Call {call_id} is {entry.status.value}, not uncertain; only uncertain calls are resolved."
                )

        event = self.new_event(
            EventKind.call_resolved,
            call_id,
            reason=reason,
            **_error_fields(reason if final == CallStatus.failed else None, {}),
            data={"status": final.value},
            epoch=self.state().epoch,
        )
        return self.record_event(event, check=check).calls[call_id]

    def note(self, data: dict[str, Any]) -> None:
        """Record a fact about the run that is no call (e.g. how a session's agent was confined)."""
        self.record_event(self.new_event(EventKind.note, data=data, epoch=self.state().epoch))

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

    def drop(self, force: bool = False, before_remove: Callable[[Run], object] | None = None) -> int:
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
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir)
        return freed


def _capture_before_write(run: Run, rel: str) -> None:
    # Imported on the first write, not with every Run: read-only commands never need it.
    from sandbox.run.checkpoint import capture_before_write

    capture_before_write(run, rel)


def delete_run_refs(repo: pygit2.Repository, run_id: str) -> None:
    """Delete every ref under ``refs/sandbox/<run>/``."""
    prefix = layout.ref_prefix(run_id)
    for name in list(repo.references):
        if name.startswith(prefix):
            with contextlib.suppress(KeyError, pygit2.GitError), objects.git_writes():
                repo.references.delete(name)


class _Settled(Exception):
    """The call already has its final state: recording another would add nothing."""


#: An error's one-line summary is at most this long; the whole text is kept beside it.
ERROR_LINE = 300


def error_summary(text: str) -> str:
    """The one-line summary of an error text: its first non-empty line, shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "error"
    if len(first) > ERROR_LINE:
        first = first[: ERROR_LINE - 1].rstrip() + "…"
    return first


def _error_fields(error: str | None, attachments: dict[str, bytes]) -> dict[str, Any]:
    """``error`` (one line) and, when the text is longer, ``error_detail`` inline or ``error_ref``."""
    if error is None or not error.strip():
        return {"error": error}
    line = error_summary(error)
    if line == error:
        return {"error": line}
    data = error.encode("utf-8", "surrogateescape")
    if len(data) <= INLINE_LIMIT:
        return {"error": line, "error_detail": error}
    attachments["error.txt"] = data
    return {"error": line, "error_ref": str(pygit2.hash(data))}
