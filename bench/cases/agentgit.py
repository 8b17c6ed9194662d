"""The agent's own git in ``sandbox status``: the standard-library walk against the pygit2 one.

A repository of 10,000 history commits (a minute apart, one small file changed each, one pack via
``git fast-import``); a run started on it whose agent then made 1, 100 or 1,000 commits on its
branch (written with ``fast-import`` into the run's own git, a minute apart after the snapshot).
Variants, interleaved: the whole ``sandbox status RUN`` process (it answers from the sealed fold
cache and walks the agent's git with :mod:`sandbox.fast.revwalk`; before, an agent's commit sent
it to the full path: pygit2, pydantic, the models), the walk in-process
(:func:`sandbox.fast.agentgit.activity`), the former pygit2 walk in-process (kept here as the
reference), and ``python3 -c pass``. The walk must not read the user's history below the snapshot:
the number of commits it parsed is recorded as a row of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from bench.cases import Context, rotate
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "agentgit"
HISTORY = 10_000
AGENT = (1, 100, 1000)
REF = "python3 -c pass (same interpreter)"
PARSED = f"commits parsed by the walk ({HISTORY} history commits)"
T0 = 1_600_000_000
_done: set[str] = set()


def _fast_import(git_dir: str, lines: list[str]) -> None:
    subprocess.run(["git", "fast-import", "--quiet"], cwd=git_dir, input="\n".join(lines).encode(), check=True)


def _commits(ref: str, start: int, count: int, parent: str | None, who: str, t0: int = T0) -> list[str]:
    lines: list[str] = []
    for i in range(start, start + count):
        message = f"{who} commit {i}\n"
        lines += [f"commit {ref}", f"committer {who} <{who}@example.com> {t0 + 60 * i} +0000"]
        lines += [f"data {len(message)}", message]
        if i == start and parent is not None:
            lines.append(f"from {parent}")
        lines += [f"M 644 inline {who}.txt", f"data {len(str(i)) + 1}", f"{i}", ""]
    return lines


def _history_repo(scratch: str) -> str:
    root = os.path.join(scratch, "agentgit-repo")
    if os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    git(["init", "-q", "-b", "main"], cwd=root)
    _fast_import(os.path.join(root, ".git"), [*_commits("refs/heads/main", 0, HISTORY, None, "user"), ""])
    git(["checkout", "-q", "main"], cwd=root)
    return root


def _pygit2_activity(git_dir: str, run_id: str, base: str) -> int:
    """The former implementation's walk (pygit2, TOPOLOGICAL | TIME, the snapshot hidden): its count."""
    import pygit2

    repo = pygit2.Repository(git_dir)
    tips = {str(repo.head.target)}
    for name in repo.references:
        if name.startswith(("refs/heads/", "refs/tags/")):
            tips.add(str(repo.references[name].peel(pygit2.Commit).id))
    tips.discard(base)
    walker = repo.walk(next(iter(tips)), pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
    for tip in tips:
        walker.push(tip)
    walker.hide(base)
    count = 0
    for n, commit in enumerate(walker):
        if n >= 1000:
            break
        count += 1
        _ = commit.message
    return count


def run(ctx: Context, repo: Repo) -> None:
    """Measure at the first size only: the cost follows the history and the agent's commits."""
    if CASE in _done:
        return
    _done.add(CASE)
    from sandbox.fast import agentgit, gitread, revwalk
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    root = _history_repo(repo.scratch)
    project, workdir, _ = Project.discover(root)
    assert workdir is not None
    runs: dict[int, Run] = {}
    for n in AGENT:
        r = runs[n] = Run.start(project, workdir)
        # After the snapshot (made now), a minute apart, as an agent's commits would be.
        later = int(time.time()) + 60 - 60 * HISTORY
        _fast_import(r.git_dir, [*_commits(f"refs/heads/sandbox/{r.run_id}", HISTORY, n, r.base, "agent", later), ""])
        walker = revwalk.Walker(gitread.Repo(r.git_dir))
        head = gitread.Repo(r.git_dir).ref("HEAD")
        assert head is not None
        walked = walker.walk([head], [r.base])
        assert len(walked) == n, (n, len(walked))
        res.add(CASE, None, PARSED, f"agent made {n}", walker.parsed, unit="n")
        # Seal the fold cache, as any command that opened the run leaves it.
        Run.open(Project(project.common_dir), r.run_id).seal_cache()
        found = agentgit.activity(r.git_dir, r.run_id, r.base)
        assert found is not None and found.commit_count == min(n, agentgit.MAX_WALK)

    def ref() -> None:
        p = run_proc([sys.executable, "-c", "pass"], cwd=root)
        for n in AGENT:
            res.add(CASE, None, f"{HISTORY} history commits, agent made {n}", REF, p.seconds, ref=True)

    def status(n: int) -> None:
        p = run_proc([SANDBOX, "status", runs[n].run_id], cwd=root, rss=True)
        res.add(
            CASE,
            None,
            f"{HISTORY} history commits, agent made {n}",
            "sandbox status (process)",
            p.seconds,
            rss_kb=p.max_rss_kb,
        )

    def walk_new(n: int) -> None:
        r = runs[n]
        t0 = time.perf_counter()
        agentgit.activity(r.git_dir, r.run_id, r.base)
        res.add(
            CASE,
            None,
            f"{HISTORY} history commits, agent made {n}",
            "walk: revwalk (stdlib, in-process)",
            time.perf_counter() - t0,
        )

    def walk_old(n: int) -> None:
        r = runs[n]
        t0 = time.perf_counter()
        _pygit2_activity(r.git_dir, r.run_id, r.base)
        res.add(
            CASE,
            None,
            f"{HISTORY} history commits, agent made {n}",
            "walk: pygit2 (former, in-process)",
            time.perf_counter() - t0,
        )

    variants = [ref, *[(lambda n=n, f=f: f(n)) for n in AGENT for f in (status, walk_new, walk_old)]]
    for i in ctx.rounds(9, budget=90, minimum=3):
        for fn in rotate(variants, i):
            fn()  # type: ignore[operator]
    for r in runs.values():
        Run.open(Project(project.common_dir), r.run_id).drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """The walk parses the agent's commits and a handful of the user's, never the whole history."""
    out = []
    for n in AGENT:
        row = results.find(CASE, None, PARSED, f"agent made {n}")
        name = f"agent git walk with {n} agent commit(s) on {HISTORY} history commits: commits parsed"
        goal = n + 10
        if row is None:
            out.append(Target(name, f"<= {goal}", "-", None))
            continue
        parsed = int(row.stats.median)
        out.append(Target(name, f"<= {goal}", str(parsed), parsed <= goal))
    return out
