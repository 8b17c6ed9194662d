"""Conservative resume: continue a run on evidence, never replay what must not happen twice.

:func:`resume`, under the run's lock:

1. fences: appends a ``resumed`` event with epoch + 1 *first*, so a paused old writer can no
   longer commit (``finish_call`` refuses when the epoch moved);
2. turns every call that started but never ended into ``uncertain`` (durable events);
3. verifies the ledger (every event re-read and re-folded) and the checkpoints (each re-hashed);
   a damaged checkpoint is reported and the previous good one used; a lost checkpoints ref is
   rebuilt from the ledger's evidence;
4. verifies the workspace: recreates a missing worktree at the run's head; otherwise compares
   every file with the head and reports drift (changes no recorded call made), attributed to the
   call that was writing them when that is known and never discarded: what each killed call wrote is
   booked to it (one head move per call, in ledger order), the rest saved as a commit on top;
5. returns the message history and run state of the session's checkpoint (or of the checkpoint a
   ``rollback --session`` chose);
6. classifies each uncertain call: idempotent with replay ``auto`` may be replayed; ``conditional``
   or replay ``ask``: check first; ``non_idempotent`` or replay ``never``: do not replay;
7. writes a note for the model and 8. names the next safe step (steps 5 to 8 read what the others
   found: :mod:`sandbox.recovery.resumereport`).

Before all that (step 0), resume looks for live processes of the agent sessions the run's calls
started in (each ``started`` event names its session: see :mod:`sandbox.agent.procs`). While any still
runs it refuses, naming them, and changes nothing: a live tool (or the agent itself) could still
write into the worktree after the report was made. ``stop_processes=True`` stops them first
(SIGTERM, then SIGKILL) and records that in the ledger.

Resuming twice in a row gives the same report apart from the epoch.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sandbox import faults
from sandbox.agent import procs
from sandbox.errors import CorruptionError, SandboxError
from sandbox.models import (
    CallStatus,
    DriftPath,
    DriftRecord,
    Event,
    EventKind,
    LedgerState,
    LiveProcess,
    ProcessScope,
    ResumeReport,
    payloads,
)
from sandbox.recovery import resumereport
from sandbox.run.beforewrite import before_writes, keep_before_writes
from sandbox.run.checkpoint import CheckpointStore, StoredCheckpoint
from sandbox.run.fold import fold_event
from sandbox.store import objects, trailers, worktree
from sandbox.store.capture import Capturer, capture

if TYPE_CHECKING:
    from sandbox.run.run import Run

faults.POINTS.update(
    {
        "resume.after_fence",
        "resume.after_uncertain",
        "resume.after_verify",
        "resume.after_worktree",
        "resume.after_drift",
        # Each killed call's drift booked to it is one head move (sandbox.run.core.move_head's points).
        "resume.booking.after_commit",
        "resume.booking.after_ledger",
        "resume.booking.after_head_ref",
    }
)


class ProcessesAliveError(SandboxError):
    """Processes of the run's agent sessions still run: resuming now would race them."""

    exit_code = 1


def resume(run: Run, stop_processes: bool = False, grace: float = 3.0) -> ResumeReport:
    """Resume ``run`` (steps 0-8 above) and return what was found and decided.

    Raises :class:`ProcessesAliveError` (and changes nothing) while processes of the run's agent
    sessions run, unless ``stop_processes``: then they are stopped first.
    """
    objects.enable_fsync()
    problems: list[str] = []
    with run.lock():
        state = run.state()
        try:
            live, looked = _session_processes(run, state)
        except CorruptionError as exc:
            raise CorruptionError(f"{exc} Resume refuses to continue on damaged evidence.") from exc
        if live and not stop_processes:
            raise ProcessesAliveError(_alive_message(run, live))
        stopped = _stop(live, grace)
        epoch = state.epoch + 1
        _fence(run, epoch, stopped)
        _mark_uncertain(run, epoch)
        faults.point("resume.after_uncertain")
        events, state = _refold(run, problems)
        store, session, rollback = _checkpoints(run, events, problems)
        faults.point("resume.after_verify")
        assert state.head is not None
        recreated = _ensure_worktree(run, state.head, problems)
        faults.point("resume.after_worktree")
        drift, drift_commit = ([], None) if recreated else _drift(run, state, events)
        faults.point("resume.after_drift")
        keep_before_writes(run, _uncertain_pids(state, events))
        run.head()  # repairs the head ref if a crash left it behind
    alive_calls = {c for p in live for c in p.call_ids}
    alive = {c: c in alive_calls for c in looked}
    findings = resumereport.Findings(
        epoch=epoch,
        session=session,
        rollback=rollback,
        drift=drift,
        drift_commit=drift_commit,
        recreated=recreated,
        problems=problems,
        alive=alive,
    )
    report = resumereport.report(run, state, events, findings, store)
    report.stopped_processes = stopped
    if stopped:
        report.note = _stopped_note(stopped) + " " + report.note
    return report


