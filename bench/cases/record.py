"""Recording a change to 1, 10 and 100 files, against the whole-tree snapshots other agent tools take.

Sandbox variants, on one run started from the generated repository:

- ``tool_call``: ``with run.tool_call(...) as call: call.write(...)`` in-process, the whole call
  (durable ``started`` event, the writes, capture, commit, durable ``succeeded`` event) timed;
- ``start_call + finish_call(paths)``: the same through the two-step API, files written with
  plain ``open``;
- ``sandbox exec`` as a whole process (a shell appending a line to each file), without a watcher
  (the scan fallback: a run's first exec) and with the run's ``sandbox serve`` up (what the first
  exec starts in the background): the call is then recorded by that service over its socket.

Alternatives, on a separate plain worktree of the same repository (so the run's worktree only
ever holds changes the sandbox recorded); each iteration first changes the same files (not timed):

- ``read-tree snapshot``: temporary index from ``git read-tree HEAD``, then ``git add -A``,
  ``git write-tree``, ``git commit-tree`` (what agent tools do per checkpoint);
- ``seeded-index snapshot``: the same with the temporary index copied from a stat-fresh index;
- floors: hashing only the changed files, in-process with pygit2 (libgit2 fsync on, as the
  sandbox has it) and as one ``git hash-object -w`` process.
"""

from __future__ import annotations

import os
import shutil
import time

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo, git, pick
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "record"
KS = (1, 10, 100)
V_TOOL_CALL = "sandbox tool_call + call.write (in-process)"
V_FINISH = "sandbox start_call + finish_call(paths) (in-process)"
V_EXEC = "sandbox exec, no watcher: scan (CLI process)"
V_EXEC_SESSION = "sandbox exec, the run's service up (CLI process)"
V_EXEC_BASELINE = "same, the baseline install's sandbox exec (BENCH_BASELINE_SANDBOX), same service"
#: Another install's ``sandbox`` (a wheel of main, say) whose ``exec`` runs beside this one's against the
#: same service, alternating: before and after in one run (issue 30). Unset: not measured.
BASELINE = os.environ.get("BENCH_BASELINE_SANDBOX") or None
V_READ_TREE = "read-tree snapshot: read-tree HEAD + add -A + write-tree + commit-tree"
V_SEEDED = "seeded-index snapshot: copy fresh index + add -A + write-tree + commit-tree"
V_FLOOR_PY = "floor: hash + write only those blobs (pygit2 in-process, libgit2 fsync on)"
V_FLOOR_GIT = "floor: git hash-object -w of those files (process)"

APPEND_SH = 'for f in "$@"; do echo "$0" >> "$f"; done'


def _append(root: str, files: list[str], salt: str) -> None:
    for rel in files:
        with open(os.path.join(root, rel), "ab") as fh:
            fh.write(salt.encode() + b"\n")


