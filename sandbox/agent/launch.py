"""Running a real coding agent in a run's worktree: the library side of ``sandbox run``.

For the whole session this process hosts:

* the run's host (:class:`sandbox.agent.service.RunHost`, the same as ``sandbox serve``'s): a
  :class:`~sandbox.agent.watcher.Watcher` on the worktree, so every recorded call costs O(changed paths),
  and the hook socket in the run's directory on which ``sandbox hook <agent>`` processes hand
  over their events (see :mod:`sandbox.agent.hookproto`), so a hook never pays for importing pygit2
  and pydantic; a command's changes come from a watcher window. A ``sandbox serve`` hosting the
  run is stopped first, and its host lock held for the session;
* the cutter: at quiet points (no file event for ``debounce`` seconds, no call in flight) changes
  that no hook recorded become one ``agent_session`` call. With no hooks that is the only record;
  with hooks it catches what happened outside tool calls.

The agent runs with its working directory in the worktree; its ``git`` uses the run's own git
directory (see :mod:`sandbox.store.worktree`), so its branches, stash, config and hooks stay in the run.
Its exit code is passed through.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox.agent import procs
from sandbox.models import CallStatus, EventKind, ProcessScope
from sandbox.run.run import Run

if TYPE_CHECKING:
    from sandbox.agent.confine import Isolation

#: Starts the agent: (argv, cwd, env) -> a process with ``wait()`` and ``send_signal()``.
Launcher = Callable[[list[str], str, dict[str, str]], Any]

SESSION_TOOL = "agent_session"
GITHOOKS_DIR = "githooks"
#: Seconds the agent's leftover processes get between SIGTERM and SIGKILL when it ends.
STOP_GRACE = 3.0
#: The supervisor's program: its first argument is the directory the sandbox package is imported from.
_REAPER_MAIN = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from sandbox.agent.reaper import main; sys.exit(main(sys.argv[1:]))"
)

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
    env = dict(base)
    if hooks_dir is not None:
        try:
            n = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
        except ValueError:
            n = 0
        env[f"GIT_CONFIG_KEY_{n}"] = "core.hooksPath"
        env[f"GIT_CONFIG_VALUE_{n}"] = hooks_dir
        env["GIT_CONFIG_COUNT"] = str(n + 1)
    env["SANDBOX_RUN"] = run.run_id
    if session:
        env[procs.ENV_VAR] = session
    else:
        env.pop(procs.ENV_VAR, None)  # an outer session's token must not mark this one's processes
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"):
        env.pop(key, None)
    return env


# -- cutting changes into agent_session calls ----------------------------------------------------


def cut(run: Run, candidates: set[str] | None, reason: str = "quiet point") -> str | None:
    """Record the worktree's unrecorded changes among ``candidates`` (None: scan) as one call.

    Nothing is recorded when a call is in flight (its own finish will capture its changes) or
    when nothing differs from the run's head. Returns the new call's id.
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

            candidates = scan.candidates(run.repo, run.worktree, head_tree)
        if not candidates:
            return None
        cap = capture(run.repo, run.worktree, head_tree, candidates, run.is_ignored, run.is_private)
        if not cap.changes:
            return None
        changed = sorted(cap.changes)
        call_id = run.start_call(
            SESSION_TOOL,
            {"reason": reason, "paths": changed[:200], "count": len(changed)},
            idempotency="conditional",
            replay="ask",
            summary=f"{len(changed)} path(s) changed by the agent outside recorded tool calls",
        )
        run.finish_call(call_id, CallStatus.succeeded, paths=changed)
        return call_id