def _fence(run: Run, epoch: int, stopped: list[LiveProcess]) -> None:
    """Step 1: the ``resumed`` event with the new epoch, first; then what was stopped, and by whom."""
    # The host says which machine took the run over (runs travel: sandbox push / fetch).
    run.record(EventKind.resumed, epoch=epoch, data={"epoch": epoch, "host": socket.gethostname()})
    faults.point("resume.after_fence")
    if stopped:
        data = {"stopped_processes": [p.model_dump(mode="json") for p in stopped]}
        reason = f"resume stopped {len(stopped)} process(es) of the run's agent sessions"
        run.record(EventKind.note, epoch=epoch, reason=reason, data=data)
    _orphaned_session_reports(run, epoch)


def _mark_uncertain(run: Run, epoch: int) -> None:
    """Step 2: every call that started and never ended becomes ``uncertain`` (a durable event each)."""
    current = run.state()
    for call_id in current.order:
        if current.calls[call_id].status == CallStatus.started:
            run.record_event(
                run.new_event(
                    EventKind.call_uncertain,
                    call_id,
                    epoch=epoch,
                    reason="it started but its end was not recorded before the run was resumed",
                ),
                check=_still_started(call_id),
            )


def _refold(run: Run, problems: list[str]) -> tuple[list[tuple[str, Event]], LedgerState]:
    """Step 3: every event re-read from git and folded again, and the saved fold compared with it."""
    try:
        # Every event is parsed from git in this process (those _session_processes read just now
        # are not read twice: the ledger only grows).
        events = run.events_read()
    except CorruptionError as exc:
        raise CorruptionError(f"{exc} Resume refuses to continue on damaged evidence.") from exc
    state = run.new_state()
    for oid, event in events:
        fold_event(state, event, oid)
    # Every event was just re-read: compare the fold the other commands use with it.
    problems.extend(run.problems)
    if run.verify_fold(state):
        problems.append(
            f"The saved fold of run {run.run_id}'s ledger did not match its events; it was rebuilt from them."
        )
    return events, state


def _checkpoints(
    run: Run, events: list[tuple[str, Event]], problems: list[str]
) -> tuple[CheckpointStore, StoredCheckpoint | None, dict[str, object] | None]:
    """Step 3, the checkpoints: each re-hashed, a lost ref rebuilt; the one the session continues from."""
    store = CheckpointStore(run)
    listing = store.list()
    if listing.recovered and store.repair(listing):
        problems.append(f"The checkpoints ref was rebuilt from {len(listing.checkpoints)} checkpoint(s).")
    latest, found = store.load_latest()
    problems[:0] = found
    session, rollback = _session_checkpoint(store, latest, events, problems)
    return store, session, rollback


def _session_processes(run: Run, state: LedgerState) -> tuple[list[LiveProcess], set[str]]:
    """Live processes of the run's agent sessions; and the unfinished calls looked for.

    Every session a call of the run started in is looked at (a background server a finished call
    left running writes into the worktree as surely as an interrupted call); ``call_ids`` names the
    unfinished calls of a process's session. A call is looked for when its ``started`` event names
    a session and processes can be listed here.
    """
    if not procs.available():
        return [], set()
    unfinished = {c for c, e in state.calls.items() if e.status in (CallStatus.started, CallStatus.uncertain)}
    scopes: dict[str, ProcessScope] = {}
    for _oid, event in run.events_read():
        if event.kind == EventKind.call_started and event.call_id and event.procs is not None:
            scopes[event.call_id] = event.procs
    if not scopes:
        return [], set()
    live: list[LiveProcess] = []
    for token, proc in procs.find_any({s.token for s in scopes.values()}):
        calls = sorted(c for c, s in scopes.items() if s.token == token and c in unfinished)
        live.append(LiveProcess(pid=proc.pid, cmd=proc.cmd, call_ids=calls))
    return live, {c for c in scopes if c in unfinished}


