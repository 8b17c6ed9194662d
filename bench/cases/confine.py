"""What OS confinement (bubblewrap) adds to ``sandbox exec`` and to the start of ``sandbox run``.

Side by side, alternating within each repetition, on one run of the generated repository:

- ``sandbox exec RUN -- true`` with ``--isolate on`` (the default: bubblewrap, no network) and
  ``--isolate off``, first without a host (the command recorded in the exec process, a scan),
  then with the run's ``sandbox serve`` up (the fast path, where the fixed costs show most);
- ``sandbox run RUN --hooks none -- true`` with ``--isolate on`` (network on, its default) and
  ``off``: the whole process, so the difference is what confinement adds to starting (and ending)
  an agent session;
- floors: ``bwrap`` with the same policy running ``true``, against ``true`` alone;
- the system view (:mod:`sandbox.confine.sysview`, what root does not see of the system directories),
  in-process: the walk a cold cache pays, the re-validation a warm one pays at each start, and its
  floor (an ``lstat`` of every directory the cache names), with how many mounts it adds for this user;
- the home's allowlist (default deny: the home hidden but for its toolchains, :mod:`sandbox.confine.homeview`),
  in-process: the policy and bubblewrap's command line of one start for a home of 10 entries and one of 1,000
  (the same five toolchains, the rest other projects and dotfiles), with the mounts each gives: O(allowlist),
  never a walk of the home (issue #31).

Each pair runs back to back (order alternating) and its difference is a row of its own: on a
loaded machine whole processes vary by hundreds of milliseconds, more than what is measured.

With ``BENCH_BASELINE`` set to a directory holding another tree's ``sandbox`` package (``git archive
REV sandbox | tar -x -C DIR``), both exec groups measure a third variant in the same rounds: ``--isolate on``
run by that code, so a change's before and after are compared side by side on one load.

Targets (issue #11): confinement adds <= 15 ms to a ``sandbox exec`` and <= 50 ms to the start of
``sandbox run`` (medians of the paired differences).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

if TYPE_CHECKING:
    from sandbox.confine.policy import Isolation

CASE = "confine"
G_EXEC = "sandbox exec -- true"
G_EXEC_HOSTED = "sandbox exec -- true, the run's service up"
G_RUN = "sandbox run -- true (whole session)"
G_FLOOR = "floor: the command alone"
G_SYSVIEW = "system view: what a start pays to hide what others cannot read (in-process)"
G_HOME = "home allowlist: the policy and command line of a start (in-process)"
HOME_SMALL = "10 entries in the home"
HOME_BIG = "1,000 entries in the home"
#: The toolchains each measured home holds (sandbox.confine.homeview.TOOLCHAINS finds them).
HOME_TOOLCHAINS = (".cargo/bin", ".rustup", ".npm", ".local/bin", ".m2/repository")
ON = "isolate on"
OFF = "isolate off"
DELTA = "paired difference, on - off (same round)"
BASE = "isolate on, baseline code (BENCH_BASELINE)"
BASE_DELTA = "paired difference, baseline on - off (same round)"


def run(ctx: Context, repo: Repo) -> None:
    """Measure exec and run with confinement on and off, interleaved."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

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
    baseline = os.environ.get("BENCH_BASELINE")

    def exec_(flag: str) -> float:
        own = {**env, "PYTHONPATH": baseline} if flag == "base" and baseline else env
        argv = [SANDBOX, "-C", repo.path, "exec", rid, "--isolate", "off" if flag == "off" else "on", "--", "true"]
        return run_proc(argv, env=own).seconds

    def session(flag: str) -> float:
        argv = [SANDBOX, "-C", repo.path, "run", rid, "--hooks", "none", "--isolate", flag, "--", "true"]
        return run_proc(argv, env=env).seconds

    from sandbox.confine import spawn
    from sandbox.confine.bwrap import bwrap_argv
    from sandbox.confine.policy import policy_for

    iso = spawn.Isolation(enabled=True, network=False, program=bwrap)
    policy = policy_for(iso, common_dir=project.common_dir, run_id=rid, worktree=run_.worktree, user_workdir=workdir)
    confined_true = bwrap_argv(bwrap, policy, ["true"], run_.worktree)

    def floor(flag: str) -> float:
        return run_proc(confined_true if flag == "on" else ["true"], cwd=run_.worktree).seconds

    def pair(group: str, measure: Callable[[str], float], i: int) -> None:
        """Both variants back to back (order alternating), and their difference: load hits both alike."""
        got = {}
        with_base = baseline is not None and group in (G_EXEC, G_EXEC_HOSTED)
        for flag in rotate(["on", "off", "base"] if with_base else ["on", "off"], i):
            settle()
            got[flag] = measure(str(flag))
        res.add(CASE, repo.size, group, ON, got["on"])
        res.add(CASE, repo.size, group, OFF, got["off"])
        res.add(CASE, repo.size, group, DELTA, got["on"] - got["off"])
        if with_base:
            res.add(CASE, repo.size, group, BASE, got["base"])
            res.add(CASE, repo.size, group, BASE_DELTA, got["base"] - got["off"])

    _system_view(ctx, repo.size)
    _home_allowlist(ctx, repo.size, iso, project.common_dir, rid, run_.worktree, workdir)
    groups: list[tuple[str, Callable[[str], float]]] = [(G_EXEC, exec_), (G_RUN, session), (G_FLOOR, floor)]
    for group, _ in groups:
        res.row(CASE, repo.size, group, OFF, ref=True)
    n = 11 if repo.size < 100_000 else 7
    try:
        for i in ctx.rounds(n, budget=60):
            for group, measure in rotate(groups, i):  # type: ignore[misc]
                pair(group, measure, i)
        if _serve(repo.path, rid, run_.project.common_dir):
            res.row(CASE, repo.size, G_EXEC_HOSTED, OFF, ref=True)
            for i in ctx.rounds(n, budget=20):
                pair(G_EXEC_HOSTED, exec_, i)
        else:
            res.skip(CASE, repo.size, "sandbox exec with the run's service: `sandbox serve` did not answer")
    finally:
        from sandbox.agent.host import stop_host

        stop_host(run_.project.common_dir)
        run_.drop(force=True)