class Cutter:
    """Cuts changes into ``agent_session`` calls at quiet points, in a background thread."""

    def __init__(self, run: Run, watcher: Any, lock: threading.Lock, debounce: float) -> None:
        self.run = run
        self.watcher = watcher
        self.lock = lock
        self.debounce = debounce
        self.cuts: list[str] = []
        self.errors: list[str] = []
        self._token = watcher.open_window() if watcher is not None else None
        self._seen_event = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-cutter", daemon=True)

    def start(self) -> None:
        """Start cutting."""
        self._thread.start()

    def stop(self) -> None:
        """Stop cutting (the caller makes the final cut)."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        tick = min(0.25, self.debounce / 4)
        while not self._stop.wait(tick):
            last = self.watcher.last_event if self.watcher is not None else 0.0
            if last <= self._seen_event or time.monotonic() - last < self.debounce:
                continue
            self._seen_event = last
            self.cut_now()

    def cut_now(self, final: bool = False) -> None:
        """Cut now: with the watcher's paths when it vouches, else (or when ``final``) a scan."""
        with self.lock:
            if any(e.status == CallStatus.started for e in self.run.state().calls.values()):
                return  # its finish captures its changes; the window keeps collecting meanwhile
            paths: set[str] | None = None
            if self.watcher is not None and self._token is not None:
                paths = self.watcher.close_window(self._token)
                self._token = self.watcher.open_window()
            try:
                made = cut(self.run, None if final else paths, "session end" if final else "quiet point")
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
) -> SessionResult:
    """Run the agent ``argv`` in the run's worktree until it exits; see the module docstring.

    The agent runs below a supervisor (:mod:`sandbox.agent.reaper`) that owns its whole process tree:
    when the agent ends, however it ends, what it left running is stopped (SIGTERM, SIGKILL after
    ``grace`` s), and a ``note`` event in the ledger lists those processes. Every call started in
    the session records the session's :class:`~sandbox.models.ProcessScope`, so ``sandbox resume``
    can find survivors later (say, when ``sandbox run`` itself was killed).

    SIGINT, SIGTERM and SIGHUP are passed to the agent (SIGINT only when it did not already get it
    from the terminal: ``is_foreground()`` says whether this process group owns the terminal).
    ``isolation``: how the agent is confined (:mod:`sandbox.agent.confine`), recorded as a ``note``
    event; confined, its hooks can only record through this session's host, so the session
    refuses to start when another process hosts the run.
    The run is left in place. Must be called from the main thread (signal handlers).
    """
    import secrets

    from sandbox.agent import service

    launch = _launcher(run, isolation)
    result = SessionResult(returncode=0, hosted_hooks=False)
    token = secrets.token_hex(16)
    result.scope = ProcessScope(token=token, boot_id=_boot_id())
    # A `sandbox serve` started by a hook before this session would keep the socket and the
    # watcher: stop it and host the run here, holding its host lock so no hook spawns another.
    claim = service.take_over(run.dir)
    host = service.RunHost(run)
    try:
        host.start()
        host.hooks.recorder.scope = result.scope
        result.hosted_hooks = host.hosted_hooks
        result.notes.extend(host.notes)
        if launch is not None and not host.hosted_hooks:
            from sandbox.agent.confine import ConfinementError

            raise ConfinementError(
                f"Another process hosts run {run.run_id}'s hooks (a 'sandbox run' of it is live); a confined agent "
                "could only record through this session, so it was not started. End the other session first."
            )
        if isolation is not None:
            run.note({"isolation": isolation.describe(), "session": "sandbox run"})
        cutter = Cutter(run, host.watcher, host.lock, debounce)
        cutter.start()
        # A run with its own git dir needs no guard: the agent's refs are the run's. Only a run made
        # before homes existed shares the user's refs (until 'sandbox gc' moves it).
        hooks_dir = install_ref_guard(run) if run.place.legacy else None
        cwd = (
            os.path.join(run.worktree, subdir)
            if subdir and os.path.isdir(os.path.join(run.worktree, subdir))
            else run.worktree
        )
        try:
            result.returncode = _supervise(
                run,
                list(argv),
                cwd,
                agent_env(env, run, hooks_dir, token),
                on_signal,
                is_foreground,
                grace,
                result,
                launch,
            )
        finally:
            cutter.stop()
            host.stop_hooks()
            cutter.cut_now(final=True)
            _record_end(run, result)
    finally:
        host.stop()
        if claim is not None:
            claim.release()
    result.cuts = cutter.cuts
    result.notes.extend(f"a cut failed: {e}" for e in cutter.errors)
    result.unfinished = [e.call_id for e in run.entries() if e.status == CallStatus.started]
    return result