def _orphaned_session_reports(run: Run, epoch: int) -> None:
    """Record what a supervisor stopped after its ``sandbox run`` died (its report was never read)."""
    prefix = procs.SESSION_REPORT_PREFIX
    try:
        names = [n for n in os.listdir(run.dir) if n.startswith(prefix) and n.endswith(".json")]
    except OSError:
        return
    for name in sorted(names):
        owner = name[len(prefix) : -len(".json")]
        if owner.isdigit() and procs.start_time(int(owner)) is not None:
            continue  # that `sandbox run` is alive and reads its own report
        path = os.path.join(run.dir, name)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        stopped = [p for p in data.get("stopped", []) if isinstance(p, dict)]
        reason = (
            f"sandbox run ended before its agent (exit {data.get('exit')}); the agent's supervisor stopped "
            f"{len(stopped)} process(es) it left running"
        )
        note = {"agent_exit": data.get("exit"), "stopped_processes": stopped, "supervisor": data.get("pid")}
        run.record(EventKind.note, epoch=epoch, reason=reason, data=note)
        os.unlink(path)


def _alive_message(run: Run, live: list[LiveProcess]) -> str:
    shown = ", ".join(f"{p.pid} ({p.cmd or '?'})" for p in live[:5])
    more = f" and {len(live) - 5} more" if len(live) > 5 else ""
    calls = sorted({c for p in live for c in p.call_ids})
    of = f" of call {', '.join(calls[:3])}" if calls else ""
    return (
        f"Run {run.run_id} still has {len(live)} running process(es) from the agent session{of}: {shown}{more}. "
        "They may still change the worktree, so resume changed nothing; "
        f"stop them with 'sandbox resume {run.run_id} --stop-processes', or wait for them to end."
    )


def _stop(live: list[LiveProcess], grace: float) -> list[LiveProcess]:
    if not live:
        return []
    targets = [procs.Proc(p.pid, procs.start_time(p.pid) or -1, p.cmd) for p in live]
    how = {proc.pid: ended for proc, ended in procs.stop([t for t in targets if t.start >= 0], grace)}
    return [p.model_copy(update={"state": how.get(p.pid, "TERM")}) for p in live]


def _stopped_note(stopped: list[LiveProcess]) -> str:
    shown = ", ".join(f"{p.pid} ({p.cmd or '?'})" for p in stopped[:5])
    return f"Resume stopped {len(stopped)} process(es) the agent's session had left running: {shown}."


def _still_started(call_id: str) -> Callable[[LedgerState], None]:
    def check(state: LedgerState) -> None:
        entry = state.calls.get(call_id)
        if entry is None or entry.status != CallStatus.started:
            raise CorruptionError(f"Call {call_id} changed state during the resume; resume again.")

    return check


def _session_checkpoint(
    store: CheckpointStore, latest: StoredCheckpoint | None, events: list[tuple[str, Event]], problems: list[str]
) -> tuple[StoredCheckpoint | None, dict[str, object] | None]:
    """The checkpoint the session continues from: the newest good one, unless a later
    ``rollback --session`` chose an older one."""
    after = latest.checkpoint.tool_ledger.count if latest else 0
    chosen: dict[str, object] | None = None
    for index, (_oid, event) in enumerate(events):
        if event.kind == EventKind.rollback_session and index >= after:
            chosen = dict(payloads.view(event.data, payloads.RollbackSessionData))
    if chosen is None:
        return latest, None
    try:
        target = store.find(str(chosen.get("checkpoint")))
    except SandboxError as exc:
        problems.append(f"The session was rolled back to {chosen.get('name')}, which cannot be used now ({exc}).")
        return latest, None
    return target, chosen


def _ensure_worktree(run: Run, head: str, problems: list[str]) -> bool:
    """Recreate a missing worktree at the run's head, in a new home; True when it did.

    A run made before homes existed (a linked worktree) or fetched from elsewhere gets a home here.
    """
    from sandbox.runs import materialize

    if materialize.interrupted(run) or not materialize.has_place_here(run):
        # Never made here (a fetched run), or a making of it was interrupted: made from the head.
        made = materialize.ensure(run)
        if made:
            problems.append(made[0].upper() + made[1:])
        return made is not None
    if run.worktree_exists():
        return False
    place = run.place
    stamp = int(time.time())
    home: str | None = None
    if place.home is not None and os.path.lexists(place.home):
        # Broken, but it may hold the agent's files and its own git history: moved aside inside the
        # home, never deleted (dropping the run removes them with it).
        home = place.home
        for part in (place.worktree, place.git_dir):
            if os.path.lexists(part):
                aside = os.path.join(home, f"orphaned-{os.path.basename(part)}-{stamp}")
                os.rename(part, aside)
                if part == place.git_dir:
                    # Its commondir names '../git', the git dir about to be made in its place: without
                    # it the git dir moved aside is its own again (unlink never follows a link).
                    with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
                        os.unlink(os.path.join(aside, "commondir"))
                problems.append(f"The run's {part} was broken; it was moved to {aside}.")
    elif place.legacy:
        if os.path.lexists(place.worktree):
            # Kept in the run's own directory, where gc never looks for leftovers to reclaim.
            aside = os.path.join(run.dir, f"orphaned-worktree-{stamp}")
            os.makedirs(run.dir, exist_ok=True)
            os.rename(place.worktree, aside)
            problems.append(f"The worktree at {place.worktree} was broken; its files were moved to {aside}.")
        # A stale, locked admin dir that still points at the old path.
        worktree.remove(run.project.common_dir, place.worktree)
    new = run.make_place(head, home)
    from sandbox.run import include

    # The ignored files the user listed (.worktreeinclude, .sandbox.toml) come back too.
    report = include.populate(run.user_workdir, new.worktree, run.dir)
    problems.extend(f"While recreating the worktree: {w}" for w in report.warnings)
    problems.append(f"The worktree was missing; it was recreated at the run's head {head[:12]} in {new.worktree}.")
    return True