def _system_view(ctx: Context, size: int) -> None:
    """The system view's cost at a start: cold (walked and written), warm (read and re-validated), floor."""
    import tempfile
    import time

    from sandbox.confine import policy, sysview

    res = ctx.results
    skip = (*policy.SOCKET_DIRS, *policy.MOUNT_DIRS, *sysview.shared_scratch())
    cache = os.path.join(tempfile.mkdtemp(prefix="bench-sysview-"), sysview.CACHE_FILE)
    res.row(CASE, size, G_SYSVIEW, "warm cache: read, lstat each directory and private entry", ref=True)
    view = sysview.load(cache, skip)
    for _ in ctx.rounds(21, budget=20):
        t0 = time.perf_counter()
        view = sysview.load(cache, skip, fresh=True)
        res.add(CASE, size, G_SYSVIEW, "cold cache: walk and write", time.perf_counter() - t0)
        t0 = time.perf_counter()
        sysview.load(cache, skip)
        res.add(
            CASE, size, G_SYSVIEW, "warm cache: read, lstat each directory and private entry", time.perf_counter() - t0
        )
        t0 = time.perf_counter()
        for path in view.dirs:
            os.lstat(path)
        res.add(CASE, size, G_SYSVIEW, f"floor: lstat of the {len(view.dirs)} directories", time.perf_counter() - t0)
    hidden = len(view.hidden_for(os.geteuid(), {os.getegid(), *os.getgroups()})) if os.geteuid() == 0 else 0
    res.add(CASE, size, G_SYSVIEW, "mounts added for this user", hidden, unit="mounts")


def _home_allowlist(
    ctx: Context, size: int, iso: Isolation, common_dir: str, run_id: str, worktree: str, workdir: str
) -> None:
    """One start's policy and command line for a home of 10 entries and one of 1,000, interleaved."""
    import dataclasses
    import tempfile
    import time

    from sandbox.confine.bwrap import bwrap_argv
    from sandbox.confine.policy import policy_for

    res = ctx.results
    homes: dict[str, Isolation] = {}
    for variant, entries in ((HOME_SMALL, 10), (HOME_BIG, 1000)):
        home = tempfile.mkdtemp(prefix="bench-home-allow-")
        for rel in HOME_TOOLCHAINS:
            os.makedirs(os.path.join(home, rel))
        for i in range(entries - len(HOME_TOOLCHAINS)):
            if i % 2:  # another project, with its git directory
                os.makedirs(os.path.join(home, f"project-{i}", ".git"))
            else:
                with open(os.path.join(home, f".dotfile-{i}"), "w", encoding="utf-8") as fh:
                    fh.write("x\n")
        homes[variant] = dataclasses.replace(iso, user_home=home, toolchain_homes=(home,))
    res.row(CASE, size, G_HOME, HOME_SMALL, ref=True)
    mounts: dict[str, int] = {}
    try:
        for i in ctx.rounds(21, budget=20):
            for variant in rotate([HOME_SMALL, HOME_BIG], i):
                t0 = time.perf_counter()
                policy = policy_for(
                    homes[variant], common_dir=common_dir, run_id=run_id, worktree=worktree, user_workdir=workdir
                )
                argv = bwrap_argv(str(homes[variant].program), policy, ["true"], worktree)
                res.add(CASE, size, G_HOME, str(variant), time.perf_counter() - t0)
                mounts[variant] = argv.count("--ro-bind-try") + argv.count("--ro-bind") + argv.count("--bind")
        for variant, count in mounts.items():
            res.add(CASE, size, G_HOME, f"bind mounts, {variant}", count, unit="mounts")
    finally:
        for isolation in homes.values():
            shutil.rmtree(str(isolation.user_home), ignore_errors=True)


def _serve(path: str, run_id: str, common_dir: str) -> bool:
    import time

    from sandbox.agent import wire

    run_proc([SANDBOX, "-C", path, "serve", run_id])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if wire.Client(common_dir).ping() is not None:
            return True
        time.sleep(0.05)
    return False


def _delta(results: Results, size: int, group: str) -> float | None:
    row = results.find(CASE, size, group, DELTA)
    return None if row is None else row.stats.median


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Confinement adds <= 15 ms to `sandbox exec`, <= 50 ms to `sandbox run` (medians, largest size)."""
    size = max(sizes)
    out = []
    for group, goal, limit in (
        (G_FLOOR, "+<= 15 ms median", 0.015),
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
    # Issue #31: the allowlist costs O(allowlist), never a walk of the home.
    small, big = results.find(CASE, size, G_HOME, HOME_SMALL), results.find(CASE, size, G_HOME, HOME_BIG)
    name = f"home allowlist: a start's policy with 1,000 entries in the home against 10, at {size // 1000}k"
    if small is None or big is None:
        out.append(Target(name, "<= 1.2x median", "-", None))
    else:
        ratio = big.stats.median / small.stats.median
        out.append(Target(name, "<= 1.2x median", f"{ratio:.2f}x", ratio <= 1.2))
    return out
