"""What OS confinement (bubblewrap) adds to ``sandbox exec`` and to the start of ``sandbox run``.

Side by side, alternating within each repetition, on one run of the generated repository:

- ``sandbox exec RUN -- true`` with ``--isolate on`` (the default: bubblewrap, no network) and
  ``--isolate off``, first without a host (the command recorded in the exec process, a scan),
  then with the run's ``sandbox serve`` up (the fast path, where the fixed costs show most);
- ``sandbox run RUN --hooks none -- true`` with ``--isolate on`` (network on, its default) and
  ``off``: the whole process, so the difference is what confinement adds to starting (and ending)
  an agent session;
- floors: ``bwrap`` with the same policy running ``true``, against ``true`` alone.

Targets (issue #11): confinement adds <= 15 ms to a ``sandbox exec`` and <= 50 ms to the start of
``sandbox run`` (medians of the paired differences' sides).
"""

from __future__ import annotations

import os
import shutil

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "confine"
G_EXEC = "sandbox exec -- true"
G_EXEC_HOSTED = "sandbox exec -- true, the run's service up"
G_RUN = "sandbox run -- true (whole session)"
G_FLOOR = "floor: the command alone"
ON = "isolate on"
OFF = "isolate off"


def run(ctx: Context, repo: Repo) -> None:
    """Measure exec and run with confinement on and off, interleaved."""
    from sandbox.project import Project
    from sandbox.run import Run

    res = ctx.results
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        res.skip(CASE, repo.size, "bubblewrap is not installed")
        return
    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    rid = run_.run_id
    env = {"SANDBOX_HOOK_AUTOSTART": "0"}

    def exec_(flag: str, group: str) -> None:
        p = run_proc([SANDBOX, "-C", repo.path, "exec", rid, "--isolate", flag, "--", "true"], env=env)
        res.add(CASE, repo.size, group, f"{ON if flag == 'on' else OFF}", p.seconds)

    def session(flag: str) -> None:
        argv = [SANDBOX, "-C", repo.path, "run", rid, "--hooks", "none", "--isolate", flag, "--", "true"]
        p = run_proc(argv, env=env)
        res.add(CASE, repo.size, G_RUN, f"{ON if flag == 'on' else OFF}", p.seconds)

    def floor(confined: bool) -> None:
        from sandbox import confine

        iso = confine.Isolation(enabled=True, network=False, program=bwrap)
        policy = confine.policy_for(
            iso, common_dir=project.common_dir, run_id=rid, worktree=run_.worktree, user_workdir=workdir
        )
        argv = confine.bwrap_argv(bwrap, policy, ["true"], run_.worktree) if confined else ["true"]
        p = run_proc(argv, cwd=run_.worktree)
        res.add(CASE, repo.size, G_FLOOR, "bwrap (same policy) -- true" if confined else "true", p.seconds)

    res.row(CASE, repo.size, G_EXEC, OFF, ref=True)
    res.row(CASE, repo.size, G_RUN, OFF, ref=True)
    res.row(CASE, repo.size, G_FLOOR, "true", ref=True)
    n = 11 if repo.size < 100_000 else 7
    try:
        variants = [
            lambda: exec_("on", G_EXEC),
            lambda: exec_("off", G_EXEC),
            lambda: session("on"),
            lambda: session("off"),
            lambda: floor(True),
            lambda: floor(False),
        ]
        for i in ctx.rounds(n, budget=60):
            for fn in rotate(variants, i):
                settle()
                fn()  # type: ignore[operator]
        if _serve(repo.path, rid, run_.dir):
            res.row(CASE, repo.size, G_EXEC_HOSTED, OFF, ref=True)
            for i in ctx.rounds(n, budget=20):
                for flag in rotate(["on", "off"], i):
                    settle()
                    exec_(str(flag), G_EXEC_HOSTED)
        else:
            res.skip(CASE, repo.size, "sandbox exec with the run's service: `sandbox serve` did not answer")
    finally:
        from sandbox import service

        service.stop_service(run_.dir)
        run_.drop(force=True)


def _serve(path: str, run_id: str, run_dir: str) -> bool:
    import time

    from sandbox import hookproto

    run_proc([SANDBOX, "-C", path, "serve", run_id])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(hookproto.socket_path(run_dir)):
            return True
        time.sleep(0.05)
    return False


def _delta(results: Results, size: int, group: str) -> float | None:
    on = results.find(CASE, size, group, ON)
    off = results.find(CASE, size, group, OFF)
    if on is None or off is None:
        return None
    return on.stats.median - off.stats.median


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Confinement adds <= 15 ms to `sandbox exec`, <= 50 ms to `sandbox run` (medians, largest size)."""
    size = max(sizes)
    out = []
    for group, goal, limit in (
        (G_EXEC, "+<= 15 ms median", 0.015),
        (G_EXEC_HOSTED, "+<= 15 ms median", 0.015),
        (G_RUN, "+<= 50 ms median", 0.050),
    ):
        name = f"confinement cost: {group}, at {size // 1000}k"
        delta = _delta(results, size, group)
        if delta is None:
            out.append(Target(name, goal, "-", None))
        else:
            out.append(Target(name, goal, f"{delta * 1e3:+.0f} ms", delta <= limit))
    return out
