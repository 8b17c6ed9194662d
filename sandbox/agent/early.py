"""Starting a ``sandbox run`` session's agent before the run is opened (issue #26: start-up).

Opening a :class:`~sandbox.run.run.Run` imports pygit2 and the pydantic models, most of the time
``sandbox run`` spends before the agent can draw its first screen. Everything the agent needs to
start is standard library here: where the run lives (:class:`Where`, from
:func:`sandbox.store.layout.place_of` or a run already open), the repository's host (the session
refuses to start a confined agent without one), the host's first change window, the network
allowlist proxy, the sandbox (:mod:`sandbox.confine.spawn`) or the supervisor
(:mod:`sandbox.agent.reaper`), and the signal handlers that pass SIGINT/SIGTERM/SIGHUP on.
:func:`start` does all of that and returns a :class:`Started`;
:func:`sandbox.agent.launch.run_session` then opens the run's records (the session's note, the
cutter, the refusals the proxy saw meanwhile, the exit summary) while the agent starts in parallel.

Nothing the ledger holds is written here, and this module imports neither pygit2 nor pydantic
(``tests/test_startup.py`` holds ``sandbox run`` to it up to the agent's start).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox import faults
from sandbox.agent import procs, wire

if TYPE_CHECKING:
    from sandbox.confine.proxy import NetProxy, Refusal
    from sandbox.confine.spawn import Isolation, Policy

#: The supervisor's program: its first argument is the directory the sandbox package is imported from.
REAPER_MAIN = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from sandbox.agent.reaper import main; sys.exit(main(sys.argv[1:]))"
)
#: Reached right after the agent was spawned, before the run is opened: ``tests/test_startup.py``
#: arms it to read what ``sandbox run`` imported before the agent started (a SIGKILL here leaves
#: what any killed ``sandbox run`` leaves: its supervisor or sandbox takes the agent down with it).
SPAWNED_POINT = "run.agent_spawned"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


@dataclass(frozen=True)
class Where:
    """What the session needs to know of its run before the run is opened."""

    common_dir: str
    run_id: str
    run_dir: str
    worktree: str
    user_workdir: str | None
    legacy: bool


def agent_env(
    base: Mapping[str, str], run_id: str, hooks_dir: str | None = None, session: str | None = None
) -> dict[str, str]:
    """The agent's environment; see :func:`sandbox.agent.launch.agent_env`."""
    env = dict(base)
    if hooks_dir is not None:
        try:
            n = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
        except ValueError:
            n = 0
        env[f"GIT_CONFIG_KEY_{n}"] = "core.hooksPath"
        env[f"GIT_CONFIG_VALUE_{n}"] = hooks_dir
        env["GIT_CONFIG_COUNT"] = str(n + 1)
    env["SANDBOX_RUN"] = run_id
    if session:
        env[procs.ENV_VAR] = session
    else:
        env.pop(procs.ENV_VAR, None)  # an outer session's token must not mark this one's processes
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"):
        env.pop(key, None)
    return env