class _Bench:
    """The state shared by the variants: the run, the alternatives' worktree, a change counter."""

    def __init__(self, ctx: Context, repo: Repo) -> None:
        import pygit2

        from sandbox.run.run import Run
        from sandbox.store.project import Project

        self._start = Run.start
        self.res = ctx.results
        self.repo = repo
        self.size = repo.size
        self.project, self.workdir, _ = Project.discover(repo.path)
        assert self.workdir is not None
        self.run = Run.start(self.project, self.workdir)
        # The alternatives work on their own plain worktree with its own (stat-fresh) index.
        self.alt = os.path.join(repo.scratch, "record-alt")
        git(["-c", "checkout.workers=0", "worktree", "add", "-q", "--detach", self.alt, "HEAD"], cwd=repo.path)
        time.sleep(1.1)  # past the racy-git second, so the refreshed index below is stat-fresh
        self.seed = os.path.join(repo.scratch, "seed-index")
        git(["read-tree", "HEAD"], cwd=self.alt, env={"GIT_INDEX_FILE": self.seed})
        git(["update-index", "-q", "--refresh"], cwd=self.alt, env={"GIT_INDEX_FILE": self.seed})
        self.tmp_index = os.path.join(repo.scratch, "tmp-index")
        self.alt_repo = pygit2.Repository(self.alt)
        self.counter = 0

    def new_run(self) -> None:
        """Drop the run and start a fresh one (each file count starts from an empty ledger)."""
        self.run.drop(force=True)
        assert self.workdir is not None
        self.run = self._start(self.project, self.workdir)

    def close(self) -> None:
        shutil.rmtree(self.alt, ignore_errors=True)
        git(["worktree", "prune"], cwd=self.repo.path)

    def salt(self) -> str:
        self.counter += 1
        return f"bench change {self.counter} {time.time_ns()}"

    def add(self, k: int, variant: str, seconds: float, rss_kb: int | None = None) -> None:
        self.res.add(CASE, self.size, f"{k} file(s)", variant, seconds, rss_kb=rss_kb)

    # -- variants ----------------------------------------------------------------------------

    def tool_call(self, files: list[str]) -> None:
        data = self.salt().encode()
        t0 = time.perf_counter()
        with self.run.tool_call("Write", {"paths": files}) as call:
            for rel in files:
                call.write(rel, data)
        dt = time.perf_counter() - t0
        assert call.entry is not None and len(call.entry.files) == len(files), call.entry
        self.add(len(files), V_TOOL_CALL, dt)

    def finish_call(self, files: list[str]) -> None:
        data = self.salt().encode()
        t0 = time.perf_counter()
        call_id = self.run.start_call("Write", {"paths": files})
        for rel in files:
            with open(os.path.join(self.run.worktree, rel), "wb") as fh:
                fh.write(data)
        entry = self.run.finish_call(call_id, "succeeded", paths=files)
        dt = time.perf_counter() - t0
        assert len(entry.files) == len(files)
        self.add(len(files), V_FINISH, dt)

    def cli_exec(self, files: list[str], variant: str, program: str = SANDBOX) -> None:
        argv = [program, "-C", self.repo.path, "exec", self.run.run_id, "--", "sh", "-c", APPEND_SH, self.salt()]
        p = run_proc([*argv, *files], rss=True)
        self.add(len(files), variant, p.seconds, p.max_rss_kb)

    def snapshot(self, files: list[str], seeded: bool) -> None:
        _append(self.alt, files, self.salt())
        env = {"GIT_INDEX_FILE": self.tmp_index}
        t0 = time.perf_counter()
        if seeded:
            shutil.copyfile(self.seed, self.tmp_index)
        else:
            git(["read-tree", "HEAD"], cwd=self.alt, env=env)
        git(["add", "-A"], cwd=self.alt, env=env)
        tree = git(["write-tree"], cwd=self.alt, env=env).decode().strip()
        git(["commit-tree", "-p", "HEAD", "-m", "snapshot", tree], cwd=self.alt, env=env)
        dt = time.perf_counter() - t0
        os.unlink(self.tmp_index)
        self.add(len(files), V_SEEDED if seeded else V_READ_TREE, dt)

    def floor_py(self, files: list[str]) -> None:
        _append(self.alt, files, self.salt())
        full = [os.path.join(self.alt, f) for f in files]
        t0 = time.perf_counter()
        for path in full:
            self.alt_repo.create_blob_fromdisk(path)
        self.add(len(files), V_FLOOR_PY, time.perf_counter() - t0)

    def floor_git(self, files: list[str]) -> None:
        _append(self.alt, files, self.salt())
        p = run_proc(["git", "hash-object", "-w", "--", *files], cwd=self.alt)
        self.add(len(files), V_FLOOR_GIT, p.seconds)


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant for each number of files, interleaved; then exec with a session."""
    from functools import partial

    res = ctx.results
    n = 15 if repo.size < 100_000 else 9
    n_snap = ctx.reps(7 if repo.size < 100_000 else 5)  # the whole-tree snapshots take seconds at 100k
    b = _Bench(ctx, repo)
    try:
        for k in KS:
            if k != KS[0]:
                b.new_run()
            files = pick(repo.size, k)
            res.row(CASE, repo.size, f"{k} file(s)", V_SEEDED, ref=True)
            variants = [
                partial(b.tool_call, files),
                partial(b.finish_call, files),
                partial(b.cli_exec, files, V_EXEC),
                partial(b.floor_py, files),
                partial(b.floor_git, files),
            ]
            snaps = [partial(b.snapshot, files, False), partial(b.snapshot, files, True)]
            for i in ctx.rounds(n, budget=25):
                for fn in rotate(variants + (snaps if i < n_snap else []), i):
                    settle()
                    fn()  # type: ignore[operator]
        # The run's service (what the first `sandbox exec` of a run starts in the background) makes
        # every later exec use it, so it gets a phase of its own.
        ready = _serve(repo.path, b.run)
        if ready is None:
            res.skip(CASE, repo.size, "sandbox exec with the run's service: `sandbox serve` did not answer")
            return
        try:
            res.add(CASE, repo.size, "session", "sandbox serve ready (process start to first answer)", ready)
            for k in KS:
                files = pick(repo.size, k)
                if BASELINE is not None:
                    res.row(CASE, repo.size, f"{k} file(s)", V_EXEC_BASELINE)
                execs = [partial(b.cli_exec, files, V_EXEC_SESSION)]
                execs += [partial(b.cli_exec, files, V_EXEC_BASELINE, BASELINE)] if BASELINE is not None else []
                for i in ctx.rounds(n, budget=12 * len(execs)):
                    for fn in rotate(execs, i):
                        settle()
                        fn()  # type: ignore[operator]
        finally:
            from sandbox.agent.host import stop_host

            stop_host(b.run.project.common_dir)
    finally:
        b.close()


def _serve(repo_path: str, run: object, timeout: float = 120.0) -> float | None:
    """Start the repository's host (`sandbox serve`) and wait until it answers; seconds taken."""
    from sandbox.agent import wire

    common_dir = run.project.common_dir  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    run_proc([SANDBOX, "-C", repo_path, "serve", run.run_id])  # type: ignore[attr-defined]
    while time.perf_counter() - t0 < timeout:
        if wire.Client(common_dir).ping() is not None:
            return time.perf_counter() - t0
        time.sleep(0.02)
    return None


