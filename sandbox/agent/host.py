"""The repository's host: one process serving every run's hooks, watcher and session.

A hook process (``sandbox hook claude-code``) is cheap only when a long-lived process records its
event: it then imports the standard library, hands the event over a socket and exits. One such
process serves a whole repository, whatever the number of runs: ``sandbox serve`` (started on
demand by the first hook, ``sandbox exec`` or ``sandbox run`` that finds none, see
:func:`sandbox.agent.wire.claim_spawn`), exiting after a spell without requests.

Why one per repository (not one per run, not one per user): the repository is opened once and
every run shares it (pygit2 objects, packs, the ledger folds: ~40 MiB for one host instead of
~40 MiB per run); the host's files live in the repository's own state directory, so its lifetime
and permissions follow the repository; and a crash costs one repository's runs a restart, not
every repository's.

What it holds (:class:`Host`):

* one socket, ``<common>/sandbox/host/host.sock`` (:mod:`sandbox.agent.wire`: the protocol, who may
  ask what), read by one thread under caps and deadlines and answered by a few workers, fairly
  between runs, then peers (:mod:`sandbox.agent.intake`: one sandbox's flood of connections, or one
  run's flood of requests, never stops another run's hooks, and never the host);
* one liveness record: the flock of ``host.lock`` held for its whole life, and ``host.json``
  (:class:`~sandbox.models.HostInfo`) beside it;
* one inotify instance (:mod:`sandbox.fast.inotify`) watching every served run's worktree, its
  watches counted; a run that does not fit (the user's inotify limits, or the host's own
  ``max_runs_watched`` / ``max_watches``) is served without a watcher and its changes are found by
  scanning, which the first reply for that run says in one line (``note``);
* per run, a :class:`Slot`: the run, its :class:`~sandbox.agent.recorder.Recorder`, its change source.

Recording is serialised by one lock (the runs share one repository object); the watcher's windows
are not, nor reading the agent's files (a run reads them holding only its slot's lock first, see
:mod:`sandbox.store.preread`: one run's huge or many files cost that run only). A host killed
with SIGKILL loses nothing recorded: a hook whose request got no answer records in its own process
(idempotently), and the next one starts a new host. That host finds the
liveness record its predecessor left (a host that stops cleanly removes it) and records the outage
as a ``note`` event in each run it serves (:meth:`Host.slot`), so ``log`` shows when hooks were
recorded without a host.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from sandbox import faults
from sandbox.agent import calltrees, changes, hookproto, intake, procs, wire
from sandbox.agent.recorder import Recorder
from sandbox.confine import settingstree
from sandbox.errors import CorruptionError, SandboxError
from sandbox.fast.inotify import Inotify, Tree
from sandbox.store import locks

if TYPE_CHECKING:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

#: Default seconds without a request after which the host exits.
IDLE_EXIT = 900.0
#: Seconds between checks that the served runs still exist.
CHECK_EVERY = 2.0
#: After this long without a request, the runs recorded since are sealed (their fold cache written
#: at the ledger's tip), so the next ``status`` or ``log`` reads without git (sandbox.fast.foldcache).
SEAL_WHEN_QUIET = 1.0


class HostBusyError(SandboxError):
    """Another live process hosts this repository."""


@dataclass
class Slot:
    """One run served by the host."""

    run: Run
    recorder: Recorder
    source: changes.ChangeSource
    tree: Tree | None = None
    #: Why the run's changes are found by scanning (one line), or None while watched.
    note: str | None = None
    noted: bool = False
    requests: int = 0
    retry_at: float = 0.0
    backoff: float = 1.0
    #: Calls were recorded since the run's fold cache was last sealed.
    unsealed: bool = False
    #: The run's own lock: taken before the shared ``record_lock`` by whatever records the run, and
    #: held while its recording reads the agent's files with the shared lock let go.
    lock: threading.Lock = field(default_factory=threading.Lock)


class Host:
    """Serves every run of one repository; see the module docstring. Use :meth:`serve`.

    ``max_runs_watched`` and ``max_watches`` cap the runs watched and the inotify watches held
    (below the user's limits; tests use them to stand for limits they cannot lower). ``on_event``
    gets one line per handled request (``sandbox serve`` logs them).
    """

    def __init__(
        self,
        project: Project,
        *,
        max_runs_watched: int | None = None,
        max_watches: int | None = None,
        on_event: Callable[[str], None] | None = None,
        limits: intake.Limits | None = None,
    ) -> None:
        self.project = project
        self.limits = limits or intake.Limits(max_request=wire.MAX_REQUEST)
        self.common_dir = project.common_dir
        self.on_event = on_event
        self.max_runs_watched = max_runs_watched
        self.max_watches = max_watches
        self.slots: dict[str, Slot] = {}
        #: Serialises everything that writes the repository (recording, opening runs).
        self.record_lock = threading.Lock()
        self._slots_lock = threading.Lock()
        self.inotify: Inotify | None = None
        self.path = wire.socket_path(self.common_dir)
        self.received = 0
        self.handled = 0
        #: Why the host works in a degraded way (one line each), for the log.
        self.notes: list[str] = []
        self._lock_fd = -1
        self._sock: socket.socket | None = None
        self._accept: threading.Thread | None = None
        self.intake: intake.Intake | None = None
        #: The previous host died without cleaning up: (its pid, when it started), recorded once
        #: per served run as a ``note`` event (see :meth:`_note_outage`).
        self.outage: Outage | None = None
        self._stop = threading.Event()
        self._boot_id = procs.boot_id()
        self._ns = procs.pid_namespace("self")
        self.trees = calltrees.CallTrees()  # who started each open call: payloads from below are refused

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Take the host lock, bind the socket, publish ``host.json``, start watching and accepting.

        :class:`HostBusyError` when another live process hosts the repository.
        """
        fd = wire.try_lock(self.common_dir)
        if fd is None:
            raise HostBusyError("Another process already hosts this repository's runs ('sandbox serve').")
        self._lock_fd = fd
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # left by a host that was killed: we hold the lock now
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            wire.bind(sock, self.path)
            os.chmod(self.path, 0o600)
            sock.listen(128)
            self._sock = sock
            self.inotify = Inotify(max_watches=self.max_watches, max_trees=self.max_runs_watched)
            if self.inotify.error is not None:
                self.notes.append(self.inotify.error)
            self.outage = _left_behind(self.common_dir)
            self._publish()
        except BaseException:
            self.stop()
            raise
        self.intake = intake.Intake(
            sock, self._answer, peer_key=self._peer_key, lane=wire.run_named, limits=self.limits, note=self._note
        )
        self._accept = threading.Thread(target=self.intake.run, name="sandbox-host", daemon=True)
        self._accept.start()

    def _note(self, line: str) -> None:
        self.notes.append(line)
        if self.on_event is not None:
            self.on_event(line)

    def _peer_key(self, peer: tuple[int, int] | None) -> str:
        """What a connection counts against: a confined peer's PID namespace (its sandbox), else its process."""
        if peer is None:
            return "unknown"
        ns = procs.pid_namespace(str(peer[0]))
        return f"process {peer[0]}" if ns is None or ns == self._ns else f"sandbox {ns}"

    def _publish(self) -> None:
        from sandbox.models import HostInfo
        from sandbox.store.fsutil import atomic_write

        info = HostInfo(pid=os.getpid(), socket=self.path)
        atomic_write(os.path.join(wire.host_dir(self.common_dir), wire.INFO), info.model_dump_json().encode(), 0o600)

    def request_stop(self) -> None:
        """Ask :meth:`serve` to return (safe in a signal handler)."""
        self._stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop accepting, wait (up to ``timeout``) for requests in flight, release everything."""
        sock, self._sock = self._sock, None
        if self.intake is not None:
            self.intake.stop(timeout)
        if self._accept is not None:
            self._accept.join(timeout=5)
        if self.intake is not None:
            self.intake.close()
        if sock is not None:
            sock.close()
            if self._lock_fd >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(wire.host_dir(self.common_dir), wire.INFO))
        if self.inotify is not None:
            self.inotify.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def serve(
        self, *, idle_exit: float = IDLE_EXIT, tick: float = 0.5, on_ready: Callable[[Host], None] | None = None
    ) -> str:
        """Start, serve until asked to stop or idle for ``idle_exit`` s, then stop; why it stopped."""
        self.start()
        try:
            if on_ready is not None:
                on_ready(self)
            seen, last, checked = self.activity(), time.monotonic(), 0.0
            while not self._stop.wait(min(tick, idle_exit / 4)):
                now = time.monotonic()
                if now - checked >= CHECK_EVERY:
                    checked = now
                    if not os.path.isdir(wire.host_dir(self.common_dir)):
                        return "the repository's sandbox directory is gone"
                    try:
                        self.check_runs()
                    except OSError as exc:  # out of descriptors for a moment: check again later
                        self._note(f"checking the served runs failed ({exc.strerror or exc}); checked again later")
                self.rewatch_lost()
                activity = self.activity()
                if activity != seen:
                    seen, last = activity, now
                elif now - last >= idle_exit:
                    return f"no request for {idle_exit:g} s"
                elif now - last >= SEAL_WHEN_QUIET:
                    self.seal_recorded()
            return "asked to stop"
        finally:
            self.stop()

    def seal_recorded(self) -> None:
        """Seal the fold cache of every run that recorded calls since it was last sealed (the host
        writes it every 16 events only, as recording must not pay O(ledger) per call)."""
        for slot in list(self.slots.values()):
            if not slot.unsealed:
                continue
            if not slot.lock.acquire(blocking=False):
                continue  # the run is recording (its files may take long to read): sealed next time
            try:
                slot.unsealed = False
                with self.record_lock, contextlib.suppress(SandboxError, OSError):
                    slot.run.seal_cache()
            finally:
                slot.lock.release()

    def activity(self) -> tuple[int, int]:
        """Changes whenever a request arrives or is handled."""
        if self.intake is None:
            return (self.received, self.handled)
        return (self.received + self.intake.received, self.handled + self.intake.handled)

    # -- runs ----------------------------------------------------------------------------------

    def slot(self, run_id: str) -> Slot:
        """The served run ``run_id``, opened (and watched when it fits) on first use."""
        with self._slots_lock:
            found = self.slots.get(run_id)
            if found is not None:
                return found
            from sandbox.run.run import Run

            with self.record_lock:
                run = Run.open(self.project, run_id)
                run.state()
            recorder = Recorder(run, changes.Scan(), boot_id=self._boot_id)
            slot = Slot(run, recorder, recorder.source)
            self._watch(slot)
            self.slots[run_id] = slot
            self._note_outage(run)
            return slot

    def _note_outage(self, run: Run) -> None:
        """Record in ``run`` that the previous host died (once per run and host): hooks recorded in
        their own processes meanwhile, by scanning, and the host was started again by the first
        client that found it gone."""
        if self.outage is None:
            return
        with self.record_lock, contextlib.suppress(SandboxError, OSError):
            run.note({"host_outage": self.outage})

    def _watch(self, slot: Slot) -> None:
        if self.inotify is None:
            return
        tree = self.inotify.watch(slot.run.worktree, slot.run.is_private)
        if tree.vouching:
            slot.tree, slot.note = tree, None
            slot.source = slot.recorder.source = changes.TreeSource(tree)
            slot.backoff = 1.0
        else:
            self.inotify.unwatch(tree)
            slot.tree = None
            first = slot.note is None
            slot.note = tree.lost_reason
            slot.noted = slot.noted and not first
            slot.source = slot.recorder.source = changes.Scan(tree.lost_reason)
            slot.retry_at = time.monotonic() + slot.backoff
            slot.backoff = min(slot.backoff * 2, 60.0)
            if self.on_event is not None and first:
                self.on_event(f"run {slot.run.run_id}: {tree.lost_reason}")

    def rewatch_lost(self) -> None:
        """Watch again the runs whose watcher lost events or did not fit, backing off."""
        now = time.monotonic()
        for slot in list(self.slots.values()):
            tree = slot.tree
            if tree is not None and tree.vouching:
                continue
            if now < slot.retry_at:
                continue
            if tree is not None and self.inotify is not None:
                slot.note = tree.lost_reason
                self.inotify.unwatch(tree)
                slot.tree = None
            self._watch(slot)

    def forget(self, run_id: str) -> bool:
        """Stop serving a run (dropped, or its worktree gone); True when it was served."""
        with self._slots_lock:
            slot = self.slots.pop(run_id, None)
        if slot is None:
            return False
        if slot.tree is not None and self.inotify is not None:
            self.inotify.unwatch(slot.tree)
        return True

    def check_runs(self) -> None:
        """Forget the runs that are gone (dropped, worktree removed, ledger deleted)."""
        for run_id, slot in list(self.slots.items()):
            reason = self._gone(slot.run)
            if reason is not None:
                self.forget(run_id)
                if self.on_event is not None:
                    self.on_event(f"run {run_id}: no longer served ({reason})")

    def _gone(self, run: Run) -> str | None:
        if not os.path.isdir(run.dir):
            return "the run was dropped"
        if not os.path.isdir(run.worktree):
            return "the run's worktree is gone"
        with self.record_lock:
            try:
                if not run.exists():
                    return "the run was dropped"
            except CorruptionError as exc:
                return exc.message
        return None

    # -- requests ------------------------------------------------------------------------------

    def _answer(self, data: bytes | None, peer: tuple[int, int] | None) -> bytes:
        """The reply to one whole request read by the intake (None: it was larger than allowed)."""
        if data is None:
            reply: wire.Reply | wire.StatusReply = {
                "ok": False,
                "error": f"The request is larger than {self.limits.max_request} bytes; record it in your own process.",
            }
        else:
            try:
                request = json.loads(data)
            except (ValueError, RecursionError):  # nested deeper than Python recurses: a forged one
                reply = {"ok": False, "error": "The request is not valid JSON."}
            else:
                reply = self.handle(request, peer)
        return json.dumps(reply).encode() + b"\n"

    def handle(self, request: object, peer: tuple[int, int] | None = None) -> wire.Reply | wire.StatusReply:
        """Answer one decoded request from ``peer`` (pid, uid; None: trusted, in-process)."""
        if not isinstance(request, dict):
            return {"ok": False, "error": "A request is a JSON object."}
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "runs": len(self.slots)}
        if op in wire.CONTROL_OPS:
            refusal = self._control_refusal(peer)
            if refusal is not None:
                return {"ok": False, "error": refusal}
            return self._control(op, request)
        if op not in ("hook", "begin", "end", "quiet"):
            return {"ok": False, "error": f"Unknown operation {op!r}."}
        run_id = request.get("run")
        from sandbox.store import layout

        if not isinstance(run_id, str) or not layout.valid_run_id(run_id):
            return {"ok": False, "error": "The request names no valid run."}
        run_dir = layout.run_dir(self.common_dir, run_id)
        expected = wire.run_token(run_dir, create=False)
        given = request.get("token")
        if expected is None or not isinstance(given, str) or not hmac.compare_digest(expected, given):
            return {"ok": False, "error": f"The request for run {run_id} does not carry its token; nothing recorded."}
        try:
            slot = self.slot(run_id)
        except SandboxError as exc:
            return {"ok": False, "error": exc.message}
        slot.requests += 1
        if op == "hook":
            return self._hook(slot, request.get("event"), peer)
        if op == "quiet":
            tree = slot.tree
            age = time.monotonic() - tree.last_event if tree is not None and tree.last_event else None
            return {"ok": True, "last_change": age, "watched": tree is not None and tree.vouching}
        call_id = request.get("call")
        if not isinstance(call_id, str) or not call_id or len(call_id) > 512:
            return {"ok": False, "error": "A call id is a non-empty string."}
        if op == "begin":
            with slot.lock, self.record_lock:  # the run's first, as a recording takes them
                self.trees.begun(slot.run, call_id, peer)
            slot.source.begin(call_id)
            return {"ok": True, "watched": slot.source.name == "watcher"}
        paths = slot.source.end(call_id)
        return {"ok": True, "paths": sorted(paths) if paths is not None else None, "reason": slot.note}

    def _hook(self, slot: Slot, raw: object, peer: tuple[int, int] | None = None) -> wire.Reply:
        try:
            event = hookproto.HookEvent.from_dict(raw)
        except hookproto.HookInputError as exc:
            return {"ok": False, "message": exc.message}
        inside = self.trees.inside(peer[0]) if peer is not None else None
        if inside is not None and peer is not None:
            target = self.slots.get(inside.run_id, slot)
            with target.lock, self.record_lock:  # in recording's order (it lets the shared one go to read)
                return calltrees.refuse(target.run, event, inside, peer[0])
        if peer is not None:
            # The session is the connecting process's, from its ancestry; what the payload says is
            # the agent's word (a confined agent can send any payload): see Recorder._foreign.
            event.session = procs.session_of(peer[0])
        # The run's lock, then the shared one; the agent's files are read with the shared one let go.
        with slot.lock, self.record_lock:
            slot.unsealed = True
            slot.run.outside_shared_lock = functools.partial(locks.released, self.record_lock)
            slot.run.scan_in_worker = True
            try:
                outcome = slot.recorder.record(event)
            except Exception as exc:  # the host must outlive one bad request; the hook reports it
                outcome = hookproto.Outcome(False, f"recording failed: {type(exc).__name__}: {exc}")
            finally:
                slot.run.outside_shared_lock = contextlib.nullcontext
            outcome.foreign, outcome.settings = settingstree.whose(slot.run) if event.phase == "start" else (None, None)
        self.trees.recorded(slot.run.run_id, event.phase, outcome, peer)
        faults.point("host.after_record")  # recorded, not yet answered: the client records again (idempotent)
        if slot.note is not None and not slot.noted:
            slot.noted = True
            outcome.note = slot.note
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a log that cannot be written must not fail the hook
                state = "ok" if outcome.ok else "refused"
                self.on_event(
                    f"{slot.run.run_id} {event.phase} {event.tool} {event.call_id or '-'} via socket: {state}: "
                    f"{outcome.message}"
                )
        return outcome.to_reply()

    def _control_refusal(self, peer: tuple[int, int] | None) -> str | None:
        if peer is None:
            return None
        pid, uid = peer
        if uid != os.getuid():
            return "Only the user who owns the host may control it."
        ns = procs.pid_namespace(str(pid))
        if ns is None or self._ns is None or ns != self._ns:
            return "Control operations are refused to confined processes."
        return None

    def _control(self, op: str, request: dict[str, object]) -> wire.Reply | wire.StatusReply:
        if op == "stop":
            self.request_stop()
            return {"ok": True}
        if op == "forget":
            run_id = request.get("run")
            forgotten = isinstance(run_id, str) and self.forget(run_id)
            if forgotten and self.on_event is not None:
                self.on_event(f"run {run_id}: no longer served (asked to forget it: it is being dropped)")
            return {"ok": True, "forgotten": forgotten}
        return {"ok": True, **self.status()}

    def status(self) -> wire.HostStatus:
        """What the host serves: its runs (watched or scanning, and why), its inotify use."""
        inotify = self.inotify
        return {
            "pid": os.getpid(),
            "runs": {
                run_id: {
                    "watched": slot.tree is not None and slot.tree.vouching,
                    "watches": slot.tree.watches if slot.tree is not None else 0,
                    "note": slot.note,
                    "requests": slot.requests,
                }
                for run_id, slot in list(self.slots.items())
            },
            "inotify": {
                "instances": 1 if inotify is not None and inotify.fd >= 0 else 0,
                "watches": inotify.watches if inotify is not None else 0,
                "max_watches": self.max_watches,
                "max_runs_watched": self.max_runs_watched,
            },
            "notes": list(self.notes),
            "connections": self.intake.open_connections() if self.intake is not None else {},
        }


class Outage(TypedDict):
    """A host that died, as noted in each run the next host serves (a ``note`` event's ``host_outage``)."""

    previous_pid: int
    previous_started_at: str
    restarted_at: str
    note: str


def _left_behind(common_dir: str) -> Outage | None:
    """The liveness record a host that died left (we hold the lock now: it is not alive), or None."""
    from pydantic import ValidationError

    from sandbox.models import HostInfo, utcnow

    data = wire.read_info(common_dir)
    try:
        info = HostInfo.model_validate_json(data) if data is not None else None
    except ValidationError:
        return None
    if info is None:
        return None
    return {
        "previous_pid": info.pid,
        "previous_started_at": info.started_at.isoformat(),
        "restarted_at": utcnow().isoformat(),
        "note": "the repository's host had died; hooks recorded in their own processes until it was restarted",
    }


class HostClaim:
    """The repository's host lock, held by this process (no host can start while it is held)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        """Let go of the lock (idempotent)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def claim(common_dir: str) -> HostClaim | None:
    """Take the repository's host lock without waiting; None while a host lives."""
    fd = wire.try_lock(common_dir)
    return HostClaim(fd) if fd is not None else None


def stop_host(common_dir: str, timeout: float = 10.0) -> bool:
    """Ask the repository's host to stop and wait up to ``timeout`` s for it to go; True if one ran."""
    if not wire.host_alive(common_dir):
        return False
    wire.Client(common_dir).request({"op": "stop"}, 5.0)
    deadline = time.monotonic() + timeout
    while wire.host_alive(common_dir) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def forget_run(common_dir: str, run_id: str) -> None:
    """Tell the repository's host (if one lives) to stop serving a run (it is being dropped)."""
    if wire.host_alive(common_dir):
        wire.Client(common_dir).request({"op": "forget", "run": run_id}, 5.0)


def host_pid(common_dir: str) -> int | None:
    """The pid in the live host's ``host.json``, or None."""
    if not wire.host_alive(common_dir):
        return None
    from pydantic import ValidationError

    from sandbox.models import HostInfo

    data = wire.read_info(common_dir)  # only the user's own record, never through a link
    try:
        return HostInfo.model_validate_json(data).pid if data is not None else None
    except ValidationError:
        return None