class DeferredRefusals:
    """The proxy's refusal callback: kept until the run is open, then handed to its recorder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list[Refusal] = []
        self._to: Callable[[Refusal], None] | None = None

    def __call__(self, refusal: Refusal) -> None:
        """A refusal the proxy saw: kept, or passed on once the run is open."""
        with self._lock:
            if self._to is None:
                self._kept.append(refusal)
                return
            to = self._to
        to(refusal)

    def attach(self, to: Callable[[Refusal], None]) -> None:
        """From now on refusals go to ``to``; those kept so far go first, in order."""
        while True:
            with self._lock:
                kept, self._kept = self._kept, []
                if not kept:
                    self._to = to
                    return
            for refusal in kept:
                to(refusal)


@dataclass
class Started:
    """A session whose agent is running (or could not be started: ``failed_code``)."""

    where: Where
    token: str
    boot_id: str | None
    hosted_hooks: bool
    #: The host's view of the run, and the cutter's first window, opened before the agent started.
    changes: wire.RunChanges | None
    window: str | None
    proxy: NetProxy | None
    refusals: DeferredRefusals
    #: The agent's process: a ``Confined`` (sandboxed) or the supervisor's ``Popen``.
    proc: Any = None
    confined: bool = False
    #: 127/126 when the confined agent's program was not found / not executable.
    failed_code: int | None = None
    #: The supervisor's report file (unconfined).
    report: str | None = None
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    #: monotonic() of the last SIGINT this process got during the session.
    sigints: list[float] = field(default_factory=list)
    #: monotonic() by which the agent was seen ended while the run was being opened (else None):
    #: whether a Ctrl-C ended the session is judged against it, not against when it was waited for.
    ended_at: float | None = None
    on_signal: Callable[[int], None] | None = None
    #: The handlers :func:`start` replaced, put back by :meth:`release`.
    previous: dict[int, Any] = field(default_factory=dict)
    #: Signals that came while the agent's process was being made, passed on once it exists.
    held: list[int] = field(default_factory=list)

    def wait(self) -> int:
        """Wait for the agent (the signal handlers stay until :meth:`release`); its raw exit code."""
        if self.proc is None:
            assert self.failed_code is not None
            return self.failed_code
        code: int = self.proc.wait()
        return code

    def look(self) -> None:
        """Note when the agent is first seen ended (its exit status is left for :meth:`wait`)."""
        if self.ended_at is not None or self.proc is None:
            return
        try:
            ended = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            ended = True
        if ended:
            self.ended_at = time.monotonic()

    def pass_held(self) -> None:
        """Pass on to the agent the signals :attr:`held` while its process was being made."""
        held, self.held = self.held, []
        for signum in held:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def release(self) -> None:
        """Put back the signal handlers that were there before :func:`start` (idempotent)."""
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def stop_proxy(self) -> int:
        """Stop the allowlist proxy; the connections it refused."""
        if self.proxy is None:
            return 0
        refused = int(getattr(self.proxy, "refused", 0))
        self.proxy.stop()
        return refused


def ensure_host(common_dir: str, start_host: Callable[[], None] | None, timeout: float = 30.0) -> bool:
    """True once the repository's host answers, starting it with ``start_host()`` when none lives."""
    client = wire.Client(common_dir)
    if client.ping() is not None:
        return True
    if start_host is None:
        return False
    spawned = False
    deadline = time.monotonic() + timeout
    while True:
        # A host that is stopping (SIGTERM, idle exit) still holds its lock for a moment: start
        # a new one as soon as it is gone, not only when none was there at first.
        if not spawned and not wire.host_alive(common_dir):
            wire.claim_spawn(common_dir, backoff=0.0)
            start_host()
            spawned = True
        if client.ping() is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def start(
    where: Where,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    subdir: str = "",
    isolation: Isolation | None = None,
    start_host: Callable[[], None] | None = None,
    on_signal: Callable[[int], None] | None = None,
    is_foreground: Callable[[], bool] | None = None,
    grace: float = 3.0,
    hooks_dir: str | None = None,
) -> Started:
    """Start the agent ``argv`` of run ``where`` (see the module docstring and ``run_session``).

    Raises :class:`~sandbox.confine.spawn.ConfinementError` before anything starts when a confined
    agent could have no host to record through. ``hooks_dir``: a legacy run's ref guard.
    """
    confined = isolation is not None and isolation.enabled
    policy = _policy(where, isolation) if confined and isolation is not None else None
    token = secrets.token_hex(16)
    wire.run_token(where.run_dir)  # before the agent starts: a confined hook can read it, never create it
    hosted = ensure_host(where.common_dir, start_host)
    if confined and not hosted:
        from sandbox.confine.spawn import ConfinementError

        raise ConfinementError(
            f"The repository's host could not be started, and a confined agent of run {where.run_id} can record "
            "only through it; nothing was started. See 'sandbox serve --foreground' for why."
        )
    changes = wire.run_ops(where.common_dir, where.run_id, where.run_dir) if hosted else None
    window = None
    if changes is not None:
        window = f"session-{secrets.token_hex(6)}"
        changes.begin(window)  # the agent's first changes are in the cutter's first window
    refusals = DeferredRefusals()
    proxy = None
    if policy is not None and isolation is not None and isolation.network_mode == "allow" and policy.proxy:
        from sandbox.confine.proxy import Allowlist, NetProxy

        # Only bound here: the proxy is served (its asyncio loop imported) once the agent started,
        # and a connection made before that waits in the socket's backlog.
        proxy = NetProxy(policy.proxy, Allowlist(isolation.allow or ()), refusals).listen()
    started = Started(where, token, procs.boot_id(), hosted, changes, window, proxy, refusals, confined=confined)
    started.on_signal = on_signal
    cwd = (
        os.path.join(where.worktree, subdir)
        if subdir and os.path.isdir(os.path.join(where.worktree, subdir))
        else where.worktree
    )
    full_env = agent_env(env, where.run_id, hooks_dir, token)
    # Before the agent starts: a Ctrl-C while it starts (it may print its prompt before the spawn returns)
    # is held and passed on as soon as it runs, never taken by this process's default handler.
    _forward_signals(started, is_foreground)
    try:
        if isolation is not None and policy is not None:
            _spawn_confined(started, isolation, policy, list(argv), cwd, full_env)
        else:
            _spawn_supervised(started, list(argv), cwd, full_env, grace)
    except BaseException:
        started.release()
        started.stop_proxy()
        raise
    if started.proc is None:
        started.release()  # nothing started (127/126): nothing to pass a signal to
    else:
        started.pass_held()
    faults.point(SPAWNED_POINT)
    if proxy is not None:
        try:
            proxy.serve()
        except BaseException:
            # The agent's network could not be served: stop it rather than leave it without one.
            _stop_agent(started)
            started.release()
            started.stop_proxy()
            raise
    return started


