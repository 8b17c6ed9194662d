"""Start-up of an interactive agent: ``sandbox run RUN -- claude`` to its first screen, against ``claude``
started directly in the run's worktree (issue #26: at most +150 ms).

Each sample starts the command in a fresh tmux server (160x45) and polls the pane every 10 ms until
Claude Code's input box is up (its status line: "shift+tab to cycle"); the time is from starting
tmux to that screen. The pane is then killed (SIGHUP, as when a terminal closes) and the next sample
waits until every process of the last one is gone. Both variants read the same user ``HOME``, in
which the worktree is trusted and the API key approved, so neither stops at a dialog; the variants
alternate within each round, and the paired difference is a row of its own. A fourth variant sets
``GIT_DIR``, which turns ``sandbox run``'s fast path off (the run opened before the agent starts, as
before the fast path): the two differences side by side show what the fast path gains. The model server is
the scripted one of the tests (``tests/agents/anthropic_server.py``) on 127.0.0.1. Measured once,
on the smallest repository: start-up does not depend on its size. Needs ``make agents`` and tmux.

A first screen on a loaded machine says more about the load than about ``sandbox run``, so a second
group counts only what ``sandbox run`` does before its agent starts: the process is SIGKILLed at the
fault point ``run.agent_spawned`` (right after the spawn) and its CPU time (user + system, from
``wait4``) and wall time are read, fast path and full path (``GIT_DIR`` set) alternating.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.cases import Context, rotate
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX

CASE = "firstscreen"
GROUP = "claude, start to first screen"
ALONE = "claude in the worktree (reference)"
CONFINED = "sandbox run RUN -- claude (confined)"
OPEN = "sandbox run RUN --isolate off -- claude"
#: The run opened (pygit2, pydantic) before the agent is spawned, as before the fast path: GIT_DIR set
#: turns the fast path off (``env`` costs a millisecond).
FULL = "sandbox run RUN -- claude (confined, full path: GIT_DIR set)"
DELTA = "paired difference, sandbox run (confined) - claude alone"
DELTA_FULL = "paired difference, sandbox run (confined, full path) - claude alone"
READY = ("shift+tab to cycle", "? for shortcuts")
SPAWN_GROUP = "sandbox run RUN -- claude, start to the agent's spawn"
SPAWN_CPU_GROUP = "sandbox run RUN -- claude, CPU (user+sys) until the agent's spawn"
FAST_SPAWN = "fast path (the run opened after the spawn)"
FULL_SPAWN = "full path (GIT_DIR set: the run opened before the spawn)"
ROOT = Path(__file__).resolve().parent.parent.parent
CLAUDE = ROOT / "tests" / "agents" / "node_modules" / ".bin" / "claude"
KEY = "sk-ant-bench-0000"
_done: set[str] = set()


def _first_screen(argv: list[str], cwd: str, env: dict[str, str], sock: str, timeout: float = 30.0) -> float:
    """Seconds from starting ``argv`` in a new tmux server to the agent's input box; the pane is killed after."""
    tmux = ["tmux", "-S", sock]
    command = " ".join(_quote(a) for a in argv)
    t0 = time.perf_counter()
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "45", "-c", cwd, command],
                   env=env, check=True, timeout=30)  # fmt: skip
    pid = subprocess.run([*tmux, "display", "-p", "#{pane_pid}"], env=env, capture_output=True, text=True,
                         timeout=30).stdout.strip()  # fmt: skip
    seconds = None
    while time.perf_counter() - t0 < timeout:
        screen = subprocess.run([*tmux, "capture-pane", "-p"], env=env, capture_output=True, text=True,
                                timeout=30).stdout  # fmt: skip
        if any(marker in screen for marker in READY):
            seconds = time.perf_counter() - t0
            break
        time.sleep(0.01)
    subprocess.run([*tmux, "kill-server"], env=env, capture_output=True, timeout=30, check=False)
    deadline = time.monotonic() + 30
    while pid.isdigit() and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the last sample's host requests and exits settle
    if seconds is None:
        raise RuntimeError(f"{argv[0]}: no first screen within {timeout} s; last screen:\n{screen}")
    return seconds