def _launcher(run: Run, isolation: Isolation | None) -> Launcher | None:
    """How the agent process is started when confined (None: a plain ``subprocess.Popen``)."""
    if isolation is None or not isolation.enabled:
        return None
    from sandbox.agent import confine

    confine.check(isolation)
    policy = confine.policy_for(
        isolation,
        common_dir=run.project.common_dir,
        run_id=run.run_id,
        worktree=run.worktree,
        user_workdir=run.info.user_workdir,
    )
    return lambda argv, cwd, env: confine.spawn(isolation, policy, argv, cwd, env=env)


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _record_end(run: Run, result: SessionResult) -> None:
    """A ``note`` event saying how the agent ended and which of its processes were stopped."""
    if not result.stopped:
        return
    data = {
        "agent_session": result.scope.model_dump(mode="json") if result.scope else None,
        "agent_exit": result.returncode,
        "stopped_processes": result.stopped,
    }
    reason = f"the agent exited ({result.returncode}); {len(result.stopped)} process(es) it left running were stopped"
    with contextlib.suppress(Exception):  # the record is evidence, never a reason to fail the session
        run.record(EventKind.note, reason=reason, data=data, epoch=run.state().epoch)


def _supervise(
    run: Run,
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    on_signal: Callable[[int], None] | None,
    is_foreground: Callable[[], bool] | None,
    grace: float,
    result: SessionResult,
    launch: Launcher | None = None,
) -> int:
    import json
    import sys

    if launch is not None:
        return _supervise_confined(argv, cwd, env, on_signal, is_foreground, launch, result, grace)
    report = os.path.join(run.dir, f"{procs.SESSION_REPORT_PREFIX}{os.getpid()}.json")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(report)
    # -I: neither the agent's working directory (the worktree) nor PYTHON* variables may shadow the
    # sandbox package; the supervisor imports it from where this process did.
    import sandbox

    root = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    supervisor = [sys.executable, "-I", "-c", _REAPER_MAIN, root, "--parent", str(os.getpid())]
    supervisor += ["--report", report, "--grace", str(grace), "--", *argv]
    proc = subprocess.Popen(supervisor, cwd=cwd, env=env)
    assert result.scope is not None
    result.scope.supervisor_pid = proc.pid
    result.scope.supervisor_start = procs.start_time(proc.pid)

    code = _wait_forwarding(proc, on_signal, is_foreground)
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


def _supervise_confined(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    on_signal: Callable[[int], None] | None,
    is_foreground: Callable[[], bool] | None,
    launch: Launcher,
    result: SessionResult,
    grace: float,
) -> int:
    """The agent in its sandbox (:mod:`sandbox.agent.confine`), without the supervisor.

    The sandbox owns the process tree already: the agent is its PID namespace's first process, so
    whatever it leaves running is killed with it, and ``--die-with-parent`` kills the whole sandbox
    if this process dies. The supervisor would have to run outside (it writes its report in the
    run's directory) and cannot see into the namespace. ``proc`` is a ``Confined``: its
    ``send_signal`` reaches the agent itself (bubblewrap has the signals blocked).
    """
    try:
        proc: Any = launch(argv, cwd, env)
    except FileNotFoundError:
        return 127
    except PermissionError:
        return 126

    code = _wait_forwarding(proc, on_signal, is_foreground)
    _stop_survivors(result, grace)  # none expected: the namespace died with the agent
    return code


def _wait_forwarding(
    proc: Any, on_signal: Callable[[int], None] | None, is_foreground: Callable[[], bool] | None
) -> int:
    """Wait for ``proc``, passing on SIGINT/SIGTERM/SIGHUP (Ctrl-C only when the agent is not in the
    terminal's foreground group, which got it already); the previous handlers come back after."""

    def forward(signum: int, _frame: Any) -> None:
        if on_signal is not None:
            on_signal(signum)
        if signum == signal.SIGINT and is_foreground is not None and is_foreground():
            return  # the terminal sent Ctrl-C to the whole foreground group, the agent included
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, forward) for s in signums}
    try:
        code: int = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


def _stop_survivors(result: SessionResult, grace: float) -> None:
    """Stop the processes still carrying the session's token, and say so in ``result``."""
    assert result.scope is not None
    survivors = procs.find(result.scope.token)
    if survivors:
        result.stopped += [{"pid": p.pid, "cmd": p.cmd, "how": how} for p, how in procs.stop(survivors, grace)]
