"""Start-up: whole-process time of the fast commands against ``python3 -c pass`` (issue 14).

A small repository (50 files) with one run; ``sandbox list``, ``status``, ``log``, ``path`` and
``--help`` are run as processes, interleaved with ``python -c pass`` of the interpreter the
sandbox runs on (the reference), so load on the machine hits them alike. ``apply`` of a 1-file
patch: a call changing one file is recorded (not timed), applied by a ``sandbox apply --call``
process (timed), then a call writing the file back is recorded and applied (not timed). The fast
commands read the run's sealed fold cache (sandbox.fast.foldcache); ``status`` right after another
process appended to the ledger takes the full path once, and is measured on its own row. Measured
once, on its own repository, whatever ``--sizes`` says: start-up does not depend on it.

The last row, ``import click, pygit2, sandbox.models``, is what any in-process apply must load
before it does anything (the CLI, libgit2, the persisted formats): it shows how much of apply's
ratio is that floor and how much is sandbox's own.

The package is byte-compiled first by ``bench.run`` (as ``pip install`` does): with ``PYTHONDONTWRITEBYTECODE`` set,
an editable install would otherwise compile every module from source on every run (measured: about
a third of ``sandbox list``'s start-up).
"""

from __future__ import annotations

import os
import sys

from bench.cases import Context, rotate
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "startup"
GROUP = "50-file repository"
REF = "python3 -c pass (same interpreter)"
FAST = ("--help", "list", "status", "log", "path")
APPLY = "apply --call (1-file patch)"
BEHIND = "status, first after another process appended (full path)"
#: What any in-process apply must load: click, pygit2 and the persisted formats (pydantic models).
FLOOR = "python3 -c 'import click, pygit2, sandbox.models' (apply's floor)"
FILES = 50
_done: set[str] = set()


def _small_repo(scratch: str) -> str:
    root = os.path.join(scratch, "startup-repo")
    if os.path.isdir(root):
        import shutil

        shutil.rmtree(root)
    os.makedirs(root)
    git(["init", "-q"], cwd=root)
    for i in range(FILES):
        with open(os.path.join(root, f"f{i:02d}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"line {i}\n")
    git(["add", "-A"], cwd=root)
    git(["commit", "-q", "-m", "small"], cwd=root)
    return root


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant, interleaved (once per benchmark run)."""
    if CASE in _done:
        return
    _done.add(CASE)
    from sandbox.merge import mergeback
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    root = _small_repo(repo.scratch)
    project, workdir, _ = Project.discover(root)
    assert workdir is not None
    sandbox_run = Run.start(project, workdir)
    counter = [0]

    def ref() -> None:
        p = run_proc([sys.executable, "-c", "pass"], cwd=root)
        res.add(CASE, None, GROUP, REF, p.seconds, ref=True)

    def fast(command: str) -> None:
        args = [command] if command in ("--help", "list") else [command, sandbox_run.run_id]
        p = run_proc([SANDBOX, *args], cwd=root, rss=True)
        res.add(CASE, None, GROUP, f"sandbox {command}", p.seconds, rss_kb=p.max_rss_kb)

    def apply() -> None:
        counter[0] += 1
        with sandbox_run.tool_call("Write", {"n": counter[0]}) as call:
            call.write("f00.txt", f"agent {counter[0]}\n")
        assert call.call_id is not None
        p = run_proc([SANDBOX, "apply", sandbox_run.run_id, "--call", call.call_id], cwd=root, rss=True)
        res.add(CASE, None, GROUP, f"sandbox {APPLY}", p.seconds, rss_kb=p.max_rss_kb)
        # The original content back, in the run and then in the user's tree (not timed).
        with sandbox_run.tool_call("Write", {"n": counter[0], "restore": True}) as back:
            back.write("f00.txt", "line 0\n")
        assert back.call_id is not None
        restoring = Run.open(Project(project.common_dir), sandbox_run.run_id)
        mergeback.apply(restoring, calls=[back.call_id])
        restoring.seal_cache()  # as the CLI leaves it after any command that opened the run

    def behind() -> None:
        # Another process appended (an agent's hook, recorded by the host) and nothing read the run
        # since: the cache is behind the ledger, so this status takes the full path (and re-seals).
        Run.open(Project(project.common_dir), sandbox_run.run_id).note({"bench": "behind"})
        p = run_proc([SANDBOX, "status", sandbox_run.run_id], cwd=root, rss=True)
        res.add(CASE, None, GROUP, BEHIND, p.seconds, rss_kb=p.max_rss_kb)

    def floor() -> None:
        p = run_proc([sys.executable, "-c", "import click, pygit2, sandbox.models"], cwd=root, rss=True)
        res.add(CASE, None, GROUP, FLOOR, p.seconds, rss_kb=p.max_rss_kb)

    variants = [ref, *[(lambda c=c: fast(c)) for c in FAST], apply, behind, floor]
    res.row(CASE, None, GROUP, REF, ref=True)
    for i in ctx.rounds(15, budget=120, minimum=5):
        for fn in rotate(variants, i):
            fn()  # type: ignore[operator]
    Run.open(Project(project.common_dir), sandbox_run.run_id).drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Fast commands within 5x of ``python3 -c pass``, a 1-file apply within 8x (whole process)."""
    ref = results.find(CASE, None, GROUP, REF)
    out = []
    for command, goal in [*((c, 5.0) for c in FAST), (APPLY, 8.0)]:
        row = results.find(CASE, None, GROUP, f"sandbox {command}")
        name = f"`sandbox {command}` whole process vs `python3 -c pass`"
        if row is None or ref is None:
            out.append(Target(name, f"<= {goal:g}x", "-", None))
            continue
        ratio = row.stats.median / ref.stats.median
        measured = f"{row.stats.median * 1000:.0f} ms vs {ref.stats.median * 1000:.0f} ms = {ratio:.1f}x"
        out.append(Target(name, f"<= {goal:g}x", measured, ratio <= goal))
    return out
