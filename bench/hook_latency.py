"""Latency of ``sandbox hook claude-code`` as a whole process (process start included).

``python -m bench.hook_latency [--n 31] [--files 10000] [--warmup 3]``: builds a repository of
``--files`` files (10 per directory), starts a run, and times PreToolUse/PostToolUse pairs of a
Write call (the file is written between the two hooks) and of a Bash call (the "command" writes
one file between them), each hook a fresh ``subprocess.run`` timed with ``time.perf_counter``:

* (a) service: while ``sandbox serve`` hosts the repository. The hook hands its event over the
  host's socket; the Bash call's changes come from the host's watcher window (O(changed paths)).
* (b) in-process: no host, autostart off (``SANDBOX_HOOK_AUTOSTART=0``). The hook process imports
  pygit2 and pydantic and records the event itself; the Bash call's PostToolUse scans the worktree
  (O(repository)).

Prints, per variant, the median and 90th percentile in milliseconds of each hook and of each
pre+post pair, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures", "claude-code")
SANDBOX = os.path.join(os.path.dirname(sys.executable), "sandbox")
NO_AUTOSTART = {**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"}


def _git(cwd: str, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _payload(tool: str, which: str, worktree: str, call_id: str) -> bytes:
    with open(os.path.join(FIXTURES, f"{tool}.json"), encoding="utf-8") as fh:
        doc = json.loads(fh.read().replace("__CWD__", worktree))
    payload = doc[which]
    payload["tool_use_id"] = call_id
    return json.dumps(payload).encode()


def _hook(worktree: str, data: bytes) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [SANDBOX, "hook", "claude-code"], cwd=worktree, input=data, capture_output=True, env=NO_AUTOSTART
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"hook failed: {proc.stderr.decode().strip()}")
    return elapsed


def _round(worktree: str, tag: str, out: dict[str, list[float]] | None) -> None:
    """One Write pair and one Bash pair; timings appended to ``out`` (None: warm-up)."""
    samples: dict[str, float] = {}
    for tool, rel in (("Write", "src/greet.py"), ("Bash", "build/out.txt")):
        cid = f"toolu_bench_{tag}_{tool}"
        samples[f"{tool} pre"] = _hook(worktree, _payload(tool, "pre", worktree, cid))
        path = os.path.join(worktree, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"# {tag}\n")
        samples[f"{tool} post"] = _hook(worktree, _payload(tool, "post", worktree, cid))
        samples[f"{tool} pair"] = samples[f"{tool} pre"] + samples[f"{tool} post"]
    if out is not None:
        for key, value in samples.items():
            out.setdefault(key, []).append(value)


def _measure(worktree: str, n: int, warmup: int, tag: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i in range(warmup):
        _round(worktree, f"{tag}_warm{i}", None)
    for i in range(n):
        _round(worktree, f"{tag}_{i}_{time.time_ns()}", out)
    return out


def _report(variant: str, samples: dict[str, list[float]]) -> None:
    for name, values in samples.items():
        ms = sorted(v * 1000 for v in values)
        p90 = ms[min(len(ms) - 1, (len(ms) * 9) // 10)]
        print(f"{variant:16s} {name:11s} median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms  (n={len(ms)})")


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _make_repo(root: str, files: int) -> str:
    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    _git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        d = os.path.join(repo, f"d{i // 100:04d}", f"e{(i // 10) % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"file {i}\n" * 200)
    with open(os.path.join(repo, "README.md"), "w", encoding="utf-8") as fh:
        fh.write("hello\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@e", "commit", "-qm", "init")
    return repo


def main() -> None:
    """Run the measurement and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=31, help="call pairs per variant (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed call pairs first")
    ap.add_argument("--files", type=int, default=10_000, help="files in the generated repository")
    args = ap.parse_args()
    from sandbox.agent import host, wire

    root = tempfile.mkdtemp(prefix="bench-hook-")
    repo = _make_repo(root, args.files)
    start = subprocess.run([SANDBOX, "start", "--json"], cwd=repo, check=True, capture_output=True)
    info = json.loads(start.stdout)
    run_id, worktree = info["run"], info["worktree"]
    loads = [f"start: {_load()}"]

    subprocess.run([SANDBOX, "serve", run_id], cwd=repo, check=True, capture_output=True)
    try:
        served = _measure(worktree, args.n, args.warmup, "service")
    finally:
        host.stop_host(os.path.join(repo, ".git"))
    with open(os.path.join(wire.host_dir(os.path.join(repo, ".git")), wire.LOG), encoding="utf-8") as fh:
        via_socket = fh.read().count(" via socket: ok")
    loads.append(f"after (a): {_load()}")
    in_process = _measure(worktree, args.n, args.warmup, "inproc")
    loads.append(f"after (b): {_load()}")
    subprocess.run([SANDBOX, "drop", "--force", run_id], cwd=repo, check=False, capture_output=True)

    print(f"repository: {args.files} files; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    print("; ".join(loads))
    print(f"(a) hooks answered through the service's socket: {via_socket} of {4 * (args.n + args.warmup)}")
    _report("(a) service", served)
    _report("(b) in-process", in_process)


if __name__ == "__main__":
    main()
