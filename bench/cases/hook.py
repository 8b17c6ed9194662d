"""Hook invocation latency: ``sandbox hook claude-code`` as a whole process, for a Write call.

The recorded PreToolUse and PostToolUse payloads of fixtures/claude-code/Write.json are fed to a
fresh hook process each (process start included), with the file written between them, in a run's
worktree on the generated repository:

- hosted: while ``sandbox run RUN --hooks none -- sleep`` runs (it starts the repository's host,
  and the hook hands its event to the host over its socket; the intended set-up);
- served: while the background ``sandbox serve`` hosts the repository (what a hook starts by itself
  when the user launched the agent without ``sandbox run``); same socket, same host code;
- standalone: no host and autostart off (``SANDBOX_HOOK_AUTOSTART=0``): the hook process records
  the event itself (what the first hook of a session costs).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from bench.cases import Context, module_available
from bench.genrepo import HERE, Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "hook"
FIXTURE = os.path.join(os.path.dirname(HERE), "fixtures", "claude-code", "Write.json")


def _payload(which: str, worktree: str, call_id: str) -> bytes:
    with open(FIXTURE, encoding="utf-8") as fh:
        doc = json.loads(fh.read().replace("__CWD__", worktree))
    payload = doc[which]
    payload["tool_use_id"] = call_id
    return json.dumps(payload).encode()


#: Without it a standalone hook would spawn ``sandbox serve`` and later ones would be served.
_ENV = {"SANDBOX_HOOK_AUTOSTART": "0"}


def _pairs(ctx: Context, repo: Repo, worktree: str, mode: str, n: int) -> None:
    target = os.path.join(worktree, "src", "greet.py")
    for i in ctx.rounds(n, budget=20, minimum=5):
        call_id = f"toolu_bench_{mode}_{time.time_ns()}_{i}"
        pre = _payload("pre", worktree, call_id)
        p = run_proc([SANDBOX, "hook", "claude-code"], cwd=worktree, env=_ENV, input=pre, rss=True)
        ctx.results.add(CASE, repo.size, mode, f"PreToolUse Write ({mode})", p.seconds, rss_kb=p.max_rss_kb)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(f"def greet(name):\n    return 'hello ' + name  # {mode} {i}\n")
        post = _payload("post", worktree, call_id)
        p = run_proc([SANDBOX, "hook", "claude-code"], cwd=worktree, env=_ENV, input=post, rss=True)
        ctx.results.add(CASE, repo.size, mode, f"PostToolUse Write ({mode})", p.seconds, rss_kb=p.max_rss_kb)


def run(ctx: Context, repo: Repo) -> None:
    """Hosted pairs, then served pairs, then standalone pairs."""
    res = ctx.results
    if not module_available("sandbox.cli.hook") or not os.path.exists(FIXTURE):
        res.skip(CASE, repo.size, "not available: sandbox/cli/hook.py or the Claude Code fixture is missing")
        return
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    n = 21 if repo.size < 100_000 else 11
    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    host = subprocess.Popen(
        [SANDBOX, "run", run_.run_id, "--hooks", "none", "--", "sleep", "3600"],
        cwd=repo.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        hosted = _wait_for_host(project.common_dir, host)
        if hosted:
            _pairs(ctx, repo, run_.worktree, "hosted", n)
        else:
            res.skip(CASE, repo.size, "hosted hooks: 'sandbox run' did not get a host within 120 s")
    finally:
        host.terminate()
        host.wait(timeout=60)
    from sandbox.agent.host import stop_host

    stop_host(project.common_dir)
    if module_available("sandbox.cli.serve"):
        served = run_proc([SANDBOX, "serve", run_.run_id], cwd=repo.path, check=False)
        try:
            if served.returncode == 0 and _wait_for_host(project.common_dir, None):
                _pairs(ctx, repo, run_.worktree, "served", n)
            else:
                res.skip(CASE, repo.size, "served hooks: 'sandbox serve' did not start")
        finally:
            stop_host(project.common_dir)
    _pairs(ctx, repo, run_.worktree, "standalone", n)


def _wait_for_host(common_dir: str, proc: subprocess.Popen[bytes] | None) -> bool:
    from sandbox.agent import wire

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        if wire.Client(common_dir).ping() is not None:
            return True
        time.sleep(0.05)
    return False


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Hook invocation <= 150 ms median as a whole process (at the largest size measured)."""
    size = 100_000 if 100_000 in sizes else max(sizes)
    out = []
    for mode in ("hosted", "served", "standalone"):
        for which in ("PreToolUse", "PostToolUse"):
            row = results.find(CASE, size, mode, f"{which} Write ({mode})")
            name = f"`sandbox hook claude-code` {which} Write, {mode}, at {size // 1000}k"
            if row is None:
                out.append(Target(name, "<= 150 ms median", "-", None))
            else:
                med = row.stats.median
                out.append(Target(name, "<= 150 ms median", f"{med * 1e3:.0f} ms", med <= 0.150))
    return out
