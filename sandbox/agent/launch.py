"""Running a real coding agent in a run's worktree: the library side of ``sandbox run``.

For the whole session:

* the repository's host (:mod:`sandbox.agent.host`, started when none lives: ``start_host``) records
  the agent's hooks and watches the worktree, as it does for every run of the repository; a hook
  never pays for importing pygit2 and pydantic, and a command's changes come from a watcher window;
* this process cuts: at quiet points (the host saw no file event for ``debounce`` seconds, no call
  in flight) changes that no hook recorded become one ``agent_session`` call, with the paths of a
  window the host keeps for the session. With no hooks that is the only record; with hooks it
  catches what happened outside tool calls. If the host dies, it is started again.

The agent runs with its working directory in the worktree; its ``git`` uses the run's own git
directory (see :mod:`sandbox.store.worktree`), so its branches, stash, config and hooks stay in the run.
Its exit code is passed through.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox.agent import early, procs
from sandbox.models import CallStatus, EventKind, ProcessScope
from sandbox.run.run import Run

if TYPE_CHECKING:
    from sandbox.agent.wire import RunChanges
    from sandbox.confine.spawn import Isolation

SESSION_TOOL = "agent_session"
#: How a shell reports a command ended by SIGINT (128 + 2): an agent quit with Ctrl-C exits so.
INTERRUPTED_EXIT = 130
#: Seconds between the last Ctrl-C and the agent's end within which the session counts as interrupted
#: by it (later, the agent took it as "stop this answer" and went on).
INTERRUPT_WINDOW = 10.0
GITHOOKS_DIR = "githooks"
#: Seconds the agent's leftover processes get between SIGTERM and SIGKILL when it ends.
STOP_GRACE = 3.0
#: The reference-transaction hook the agent's git runs: only per-worktree refs and pseudo-refs
#: may move; everything else (branches, tags, the stash, remotes) is the user's.
_REF_GUARD = """#!/bin/sh
# Installed by sandbox for one run. The run's worktree shares refs with your repository, so a ref
# update from the agent's git (a branch, a tag, the stash) would leak into it.
input=$(cat)
if [ "$1" = prepared ]; then
  printf '%s\\n' "$input" | while read -r old new ref; do
    case "$ref" in
      ""|HEAD|ORIG_HEAD|FETCH_HEAD|MERGE_HEAD|CHERRY_PICK_HEAD|REVERT_HEAD|BISECT_HEAD|AUTO_MERGE) ;;
      refs/worktree/*|refs/bisect/*|refs/rewritten/*) ;;
      *) echo "sandbox: refused to update $ref: this worktree shares refs with your repository" \\
              "(commit on the detached HEAD; new branches, tags and 'git stash' are not available here)." >&2
         exit 1 ;;
    esac
  done || exit 1
fi
user_hook={user_hook}
if [ -n "$user_hook" ] && [ -x "$user_hook" ]; then
  printf '%s\\n' "$input" | "$user_hook" "$@"
  exit $?
fi
exit 0
"""


@dataclass
class SessionResult:
    """How a session ended."""

    returncode: int
    hosted_hooks: bool
    cuts: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Processes the agent left running that were stopped when it ended: {pid, cmd, how}.
    stopped: list[dict[str, Any]] = field(default_factory=list)
    #: The session's token and supervisor (see :mod:`sandbox.agent.procs`).
    scope: ProcessScope | None = None
    #: The session was interrupted (Ctrl-C / SIGINT reached it, or the agent exited 130): why, else None.
    interrupted: str | None = None
    #: Connections the network allowlist refused in the session (``--network allow``).
    network_refused: int = 0


# -- the agent's git -----------------------------------------------------------------------------


def install_ref_guard(run: Run) -> str:
    """Write the run's git hooks dir (a reference-transaction guard); returns its path.

    The user's own hooks (from ``core.hooksPath`` or ``.git/hooks``) are linked in, so the
    agent's commits in the worktree still run them; the user's reference-transaction hook runs
    after the guard.
    """
    from sandbox.store.fsutil import atomic_write

    hooks_dir = os.path.join(run.dir, GITHOOKS_DIR)
    os.makedirs(hooks_dir, exist_ok=True)
    user_dir = _user_hooks_dir(run)
    user_rt = os.path.join(user_dir, "reference-transaction") if user_dir else ""
    script = _REF_GUARD.replace("{user_hook}", _sh_quote(user_rt))
    atomic_write(os.path.join(hooks_dir, "reference-transaction"), script.encode(), 0o755)
    if user_dir and os.path.isdir(user_dir):
        for name in os.listdir(user_dir):
            src = os.path.join(user_dir, name)
            dst = os.path.join(hooks_dir, name)
            if name == "reference-transaction" or name.endswith(".sample") or os.path.lexists(dst):
                continue
            if os.path.isfile(src) and os.stat(src).st_mode & stat.S_IXUSR:
                os.symlink(src, dst)
    return hooks_dir


def _user_hooks_dir(run: Run) -> str | None:
    try:
        configured = run.repo.config["core.hooksPath"]
    except (KeyError, ValueError):
        configured = None
    if configured:
        return os.path.join(run.user_workdir, os.path.expanduser(str(configured)))
    return os.path.join(run.project.common_dir, "hooks")


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def agent_env(
    base: Mapping[str, str], run: Run, hooks_dir: str | None = None, session: str | None = None
) -> dict[str, str]:
    """The agent's environment: ``base`` plus the run's id, the session token (``SANDBOX_SESSION``,
    see :mod:`sandbox.agent.procs`) and, for a legacy run, the ref guard.

    ``hooks_dir`` is given only for a run made before homes existed (a linked worktree sharing the
    user's refs). git reads ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` as command-line config in every process
    that inherits them, so every git the agent runs uses the guard's hooks dir. (git has no
    per-worktree ``info/exclude`` or refs namespace, and per-worktree config would need
    ``extensions.worktreeConfig`` written into the user's repository config.)
    """
    return early.agent_env(base, run.run_id, hooks_dir, session)


# -- cutting changes into agent_session calls ----------------------------------------------------


def cut(
    run: Run, candidates: set[str] | None, reason: str = "quiet point", interrupted: str | None = None
) -> str | None:
    """Record the worktree's unrecorded changes among ``candidates`` (None: scan) as one call.

    Nothing is recorded when a call is in flight (its own finish will capture its changes) or
    when nothing differs from the run's head. Returns the new call's id. ``interrupted``: the
    session was interrupted (why); the call is then ``failed`` with that error, not ``succeeded``,
    because the agent did not finish the work these changes belong to (they are kept all the same).
    """
    from sandbox.store import objects
    from sandbox.store.capture import capture

    with run.lock():
        state = run.state()
        if any(e.status == CallStatus.started for e in state.calls.values()):
            return None
        assert state.head is not None
        head_tree = objects.commit_tree(run.repo, state.head)
        if candidates is None:
            from sandbox.store import scan

            # In a worker killed at its deadline: the agent may still run (a quiet point whose window did not
            # vouch), and a rule file it swaps for a FIFO while libgit2 reads would stop this process.
            candidates = scan.candidates(run.repo, run.worktree, head_tree, worker=True)
        cap = (
            capture(run.repo, run.worktree, head_tree, candidates, run.is_ignored, run.is_private)
            if candidates
            else None
        )
        if cap is None or not cap.changes:
            if interrupted:
                # Nothing left to cut (a quiet point took it, or the agent wrote nothing): the ledger
                # still says the session was interrupted, as a failed call with no changes (issue 21).
                call_id = run.start_call(
                    SESSION_TOOL,
                    {"reason": reason, "paths": [], "count": 0},
                    idempotency="conditional",
                    replay="ask",
                    summary="the session was interrupted; no change outside recorded tool calls since the last one",
                )
                run.finish_call(call_id, CallStatus.failed, paths=[], error=interrupted)
                return call_id
            return None
        changed = sorted(cap.changes)
        call_id = run.start_call(
            SESSION_TOOL,
            {"reason": reason, "paths": changed[:200], "count": len(changed)},
            idempotency="conditional",
            replay="ask",
            summary=f"{len(changed)} path(s) changed by the agent outside recorded tool calls",
        )
        if interrupted:
            run.finish_call(call_id, CallStatus.failed, paths=changed, error=interrupted)
        else:
            run.finish_call(call_id, CallStatus.succeeded, paths=changed)
        return call_id


class Cutter:
    """Cuts changes into ``agent_session`` calls at quiet points, in a background thread.

    ``changes`` is the host's view of the run (:class:`sandbox.agent.wire.RunChanges`), None when
    there is no host (then only the final cut, a scan, records anything). ``restart_host`` is
    called when the host stops answering.
    """

    def __init__(
        self,
        run: Run,
        changes: RunChanges | None,
        debounce: float,
        restart_host: Callable[[], None] | None = None,
        window: str | None = None,
    ) -> None:
        self.run = run
        self.changes = changes
        self.lock = threading.Lock()
        self.debounce = debounce
        self.restart_host = restart_host
        self.cuts: list[str] = []
        self.errors: list[str] = []
        # ``window``: already begun on the host (sandbox.agent.early opens it before the agent starts).
        self._window = window or f"session-{secrets.token_hex(6)}"
        self._open = window is not None and changes is not None
        self._seen_event = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-cutter", daemon=True)

    def start(self) -> None:
        """Start cutting."""
        if not self._open:
            self._open_window()
        self._thread.start()

    def _open_window(self) -> None:
        if self.changes is not None:
            self.changes.begin(self._window)
            self._open = True

    def stop(self) -> None:
        """Stop cutting (the caller makes the final cut)."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        tick = min(0.5, self.debounce / 4)
        while not self._stop.wait(tick):
            if self.changes is None:
                continue
            quiet = self.changes.last_change()
            if quiet is None:
                if self.changes.client.ping() is None and self.restart_host is not None:
                    with contextlib.suppress(Exception):  # a host is help; the final scan records all
                        self.restart_host()
                    self._open = False
                continue
            if not self._open:
                self._open_window()
            last = time.monotonic() - quiet
            if last <= self._seen_event + 0.05 or quiet < self.debounce:
                continue
            self._seen_event = last
            self.cut_now()

    def cut_now(self, final: bool = False, interrupted: str | None = None) -> None:
        """Cut now: with the host window's paths when it vouches, else (or when ``final``) a scan."""
        with self.lock:
            if any(e.status == CallStatus.started for e in self.run.state().calls.values()):
                return  # its finish captures its changes; the window keeps collecting meanwhile
            paths: set[str] | None = None
            if self.changes is not None and self._open and not final:
                paths = self.changes.end(self._window)
                self._open_window()
            try:
                reason = ("session interrupted" if interrupted else "session end") if final else "quiet point"
                made = cut(self.run, None if final else paths, reason, interrupted)
            except Exception as exc:  # a failed cut must not end the session; the final scan retries
                self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            if made:
                self.cuts.append(made)


# -- the session ---------------------------------------------------------------------------------


def run_session(
    run: Run,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    subdir: str = "",
    debounce: float = 2.0,
    on_signal: Callable[[int], None] | None = None,
    is_foreground: Callable[[], bool] | None = None,
    grace: float = STOP_GRACE,
    isolation: Isolation | None = None,
    start_host: Callable[[], None] | None = None,
    started: early.Started | None = None,
) -> SessionResult:
    """Run the agent ``argv`` in the run's worktree until it exits; see the module docstring.

    The agent runs below a supervisor (:mod:`sandbox.agent.reaper`) that owns its whole process tree:
    when the agent ends, however it ends, what it left running is stopped (SIGTERM, SIGKILL after
    ``grace`` s), and a ``note`` event in the ledger lists those processes. Every call started in
    the session records the session's :class:`~sandbox.models.ProcessScope`, so ``sandbox resume``
    can find survivors later (say, when ``sandbox run`` itself was killed).

    SIGINT, SIGTERM and SIGHUP are passed to the agent (SIGINT only when it did not already get it
    from the terminal: ``is_foreground()`` says whether this process group owns the terminal).
    ``isolation``: how the agent is confined (:mod:`sandbox.confine.spawn`), recorded as a ``note``
    event; confined, its hooks can only record through the repository's host, so the session
    refuses to start when no host can be had. ``start_host()`` spawns one (``sandbox serve``)
    without waiting; without it, a host that does not live already is not started.
    A session whose agent ended within :data:`INTERRUPT_WINDOW` s of a SIGINT, or exited 130, is
    *interrupted*: its final cut is recorded ``failed`` with the reason, and a ``note`` event says
    so (``result.interrupted``).
    ``started``: the agent already started by :func:`sandbox.agent.early.start` (``sandbox run``
    does so before it opens the run: start-up), with the same arguments; None: started here.
    The run is left in place. Must be called from the main thread (signal handlers).
    """
    if started is None:
        # A run with its own git dir needs no guard: the agent's refs are the run's. Only a run made
        # before homes existed shares the user's refs (until 'sandbox gc' moves it).
        hooks_dir = install_ref_guard(run) if run.place.legacy else None
        started = early.start(
            where_of(run),
            argv,
            env=env,
            subdir=subdir,
            isolation=isolation,
            start_host=start_host,
            on_signal=on_signal,
            is_foreground=is_foreground,
            grace=grace,
            hooks_dir=hooks_dir,
        )
    try:
        return _attend(run, started, argv, subdir, debounce, grace, isolation, start_host)
    finally:
        started.release()
        started.stop_proxy()


def where_of(run: Run) -> early.Where:
    """What :func:`sandbox.agent.early.start` needs of an open run."""
    return early.Where(
        common_dir=run.project.common_dir,
        run_id=run.run_id,
        run_dir=run.dir,
        worktree=run.worktree,
        user_workdir=run.user_workdir,
        legacy=run.place.legacy,
    )


def _attend(
    run: Run,
    started: early.Started,
    argv: Sequence[str],
    subdir: str,
    debounce: float,
    grace: float,
    isolation: Isolation | None,
    start_host: Callable[[], None] | None,
) -> SessionResult:
    """The session's records while its agent (started) runs, and after it ended."""
    from sandbox.agent import wire

    result = SessionResult(returncode=0, hosted_hooks=started.hosted_hooks)
    result.scope = ProcessScope(token=started.token, boot_id=started.boot_id)
    if started.supervisor_pid is not None:
        result.scope.supervisor_pid = started.supervisor_pid
        result.scope.supervisor_start = started.supervisor_start
    common_dir = run.project.common_dir

    def restart_host() -> None:
        if start_host is not None and wire.claim_spawn(common_dir, backoff=2.0):
            start_host()

    if not result.hosted_hooks:
        result.notes.append("no host serves this repository; hooks record in their own processes (slower).")
    # The session's note: how it is confined, and what 'sandbox resume --continue' relaunches (the
    # same agent and flags: sandbox.recovery.continue_), in one event, recorded beside the agent's
    # start rather than before it: the ledger's fsync is not the agent's wait.
    noted: dict[str, Any] = {"agent_command": list(argv), "subdir": subdir}
    if isolation is not None:
        noted = {"isolation": isolation.describe(), "session": "sandbox run", **noted}
    noted_isolation = threading.Thread(target=run.note, args=(noted,), name="sandbox-note", daemon=True)
    noted_isolation.start()
    changes = started.changes
    cutter = Cutter(run, changes, debounce, restart_host if start_host is not None else None, window=started.window)
    cutter.start()
    recorder = None
    if started.proxy is not None:
        from sandbox.agent import netrecord

        recorder = netrecord.recorder(run, started.token)
        started.refusals.attach(recorder)
    try:
        result.returncode = _supervise(started, grace, result)
    finally:
        started.release()
        result.network_refused = started.stop_proxy()
        if recorder is not None:
            recorder.finish()
        noted_isolation.join(timeout=30)
        # An agent may take Ctrl-C as "stop this answer" and go on (Claude Code does): only a
        # session that ended on it, or whose agent died of SIGINT, was interrupted.
        last_sigint = started.sigints
        ended = started.ended_at or time.monotonic()  # seen ended while the run was opened, or now
        ended_on_it = bool(last_sigint) and ended - last_sigint[0] <= INTERRUPT_WINDOW
        if ended_on_it:
            result.interrupted = (
                f"interrupted: the session was stopped with Ctrl-C and the agent exited {result.returncode}"
            )
        elif result.returncode == INTERRUPTED_EXIT:
            result.interrupted = f"interrupted: the agent exited {INTERRUPTED_EXIT} (SIGINT, Ctrl-C)"
        cutter.stop()
        settle_session(run, result, changes)  # before the final cut: a call's files are the call's
        cutter.cut_now(final=True, interrupted=result.interrupted)
        _record_end(run, result)
    result.cuts = cutter.cuts
    result.notes.extend(f"a cut failed: {e}" for e in cutter.errors)
    result.unfinished = [e.call_id for e in run.entries() if e.status == CallStatus.started]
    return result


def settle_session(run: Run, result: SessionResult, changes: RunChanges | None = None) -> list[str]:
    """End the calls of this session that the agent left started, on the evidence; their ids.

    The agent session ended without their results. A call that changed files meanwhile, or was
    open when Ctrl-C ended the session (Claude Code reads Ctrl-C as a key and may exit 0), or
    whose processes were left running, ran and was stopped: ``interrupted``, with the files the
    watcher saw during it. Otherwise, when the agent exited normally, it never ran (``not_run``).
    An agent killed by a signal (not Ctrl-C) leaves them started, for ``sandbox resume`` to report.
    Only calls bound to this session (see :class:`~sandbox.models.FoldData` ``sessions``) are touched.
    """
    from sandbox.agent.settle import settle_call

    if result.scope is None:
        return []
    token = result.scope.token
    state = run.state()
    mine = [
        e
        for e in (state.calls[c] for c in state.order)
        if e.status == CallStatus.started and e.agent_session and state.data.sessions.get(e.agent_session) == token
    ]
    code = result.returncode
    if not result.interrupted and not 0 <= code < 128:
        return []  # the agent was killed under its calls: no word from it either way; resume reports them
    ran = None
    if result.interrupted:
        ran = result.interrupted.removeprefix("interrupted: ")
    elif result.stopped:
        ran = f"the agent's session ended while it ran, leaving {len(result.stopped)} process(es) running"
    never = f"The agent's session ended (exit {code}) before the call ran."
    ended = []
    for entry in mine:
        seen: set[str] | None = None
        if changes is not None:
            with contextlib.suppress(Exception):  # the host's window is help only: a scan is always correct
                seen = changes.end(entry.call_id)
        try:
            done = settle_call(run, entry, None if seen is None else sorted(seen), ran=ran, never=never)
        except Exception as exc:  # evidence, never a reason to fail the session; resume reports the call
            result.notes.append(f"call {entry.call_id} could not be settled: {type(exc).__name__}: {exc}")
            continue
        if done is not None:
            ended.append(entry.call_id)
    return ended


def ensure_host(common_dir: str, start_host: Callable[[], None] | None, timeout: float = 30.0) -> bool:
    """True once the repository's host answers, starting it with ``start_host()`` when none lives."""
    return early.ensure_host(common_dir, start_host, timeout)


def _record_end(run: Run, result: SessionResult) -> None:
    """A ``note`` event saying how the agent ended: interrupted, and which of its processes were stopped."""
    if not result.stopped and not result.interrupted:
        return
    data = {
        "agent_session": result.scope.model_dump(mode="json") if result.scope else None,
        "agent_exit": result.returncode,
        "stopped_processes": result.stopped,
        "interrupted": result.interrupted,
    }
    reason = f"the agent exited ({result.returncode})"
    if result.interrupted:
        reason = result.interrupted
    if result.stopped:
        reason += f"; {len(result.stopped)} process(es) it left running were stopped"
    with contextlib.suppress(Exception):  # the record is evidence, never a reason to fail the session
        run.record(EventKind.note, reason=reason, data=data, epoch=run.state().epoch)


def _supervise(started: early.Started, grace: float, result: SessionResult) -> int:
    """Wait for the agent; what it left running is stopped and reported in ``result``; its exit code."""
    import json

    if started.confined or started.report is None:
        # The sandbox owns the process tree already: the agent is its PID namespace's first process, so
        # whatever it leaves running is killed with it, and ``--die-with-parent`` kills the whole sandbox
        # if this process dies. The supervisor would have to run outside (it writes its report in the
        # run's directory) and cannot see into the namespace. ``started.proc`` is a ``Confined``: its
        # ``send_signal`` reaches the agent itself (bubblewrap has the signals blocked).
        if started.proc is None:
            return started.wait()  # 127/126: the agent's program could not be started
        code = started.wait()
        _stop_survivors(result, grace)  # none expected: the namespace died with the agent
        return code
    code = started.wait()
    report = started.report
    try:
        with open(report, encoding="utf-8") as fh:
            data = json.load(fh)
        os.unlink(report)
        result.stopped = [p for p in data.get("stopped", []) if isinstance(p, dict)]
        if not data.get("subreaper", True):
            result.notes.append("this system has no child subreaper; the agent's processes were found by its token.")
    except (OSError, ValueError):
        result.notes.append("the agent's supervisor ended without its report; its processes were found by token.")
    # Belt and braces: a supervisor that was itself killed leaves the tree to init; the token finds it.
    _stop_survivors(result, grace)
    if code < 0:
        return 128 - code
    return code


def _stop_survivors(result: SessionResult, grace: float) -> None:
    """Stop the processes still carrying the session's token, and say so in ``result``."""
    assert result.scope is not None
    survivors = procs.find(result.scope.token)
    # The sandbox's own bubblewrap (its PID namespace's init may outlive the agent by a moment) is
    # not the agent's leftover: it goes by itself, or is stopped here without being reported.
    own = [p for p in survivors if procs.sandbox_own(p.pid)]
    left = [p for p in survivors if p not in own]
    deadline = time.monotonic() + 1.0
    while own and time.monotonic() < deadline:
        time.sleep(0.02)
        own = [p for p in own if procs.alive(p)]
    if own:
        procs.stop(own, grace)
    left = [p for p in left if procs.alive(p)]  # what lived in the sandbox died with its init
    if left:
        result.stopped += [{"pid": p.pid, "cmd": p.cmd, "how": how} for p, how in procs.stop(left, grace)]
