"""A hundred runs on one repository: memory, inotify instances and hook latency with one host.

``python -m bench.many_runs [--runs 100] [--files 10000] [--rounds 2] [--parallel 4]``: builds a
repository of ``--files`` files (10 per directory), starts ``--runs`` runs (``sandbox start``), and
has each run record calls through its hooks as Claude Code would: per round and run, a Bash call
(PreToolUse hook, the command writes one file, PostToolUse hook) and a Write call (PreToolUse, the
file written, PostToolUse), each hook a fresh ``python -I -S`` process (the command ``sandbox hooks
install`` writes), ``--parallel`` runs at a time. The first hook finds no host and starts the
repository's one (``sandbox serve``), as for users.

Reported:

* total memory: the largest sum, sampled every 0.2 s, of the resident memory (VmRSS) of every
  process of the sandbox (the host and the hook processes alive at that moment), and the host's
  own at the end;
* inotify: instances and watches held by the sandbox's processes (from ``/proc/<pid>/fdinfo``),
  and how many runs the host watches or scans (the user's ``fs.inotify.max_user_watches`` may not
  hold them all: those are scanned, and the host says so);
* hook latency (whole process, start to exit): median and 90th percentile, per hook;
* every call's record checked: each Bash and Write call succeeded with exactly its one file.

Targets (issue 13): memory <= 300 MiB, inotify instances <= 2, hook median <= 150 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures", "claude-code")
SANDBOX = os.path.join(os.path.dirname(sys.executable), "sandbox")


def _git(cwd: str, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(root: str, files: int) -> str:
    """A repository of ``files`` small text files, 10 per directory, committed."""
    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    _git(repo, "init", "-q")
    for i in range(files):
        d = os.path.join(repo, f"d{i // 1000:02d}", f"e{(i // 100) % 10}", f"f{(i // 10) % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"g{i}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"file {i}\n" * 100)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@e", "commit", "-qm", "init")
    return repo


def payload(tool: str, which: str, worktree: str, call_id: str, **tool_input: str) -> bytes:
    with open(os.path.join(FIXTURES, f"{tool}.json"), encoding="utf-8") as fh:
        doc = json.loads(fh.read().replace("__CWD__", worktree))
    data = doc[which]
    data["tool_use_id"] = call_id
    data["tool_input"].update(tool_input)
    return json.dumps(data).encode()


def hook_argv() -> list[str]:
    """The hook command ``sandbox hooks install claude-code`` writes (``python -I -S -c ...``)."""
    from sandbox.cli.hooks_cmd import hook_command

    return shlex.split(hook_command("claude-code"))


class Sampler:
    """Samples the total RSS of the sandbox's processes (the host, hook processes) in the background."""

    def __init__(self, markers: list[str]) -> None:
        self.markers = [m.encode() for m in markers]
        self.peak_kb = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def pids(self) -> list[int]:
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except OSError:
                continue
            if any(m in cmd for m in self.markers):
                out.append(int(name))
        return out

    @staticmethod
    def rss_kb(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmRSS:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return 0

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            pids = self.pids()
            total = sum(self.rss_kb(p) for p in pids)
            if total > self.peak_kb:
                self.peak_kb, self.peak_procs = total, len(pids)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2, help="Bash + Write calls per run")
    ap.add_argument("--parallel", type=int, default=4, help="runs recording at the same time")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    from sandbox.agent import host
    from sandbox.fast.inotify import instances_of, user_limit

    root = tempfile.mkdtemp(prefix="bench-many-")
    env = {**os.environ, "XDG_DATA_HOME": os.path.join(root, "data"), "SANDBOX_HOOK_AUTOSTART": "1"}
    try:
        t0 = time.perf_counter()
        repo = make_repo(root, args.files)
        common = os.path.join(repo, ".git")
        made = time.perf_counter() - t0
        runs: list[tuple[str, str]] = []
        t0 = time.perf_counter()
        for _ in range(args.runs):
            out = subprocess.run([SANDBOX, "start", "--json"], cwd=repo, env=env, check=True, capture_output=True)
            info = json.loads(out.stdout)
            runs.append((info["run"], info["worktree"]))
        started = time.perf_counter() - t0
        argv = hook_argv()
        latencies: dict[str, list[float]] = {
            "PreToolUse Bash": [],
            "PostToolUse Bash": [],
            "PreToolUse Write": [],
            "PostToolUse Write": [],
        }
        lock = threading.Lock()
        cpu: list[float] = []
        failures: list[str] = []
        # This checkout's processes only: the host and ``sandbox hook`` run this venv's script, the fast
        # hook command imports the package from this checkout (other checkouts' processes are not ours).
        sampler = Sampler([SANDBOX, f"sys.path.insert(0, {json.dumps(os.path.dirname(HERE))})"])

        def hook(label: str, data: bytes, worktree: str) -> None:
            t = time.perf_counter()
            proc = subprocess.Popen(
                argv, cwd=worktree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            proc.stdin.write(data)
            proc.stdin.close()
            proc.stdout.read()
            err = proc.stderr.read()
            _pid, status, usage = os.wait4(proc.pid, 0)  # its own CPU time: what the load does not inflate
            took = time.perf_counter() - t
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            with lock:
                latencies[label].append(took)
                cpu.append(usage.ru_utime + usage.ru_stime)
                if code != 0:
                    failures.append(f"{label}: exit {code}: {err.decode(errors='replace')[:200]}")

        def one_run(index: int, round_: int) -> None:
            run_id, wt = runs[index]
            cid = f"toolu_b{round_}_{index}"
            command = f"echo {round_} > bash{round_}.txt"
            hook("PreToolUse Bash", payload("Bash", "pre", wt, cid, command=command), wt)
            with open(os.path.join(wt, f"bash{round_}.txt"), "w", encoding="utf-8") as fh:
                fh.write(f"{round_}\n")
            hook("PostToolUse Bash", payload("Bash", "post", wt, cid, command=command), wt)
            wid = f"toolu_w{round_}_{index}"
            path = os.path.join(wt, f"written{round_}.txt")
            hook("PreToolUse Write", payload("Write", "pre", wt, wid, file_path=path, content="w\n"), wt)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write("w\n")
            hook("PostToolUse Write", payload("Write", "post", wt, wid, file_path=path, content="w\n"), wt)

        sampler.start()
        loads = [os.getloadavg()[0]]
        t0 = time.perf_counter()
        for round_ in range(args.rounds):
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                list(pool.map(lambda i: one_run(i, round_), range(len(runs))))  # noqa: B023
        recorded = time.perf_counter() - t0
        loads.append(os.getloadavg()[0])
        sampler.stop()
        pid = host.host_pid(common)
        host_cpu = _cpu_seconds(pid) if pid else 0.0
        status = host.host_status(common) or {}
        host_rss = Sampler.rss_kb(pid) if pid else 0
        sandbox_pids = sampler.pids()
        instances = sum(instances_of(p)[0] for p in sandbox_pids)
        watches = sum(instances_of(p)[1] for p in sandbox_pids)
        details = {}
        for p in sandbox_pids:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                details[p] = (instances_of(p), fh.read().replace(b"\0", b" ").decode(errors="replace")[:150])
        host.stop_host(common)
        served = status.get("runs", {})
        watched = sum(1 for r in served.values() if r["watched"])
        notes = sorted({r["note"] for r in served.values() if r.get("note")})
        # Every call recorded with exactly its file.
        from sandbox.run.run import Run
        from sandbox.store.project import Project

        project = Project(common)
        wrong = []
        for index, (run_id, _wt) in enumerate(runs):
            run = Run.open(project, run_id)
            for round_ in range(args.rounds):
                for cid, path in (
                    (f"toolu_b{round_}_{index}", f"bash{round_}.txt"),
                    (f"toolu_w{round_}_{index}", f"written{round_}.txt"),
                ):
                    entry = run.state().calls.get(cid)
                    got = [f.path for f in entry.files] if entry else None
                    if entry is None or entry.status.value != "succeeded" or got != [path]:
                        wrong.append(f"{run_id} {cid}: {entry.status.value if entry else 'missing'} {got}")

        def stats(values: list[float]) -> str:
            ordered = sorted(values)
            p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
            return f"median {statistics.median(values) * 1e3:.0f} ms, p90 {p90 * 1e3:.0f} ms (n={len(values)})"

        everything = [v for vs in latencies.values() for v in vs]
        print(
            f"repository: {args.files} files; {args.runs} runs; {args.rounds} round(s) of a Bash and a Write call "
            f"per run, {args.parallel} runs at a time; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        print(
            f"setup: repository {made:.1f} s, {args.runs} x sandbox start {started:.1f} s; recording {recorded:.1f} s"
        )
        print(
            f"memory: peak total RSS of the sandbox's processes {sampler.peak_kb / 1024:.0f} MiB "
            f"({sampler.peak_procs} processes at that moment); the host alone at the end {host_rss / 1024:.0f} MiB "
            f"(target <= 300 MiB total)"
        )
        print(f"host pid {pid}; sandbox processes alive at the end: {len(sandbox_pids)}")
        for p, (held, cmd) in details.items():
            print(f"  {p}: {held[0]} inotify instance(s), {held[1]} watches: {cmd}")
        print(
            f"inotify: {instances} instance(s), {watches} watches held by the sandbox (target <= 2 instances); "
            f"user limits: {user_limit('max_user_instances')} instances, {user_limit('max_user_watches')} watches"
        )
        print(
            f"runs served: {len(served)}, watched {watched}, scanned {len(served) - watched}"
            + (f"; why: {'; '.join(notes)}" if notes else "")
        )
        for label, values in latencies.items():
            print(f"  {label:<18} {stats(values)}")
        print(f"  {'all hooks':<18} {stats(everything)} (target median <= 150 ms)")
        print(
            f"CPU per hook (user+sys, load-independent): the hook process median "
            f"{statistics.median(cpu) * 1e3:.0f} ms; the host {host_cpu / max(len(everything), 1) * 1e3:.1f} ms "
            f"per hook on average (its whole life: {host_cpu:.1f} s for {len(everything)} hooks, start-up and "
            f"{len(runs)} trees' watches included); "
            f"load average {loads[0]:.1f} at the start of recording, {loads[1]:.1f} at the end"
        )
        print(f"hook failures: {len(failures)}; calls recorded wrong: {len(wrong)}")
        for line in (failures + wrong)[:10]:
            print("  " + line)
        if failures or wrong:
            sys.exit(1)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept: {root}")


if __name__ == "__main__":
    main()