def _median(results: Results, size: int, k: int, variant: str) -> float | None:
    row = results.find(CASE, size, f"{k} file(s)", variant)
    return row.stats.median if row else None


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """One-file record <= 10 ms and >= 20x faster than the seeded snapshot; exec >= 5x vs read-tree (with the
    service: >= 10x, and <= 200 ms whole process; issue 30)."""
    size = 100_000 if 100_000 in sizes else max(sizes)
    tag = f"{size // 1000}k"
    out = []
    lib = _median(results, size, 1, V_TOOL_CALL)
    seeded = _median(results, size, 1, V_SEEDED)
    read_tree = _median(results, size, 1, V_READ_TREE)
    if lib is None:
        out.append(Target(f"in-process one-file record at {tag}", "<= 10 ms median", "-", None))
    else:
        out.append(
            Target(f"in-process one-file record at {tag}", "<= 10 ms median", f"{lib * 1e3:.1f} ms", lib <= 0.010)
        )
    if lib is None or seeded is None:
        out.append(Target(f"in-process one-file record vs seeded-index snapshot at {tag}", ">= 20x faster", "-", None))
    else:
        out.append(
            Target(
                f"in-process one-file record vs seeded-index snapshot at {tag}",
                ">= 20x faster",
                f"{seeded * 1e3:.0f} ms / {lib * 1e3:.1f} ms = {seeded / lib:.1f}x",
                seeded / lib >= 20,
            )
        )
    for variant, label, times in ((V_EXEC, "no service: scan", 5), (V_EXEC_SESSION, "the run's service up", 10)):
        exe = _median(results, size, 1, variant)
        name = f"`sandbox exec` ({label}) changing one file vs read-tree snapshot at {tag}"
        if exe is None or read_tree is None:
            out.append(Target(name, f">= {times}x faster", "-", None))
        else:
            out.append(
                Target(
                    name,
                    f">= {times}x faster",
                    f"{read_tree * 1e3:.0f} ms / {exe * 1e3:.0f} ms = {read_tree / exe:.1f}x",
                    read_tree / exe >= times,
                )
            )
    exe = _median(results, size, 1, V_EXEC_SESSION)
    name = f"`sandbox exec` (the run's service up) changing one file at {tag}, whole process"
    value = "-" if exe is None else f"{exe * 1e3:.0f} ms"
    out.append(Target(name, "<= 200 ms median", value, None if exe is None else exe <= 0.200))
    return out
