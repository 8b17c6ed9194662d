"""Hook latency as the real Claude Code measures it (issue #9: median <= 120 ms, p90 <= 200 ms).

``python -m bench.claude_latency [--calls 40] [--files 10000] [--via noop|run|serve|all]`` (``make
bench-claude``; needs ``make agents``): builds a repository of ``--files`` files, starts a run, and
drives the real Claude Code (headless, bypassPermissions) through ``--calls`` tool calls scripted by
the model server of ``tests/agents/anthropic_server.py`` (Write, Edit, Bash that writes a file,
Read, in turn), with the run's service up:

* ``run``: ``sandbox run RUN -- claude ...`` (the sandbox process hosts the run's hook socket);
* ``serve``: ``sandbox hooks install claude-code RUN`` + ``sandbox serve RUN`` in the background,
  then ``claude`` started in the worktree;
* ``noop`` (the floor on this machine at this load): the same session with a Python hook (started as
  the hook is, ``python -I -S``) that only reads its payload;
* ``noop-run`` (the floor of ``run``): that hook, installed in the worktree, under ``sandbox run RUN --hooks
  none`` (the same confinement, so the same cost of starting a process inside it).

Claude Code's ``--debug-file`` logs every hook as ``Hooks: <Event>:<tool> [<command>] finished with
status <code> (<N>ms)``; the figures are those durations for our hook command (process start,
recording and exit included, as the agent waits for them). Prints the median and 90th percentile per
event and overall, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.agents.anthropic_server import ModelServer, Turn, bash, edit, read, write  # noqa: E402

SANDBOX = str(Path(sys.executable).parent / "sandbox")
CLAUDE = ROOT / "tests" / "agents" / "node_modules" / ".bin" / "claude"
LINE = re.compile(r"Hooks: (\w+)(?::(\w+))? \[(.*?)\] finished with status (\d+) \((\d+)ms\)")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(root: Path, files: int) -> None:
    """A repository of ``files`` small files, 10 per directory, committed."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    for i in range(files):
        path = root / f"d{i // 1000:03d}" / f"e{(i // 10) % 100:02d}" / f"f{i:06d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n" * 20)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "init")


def script(worktree: Path, calls: int) -> list[Turn]:
    """``calls`` tool calls: Write, Edit, Bash and Read in turn."""
    turns: list[Turn] = []
    for i in range(calls):
        target = worktree / "bench" / f"w{i // 4:04d}.txt"
        kind = i % 4
        if kind == 0:
            turns.append(write(str(target), f"line {i}\n"))
        elif kind == 1:
            turns.append(edit(str(target), f"line {i - 1}", f"edited {i}"))
        elif kind == 2:
            turns.append(bash(f"echo {i} > bench/b{i:04d}.txt"))
        else:
            turns.append(read(str(target)))
    return turns


