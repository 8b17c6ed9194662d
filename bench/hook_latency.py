"""Median latency of ``sandbox hook claude-code`` as a whole process (process start included).

``python -m bench.hook_latency [--n 41] [--files 1000]``: builds a repository, starts a run, and
times PreToolUse/PostToolUse pairs of a Write call (the file is written between them) and of a
Read call, each hook a fresh process fed the fixture payloads:

* hosted: while ``sandbox run RUN -- sleep`` hosts the run (the hook hands its event over the
  run's socket; the intended set-up), and
* standalone: with no ``sandbox run`` (the hook process records the event itself).

Prints one line per variant with the median, the 10th and 90th percentiles in milliseconds.
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
    proc = subprocess.run([SANDBOX, "hook", "claude-code"], cwd=worktree, input=data, capture_output=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"hook failed: {proc.stderr.decode().strip()}")
    return elapsed


def _measure(worktree: str, n: int, tag: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"Write pre": [], "Write post": [], "Read pre": [], "Read post": []}
    for i in range(n):
        cid = f"toolu_bench_{tag}_{i}"
        out["Write pre"].append(_hook(worktree, _payload("Write", "pre", worktree, cid + "w")))
        os.makedirs(os.path.join(worktree, "src"), exist_ok=True)
        with open(os.path.join(worktree, "src", "greet.py"), "w", encoding="utf-8") as fh:
            fh.write(f"# version {tag} {i}\n")
        out["Write post"].append(_hook(worktree, _payload("Write", "post", worktree, cid + "w")))
        out["Read pre"].append(_hook(worktree, _payload("Read", "pre", worktree, cid + "r")))
        out["Read post"].append(_hook(worktree, _payload("Read", "post", worktree, cid + "r")))
    return out


def _report(variant: str, samples: dict[str, list[float]]) -> None:
    for name, values in samples.items():
        ms = sorted(v * 1000 for v in values)
        p10, p90 = ms[len(ms) // 10], ms[(len(ms) * 9) // 10]
        print(
            f"{variant:11s} {name:11s} median {statistics.median(ms):6.1f} ms  "
            f"p10 {p10:6.1f}  p90 {p90:6.1f}  (n={len(ms)})"
        )


def main() -> None:
    """Run the measurement and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=41, help="call pairs per variant")
    ap.add_argument("--files", type=int, default=1000, help="files in the generated repository")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-hook-")
    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    _git(repo, "init", "-q", "-b", "main")
    for i in range(args.files):
        d = os.path.join(repo, f"d{i // 10:05d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"file {i}\n" * 200)
    with open(os.path.join(repo, "README.md"), "w", encoding="utf-8") as fh:
        fh.write("hello\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@e", "commit", "-qm", "init")
    start = subprocess.run([SANDBOX, "start", "--json"], cwd=repo, check=True, capture_output=True)
    info = json.loads(start.stdout)
    run_id, worktree = info["run"], info["worktree"]
    host = subprocess.Popen(
        [SANDBOX, "run", run_id, "--hooks", "none", "--", "sleep", "3600"],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sock = os.path.join(repo, ".git", "sandbox", "runs", run_id, "hook.sock")
    deadline = time.monotonic() + 60
    while not os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the watcher is started after the socket is bound
    try:
        hosted = _measure(worktree, args.n, "hosted")
    finally:
        host.terminate()
        host.wait(timeout=60)
    standalone = _measure(worktree, args.n, "standalone")
    print(f"repository: {args.files} files; load average {os.getloadavg()[0]:.2f}")
    _report("hosted", hosted)
    _report("standalone", standalone)


if __name__ == "__main__":
    main()
