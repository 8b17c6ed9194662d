"""The host's answer to a hook, two source trees side by side in paired rounds.

``python -m bench.host_answer_ab --other DIR [--rounds 60] [--where DIR]``: makes two small
repositories, each with a run and its host (``sandbox serve``): one runs the code of ``--other`` (a
checkout of another commit, put first on the host's ``PYTHONPATH``), the other this checkout. Each
round sends a PreToolUse and a PostToolUse of a Read call to each host in turn (which one first
alternates), timing ``hookproto.forward`` in this process: the host's checks, the recording and the
ledger's durable write, without the hook process's start (bench row "the host's answer alone"). Both
hosts see the same load, so their difference is the code's. ``--where`` puts the repositories on
another file system (default: a temporary directory). Prints min, median and 90th percentile.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SANDBOX = os.path.join(os.path.dirname(sys.executable), "sandbox")


def _setup(root: str, env: dict[str, str]) -> tuple[str, str, str]:
    from sandbox.agent import wire
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    os.makedirs(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, capture_output=True)
    for i in range(20):
        with open(os.path.join(root, f"f{i:02d}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"line {i}\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"], cwd=root, check=True)
    project, workdir, _ = Project.discover(root)
    assert workdir is not None
    run = Run.start(project, workdir)
    subprocess.run([SANDBOX, "serve", run.run_id], cwd=root, env=env, capture_output=True, check=False)
    deadline = time.monotonic() + 60
    while wire.Client(project.common_dir).ping() is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"the host of {root} did not start")
        time.sleep(0.05)
    return project.common_dir, run.worktree, run.run_id


def _pair(worktree: str, tag: str, out: tuple[list[float], list[float]]) -> None:
    from sandbox.agent import hookproto
    from sandbox.agent.adapters import claude_code

    payload = {
        **{"session_id": "bench", "cwd": worktree, "hook_event_name": "PreToolUse", "tool_name": "Read"},
        **{"tool_input": {"file_path": os.path.join(worktree, "f01.txt")}, "tool_use_id": tag},
    }
    post = {**payload, "hook_event_name": "PostToolUse", "tool_response": {"ok": True}}
    for i, raw in enumerate((payload, post)):
        event = claude_code.to_event(raw)
        assert event is not None
        t0 = time.perf_counter()
        answer = hookproto.forward(hookproto.locate(event.cwd), event)
        out[i].append(time.perf_counter() - t0)
        assert answer is not None and answer.ok, answer


def _stats(xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    return f"min {xs[0] * 1e3:5.1f}  median {statistics.median(xs) * 1e3:5.1f}  p90 {p90 * 1e3:5.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="a checkout of the code to compare with")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--where", default=None)
    args = parser.parse_args()
    from sandbox.agent.host import stop_host

    base = tempfile.mkdtemp(prefix="host-ab-", dir=args.where)
    hosts = {
        "other": _setup(os.path.join(base, "other"), {**os.environ, "PYTHONPATH": os.path.abspath(args.other)}),
        "this": _setup(os.path.join(base, "this"), dict(os.environ)),
    }
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in hosts}
    print(f"load before: {os.getloadavg()[0]:.1f}", flush=True)
    try:
        for k in range(args.rounds + 3):
            order = list(hosts) if k % 2 == 0 else list(reversed(hosts))
            for name in order:
                out = samples[name] if k >= 3 else ([], [])  # three rounds of warm-up (lazy imports)
                _pair(hosts[name][1], f"toolu_ab_{os.getpid()}_{k}", out)
    finally:
        from sandbox.run.run import Run
        from sandbox.store.project import Project

        for common_dir, _worktree, run_id in hosts.values():
            stop_host(common_dir)
            Run.open(Project(common_dir), run_id).drop(force=True)  # its home too
        shutil.rmtree(base, ignore_errors=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    for name, (pre, post) in samples.items():
        print(f"{name:5s} PreToolUse  {_stats(pre)}")
        print(f"{name:5s} PostToolUse {_stats(post)}")
        print(f"{name:5s} both        {_stats(pre + post)}")


if __name__ == "__main__":
    main()