def _policy(where: Where, isolation: Isolation) -> Policy:
    """The run's confinement policy, checked (one line naming the fix) before anything starts."""
    from sandbox.confine import spawn
    from sandbox.confine.policy import policy_for

    spawn.check(isolation)
    return policy_for(
        isolation,
        common_dir=where.common_dir,
        run_id=where.run_id,
        worktree=where.worktree,
        user_workdir=where.user_workdir,
    )


def _spawn_confined(
    started: Started, isolation: Isolation, policy: Policy, argv: list[str], cwd: str, full_env: dict[str, str]
) -> None:
    """Start the agent in its sandbox; a missing or unrunnable command is its exit code (127, 126)."""
    from sandbox.confine import spawn

    try:
        # What the sandbox set for this agent (its run, session token, its home: CLAUDE_CONFIG_DIR,
        # GEMINI_CLI_HOME, ...) passes whatever the agent is called; what it inherited from you goes
        # through the allowlist (envfilter.DEFAULT_ENV_ALLOW and the agent's own names).
        inherited = os.environ
        own = {k: v for k, v in full_env.items() if inherited.get(k) != v}
        started.proc = spawn.spawn(isolation, policy, argv, cwd, env=full_env, own_env=own)
    except FileNotFoundError:
        started.failed_code = 127
    except PermissionError:
        started.failed_code = 126


#: The nice value of the thread that opens the run beside a starting agent (see :func:`yielding`).
YIELD_NICE = 10


def yielding(work: Callable[[], T], meanwhile: Callable[[], None] | None = None) -> T:
    """``work()`` in a thread of lower CPU priority (nice +:data:`YIELD_NICE`); its result or its exception.

    What ``sandbox run`` does once its agent is spawned (importing pygit2 and pydantic, opening the run)
    would otherwise take CPU from the agent while it draws its first screen (2 cores: measured as much
    as the early start saved). At a lower priority it runs on what the agent leaves idle and yields
    where they compete. Linux keeps the nice value per thread, so only this thread (and threads it
    starts) is lowered; elsewhere it runs at the caller's priority. The calling thread waits; the
    signal handlers of :func:`start` still run in it, and so does ``meanwhile()``, every 50 ms.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + YIELD_NICE)
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="sandbox-open-run", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.05)
        if meanwhile is not None:
            meanwhile()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def _stop_agent(started: Started) -> None:
    if started.proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        started.proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(Exception):
        started.proc.wait()


def _spawn_supervised(started: Started, argv: list[str], cwd: str, env: dict[str, str], grace: float) -> None:
    report = os.path.join(started.where.run_dir, f"{procs.SESSION_REPORT_PREFIX}{os.getpid()}.json")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(report)
    # -I: neither the agent's working directory (the worktree) nor PYTHON* variables may shadow the
    # sandbox package; the supervisor imports it from where this process did.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../sandbox (this is sandbox/agent/)
    root = os.path.dirname(package)
    supervisor = [sys.executable, "-I", "-c", REAPER_MAIN, root, "--parent", str(os.getpid())]
    supervisor += ["--report", report, "--grace", str(grace), "--", *argv]
    proc = subprocess.Popen(supervisor, cwd=cwd, env=env)
    started.proc = proc
    started.report = report
    started.supervisor_pid = proc.pid
    started.supervisor_start = procs.start_time(proc.pid)


def _forward_signals(started: Started, is_foreground: Callable[[], bool] | None) -> None:
    """Pass SIGINT/SIGTERM/SIGHUP on to the agent (Ctrl-C only when the agent is not in the
    terminal's foreground group, which got it already) until :meth:`Started.release`; one that comes
    before the agent's process exists is held in :attr:`Started.held` for :func:`start` to pass on."""

    def forward(signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT:
            started.sigints[:] = [time.monotonic()]
        if started.on_signal is not None:
            started.on_signal(signum)
        if signum == signal.SIGINT and is_foreground is not None and is_foreground():
            return  # the terminal sent Ctrl-C to the whole foreground group, the agent included
        proc = started.proc
        if proc is None:
            started.held.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    started.previous = {s: signal.signal(s, forward) for s in _FORWARDED}