def env_for(server: ModelServer, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-bench",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


#: As the hook starts (``-I -S``: no site, so no editable install's path finder, ~30 ms here).
NOOP = f"{sys.executable} -I -S -c 'import sys; sys.stdin.buffer.read()'"


def durations(debug_log: Path, marker: str = " hook claude-code") -> list[tuple[str, int]]:
    """(event, milliseconds) of every run of a hook command containing ``marker`` in a debug log."""
    out = []
    for line in debug_log.read_text(errors="replace").splitlines():
        found = LINE.search(line)
        if found and marker in found.group(3):
            if found.group(4) != "0":
                raise SystemExit(f"a hook failed: {line}")
            out.append((found.group(1), int(found.group(5))))
    return out


def one(via: str, repo: Path, home: Path, calls: int) -> list[tuple[str, int]]:
    """Start a run, drive Claude Code through ``calls`` tool calls, return the hook durations."""
    start = subprocess.run([SANDBOX, "start", "--json"], cwd=repo, capture_output=True, text=True, check=True)
    started = json.loads(start.stdout)
    run_id, worktree = started["run"], Path(started["worktree"])
    (worktree / "bench").mkdir(exist_ok=True)
    # Inside ~/.claude: under confinement (sandbox run's default) the agent's state directory is writable,
    # the rest of the home is read-only and /tmp is private.
    (home / ".claude").mkdir(exist_ok=True)
    debug_log = home / ".claude" / f"debug-{via}.log"
    if via in ("run", "noop-run"):
        # Under 'sandbox run' the user's ~/.claude is read-only and the run's directory hidden: the log
        # goes in the worktree, ignored by the run's git (so no call records it).
        debug_log = worktree / f"debug-{via}.log"
        git_dir = subprocess.run(
            ["git", "rev-parse", "--absolute-git-dir"], cwd=worktree, capture_output=True, text=True, check=True
        ).stdout.strip()
        os.makedirs(os.path.join(git_dir, "info"), exist_ok=True)
        with open(os.path.join(git_dir, "info", "exclude"), "a", encoding="utf-8") as fh:
            fh.write(f"/{debug_log.name}\n")
    args = [str(CLAUDE), "-p", "Do the task.", "--dangerously-skip-permissions", "--debug-file", str(debug_log)]
    serve = None
    with ModelServer(script(worktree, calls)) as server:
        env = env_for(server, home)
        try:
            if via in ("noop", "noop-run"):  # the floor: a Python hook that only reads its payload
                hook = {"matcher": "*", "hooks": [{"type": "command", "command": NOOP}]}
                settings = {"hooks": {e: [hook] for e in ("PreToolUse", "PostToolUse")}}
                (worktree / ".claude").mkdir(exist_ok=True)
                (worktree / ".claude" / "settings.local.json").write_text(json.dumps(settings))
                if via == "noop":
                    subprocess.run(args, cwd=worktree, env=env, check=True, timeout=900)
                else:
                    run_args = [SANDBOX, "run", run_id, "--hooks", "none", "--", *args]
                    subprocess.run(run_args, cwd=repo, env=env, check=True, timeout=900)
            elif via == "run":
                subprocess.run([SANDBOX, "run", run_id, "--", *args], cwd=repo, env=env, check=True, timeout=900)
            else:
                subprocess.run([SANDBOX, "hooks", "install", "claude-code", run_id], cwd=repo, check=True)
                serve = subprocess.Popen(
                    [SANDBOX, "-C", str(repo), "serve", run_id, "--foreground"], cwd=repo, stderr=subprocess.DEVNULL
                )
                deadline = time.monotonic() + 30  # the service is ready when the run's socket exists
                while time.monotonic() < deadline and not _socket_ready(worktree):
                    time.sleep(0.05)
                subprocess.run(args, cwd=worktree, env=env, check=True, timeout=900)
        finally:
            if serve is not None:
                serve.terminate()
                serve.wait(timeout=30)
    found = durations(debug_log, "sys.stdin.buffer.read()" if via.startswith("noop") else " hook claude-code")
    subprocess.run([SANDBOX, "drop", run_id, "--force"], cwd=repo, capture_output=True)
    return found


def _socket_ready(worktree: Path) -> bool:
    from sandbox.agent import hookproto, wire

    try:
        loc = hookproto.locate(str(worktree))
    except Exception:
        return False
    return wire.Client(loc.common_dir).ping() is not None


def report(name: str, samples: list[tuple[str, int]]) -> None:
    def line(label: str, values: list[int]) -> str:
        if not values:
            return f"  {label:<22} n=0"
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
        return f"  {label:<22} n={len(values):<4} median {statistics.median(values):6.0f} ms   p90 {p90:6.0f} ms"

    print(f"{name}:")
    print(line("all hooks", [ms for _e, ms in samples]))
    for event in sorted({e for e, _ms in samples}):
        print(line(event, [ms for e, ms in samples if e == event]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--via", choices=["run", "serve", "noop", "noop-run", "all"], default="all")
    opts = parser.parse_args()
    if not os.access(CLAUDE, os.X_OK):
        raise SystemExit("The real Claude Code is not installed; run 'make agents'.")
    work = Path(tempfile.mkdtemp(prefix="sandbox-claude-bench-"))
    try:
        repo = work / "repo"
        make_repo(repo, opts.files)
        print(f"Claude Code hook latency, {opts.calls} tool calls, {opts.files} files; load {os.getloadavg()}")
        for via in ["noop", "noop-run", "run", "serve"] if opts.via == "all" else [opts.via]:
            home = work / f"home-{via}"
            home.mkdir()
            report(f"via {via}", one(via, repo, home, opts.calls))
        print(f"load after {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