def _pids(events: list[tuple[str, Event]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for _oid, event in events:
        if event.kind == EventKind.call_started and event.call_id and event.pid is not None:
            out[event.call_id] = event.pid
    return out


def _uncertain_pids(state: LedgerState, events: list[tuple[str, Event]]) -> set[int]:
    pids = _pids(events)
    return {pids[c] for c, e in state.calls.items() if e.status == CallStatus.uncertain and c in pids}


#: Events a resume itself writes besides drift: what came after a resume's drift when nothing else happened.
_QUIET = (EventKind.resumed, EventKind.call_uncertain, EventKind.note)


def _drift(run: Run, state: LedgerState, events: list[tuple[str, Event]]) -> tuple[list[DriftPath], str | None]:
    """Files that differ from the run's head, recorded once: each killed call's booked to it, the rest saved.

    Every path attributed to a call that recorded nothing (killed while it wrote) is booked to that
    call, one head move per call in ledger order, so that diff, status, log and apply see it as the
    call's change and drop refuses to discard it. The rest (attributed to nobody, or to a call that
    holds a change already) is saved as a commit on top, the head left where it is. Returns every path
    the latest resume found (what it booked, if nothing happened since, and what is left) and the
    commit that holds them all.
    """
    from sandbox.store import scan

    assert state.head is not None
    head_tree = objects.commit_tree(run.repo, state.head)
    # libgit2's status in a child killed at its deadline, as the host's: a file the agent swaps for a
    # FIFO while it is read blocks libgit2 for ever, holding Python's lock (sandbox.store.scan).
    candidates = scan.candidates(run.repo, run.worktree, head_tree, worker=True)
    # The sandbox's own files in the worktree (hook settings) are never drift: see sandbox.run.include.
    cap = capture(run.repo, run.worktree, head_tree, candidates, run.is_ignored, run.is_private)
    latest = _latest_found(state, events)
    booked = [p for record in latest if record.booked_to for p in record.paths]
    if not cap.changes:
        last = next((r for r in reversed(latest) if r.booked_to), None)
        if last is not None and last.commit == state.head:
            # Booked by the last resume, and only resuming happened since: the same answer again.
            return _by_path(booked), state.head
        return [], None
    previous = state.data.drift[-1] if state.data.drift else None
    key = sorted((rel, e.oid if e else None) for rel, e in cap.changes.items())
    unbooked = previous is not None and previous.commit and not previous.booked_to
    if previous is not None and unbooked and sorted((p.path, p.after) for p in previous.paths) == key:
        return _by_path([*booked, *previous.paths]), previous.commit
    paths = _attribute(run, state, events, cap)
    owners = {p.attributed_to for p in paths}
    # Killed while it wrote: a call that recorded no change of its own (one booked before keeps its own).
    killed = [c for c in state.order if c in owners and not state.calls[c].commit]
    killed = [c for c in killed if _apart([p.path for p in paths if p.attributed_to == c], paths)]
    commit: str | None = None
    for owner in killed:
        commit = _book(run, state, cap, [p for p in paths if p.attributed_to == owner])
    rest = [p for p in paths if p.attributed_to not in killed]
    if rest:
        commit = _save_rest(run, state, cap, rest)
    return _by_path([*booked, *paths]), commit


def _latest_found(state: LedgerState, events: list[tuple[str, Event]]) -> list[DriftRecord]:
    """The drift the latest resumes recorded with nothing but resuming after them (a resume killed
    between two bookings, then resumed again, counts as one), oldest first."""
    ids: set[str] = set()
    for _oid, event in reversed(events):
        if event.kind == EventKind.drift:
            ids.add(event.event_id)
        elif event.kind not in _QUIET:
            break
    return [record for record in state.data.drift if record.event_id in ids]


def _apart(mine: list[str], paths: list[DriftPath]) -> bool:
    """True when no path of ``mine`` lies above or below a drifted path of another: booked on its own,
    one call's change would then make (a file replacing a directory) or undo another's unlisted."""
    own = set(mine)
    others = [p.path for p in paths if p.path not in own]
    return not any(o.startswith(m + "/") or m.startswith(o + "/") for m in mine for o in others)


def _by_path(paths: list[DriftPath]) -> list[DriftPath]:
    return sorted({p.path: p for p in paths}.values(), key=lambda p: p.path)


def _attribute(run: Run, state: LedgerState, events: list[tuple[str, Event]], cap: Capturer) -> list[DriftPath]:
    """Each changed path, attributed to the call that was writing it when that is known: the uncertain
    call whose process left a before-write hint for it, else the one call the last crash left in flight."""
    uncertain = [c for c in state.order if state.calls[c].status == CallStatus.uncertain]
    started_pid = _pids(events)
    writers: dict[str, str] = {}
    # A process that had several calls in flight (a host serving tools in parallel) names none of them.
    pids = [started_pid[c] for c in uncertain if c in started_pid]
    by_pid = {started_pid[c]: c for c in uncertain if c in started_pid and pids.count(started_pid[c]) == 1}
    for pid, rel in before_writes(run):
        if pid in by_pid:
            writers[rel] = by_pid[pid]
    # The calls the last crash left in flight: those the latest resume that found any marked uncertain (this
    # one's, or a resume killed after it marked them), not calls left uncertain by an older one.
    marks = [ev for _oid, ev in events if ev.kind == EventKind.call_uncertain]
    newly = {ev.call_id for ev in marks if ev.epoch == max(m.epoch for m in marks)}
    in_flight = [c for c in uncertain if c in newly] or uncertain
    paths = []
    for rel in sorted(cap.changes):
        before, after = cap.before[rel], cap.changes[rel]
        paths.append(
            DriftPath(
                path=rel,
                before=before.oid if before else None,
                after=after.oid if after else None,
                before_mode=before.mode if before else None,
                after_mode=after.mode if after else None,
                attributed_to=writers.get(rel) or (in_flight[0] if len(in_flight) == 1 else None),
            )
        )
    return paths


def _book(run: Run, state: LedgerState, cap: Capturer, paths: list[DriftPath]) -> str:
    """What one killed call wrote, booked to it: its change and the run's new head (one head move)."""
    assert state.head is not None
    owner, head = paths[0].attributed_to, state.head
    changes = {p.path: cap.changes[p.path] for p in paths}
    tree = objects.edit_tree(run.repo, objects.commit_tree(run.repo, head), changes)

    def fields_of(commit: str) -> dict[str, object]:
        data = {"paths": [p.model_dump(mode="json") for p in paths], "commit": commit, "booked_to": owner}
        where = f"{head}..{commit}"
        files = [objects.file_change(r, cap.before[r], cap.changes[r], where, owner) for r in sorted(changes)]
        return {"data": data, "files": files}

    commit, new = run.move_head(
        EventKind.drift,
        owner,
        tree=tree,
        parent=head,
        message=_message(run, paths),
        fields_of=fields_of,
        fault="resume.booking",
        epoch=state.epoch,
    )
    state.data, state.head, state.calls = new.data, new.head, new.calls
    return commit


def _save_rest(run: Run, state: LedgerState, cap: Capturer, paths: list[DriftPath]) -> str:
    """The changes booked to no call: saved as a commit on the run's head, which stays where it is."""
    assert state.head is not None
    tree = objects.edit_tree(
        run.repo, objects.commit_tree(run.repo, state.head), {p.path: cap.changes[p.path] for p in paths}
    )

    def fields_of(commit: str) -> dict[str, object]:
        return {"data": {"paths": [p.model_dump(mode="json") for p in paths], "commit": commit, "booked_to": None}}

    commit, new = run.move_head(
        EventKind.drift,
        None,
        tree=tree,
        parent=state.head,
        message=_message(run, paths),
        fields_of=fields_of,
        epoch=state.epoch,
    )
    state.data, state.head, state.calls = new.data, new.head, new.calls
    return commit


def _message(run: Run, paths: list[DriftPath]) -> str:
    return trailers.message(
        "sandbox: drift found at resume", [(trailers.RUN, run.run_id), (trailers.DRIFT, f"{len(paths)} path(s)")]
    )