def _until_spawn(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``argv`` (a ``sandbox run``) until it spawned its agent: it is killed there."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env={**env, "SANDBOX_FAULT": "run.agent_spawned"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"{argv}: ended with {proc.returncode} before its fault point run.agent_spawned")
    time.sleep(0.3)  # the killed session's sandbox goes down with it (--die-with-parent)
    return wall, usage.ru_utime + usage.ru_stime


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def run(ctx: Context, repo: Repo) -> None:
    """Measure both variants, alternating, once per benchmark run."""
    if CASE in _done:
        return
    _done.add(CASE)
    res = ctx.results
    if not os.access(CLAUDE, os.X_OK) or shutil.which("tmux") is None:
        res.skip(CASE, None, "the real claude binary (make agents) or tmux is missing")
        return
    sys.path.insert(0, str(ROOT))
    from sandbox.run.run import Run
    from sandbox.store.project import Project
    from tests.agents.anthropic_server import ModelServer

    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    home = Path(repo.scratch) / "firstscreen-home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    trusted = {os.path.realpath(run_.worktree): {"hasTrustDialogAccepted": True}}
    claude_json = {"hasCompletedOnboarding": True, "customApiKeyResponses": {"approved": [KEY]}, "projects": trusted}
    (home / ".claude.json").write_text(json.dumps(claude_json))
    sock = str(Path(repo.scratch) / "firstscreen.sock")
    with ModelServer([]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "CLAUDE"))}
        env.update({"HOME": str(home), "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                    "DISABLE_AUTOUPDATER": "1", "SANDBOX_HOOK_AUTOSTART": "0", "TERM": "xterm-256color"})  # fmt: skip
        variants = {
            ALONE: ([str(CLAUDE)], run_.worktree),
            CONFINED: ([SANDBOX, "run", run_.run_id, "--", str(CLAUDE)], repo.path),
            OPEN: ([SANDBOX, "run", run_.run_id, "--isolate", "off", "--", str(CLAUDE)], repo.path),
            FULL: (
                ["env", f"GIT_DIR={repo.path}/.git", f"GIT_WORK_TREE={repo.path}", SANDBOX, "run", run_.run_id]
                + ["--", str(CLAUDE)],
                repo.path,
            ),
        }
        res.row(CASE, None, GROUP, ALONE, ref=True)
        _first_screen(*variants[CONFINED], env, sock)  # warm-up: the run's agent home and the page cache
        _first_screen(*variants[ALONE], env, sock)
        for i in ctx.rounds(9, budget=120, minimum=5):
            got = {}
            for name in rotate(list(variants), i):
                argv, cwd = variants[str(name)]
                got[name] = _first_screen(argv, cwd, env, sock)
                res.add(CASE, None, GROUP, str(name), got[name], ref=name == ALONE)
            res.add(CASE, None, GROUP, DELTA, got[CONFINED] - got[ALONE])
            res.add(CASE, None, GROUP, DELTA_FULL, got[FULL] - got[ALONE])
        spawn_variants = {FAST_SPAWN: variants[CONFINED][0], FULL_SPAWN: variants[FULL][0]}
        res.row(CASE, None, SPAWN_GROUP, FULL_SPAWN, ref=True)
        res.row(CASE, None, SPAWN_CPU_GROUP, FULL_SPAWN, ref=True)
        for i in ctx.rounds(15, budget=60, minimum=7):
            for name in rotate(list(spawn_variants), i):
                wall, cpu = _until_spawn(spawn_variants[str(name)], repo.path, env)
                res.add(CASE, None, SPAWN_GROUP, str(name), wall, ref=name == FULL_SPAWN)
                res.add(CASE, None, SPAWN_CPU_GROUP, str(name), cpu, ref=name == FULL_SPAWN)
    Run.open(Project(project.common_dir), run_.run_id).drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """``sandbox run`` adds at most 150 ms before the agent's first screen (median of the paired differences)."""
    name = "`sandbox run -- claude` first screen vs `claude` alone"
    row = results.find(CASE, None, GROUP, DELTA)
    if row is None:
        return [Target(name, "+<= 150 ms median", "-", None)]
    delta = row.stats.median
    return [Target(name, "+<= 150 ms median", f"{delta * 1e3:+.0f} ms", delta <= 0.150)]
