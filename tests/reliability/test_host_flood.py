"""One run's flood of connections neither stops the repository's host nor another run's hooks (issue 25, item 4).

Run A's confined ``sandbox exec --network off`` opens ~1,100 connections to the host's socket and
holds them (opening again each one the host closes), while run B's hooks (``sandbox hook
claude-code``, real processes) are timed. The host runs with the usual soft limit of 1,024
descriptors (the flooder raises its *own* soft limit to hold 1,100 sockets; the host's is never
raised). Before the intake's caps the host died ("Too many open files") and B's hooks fell back to
recording in their own processes or failed.

The figures are printed (``-s``): connections, B's median hook latency quiet and during the flood,
failures.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import alive, sandbox_cmd, scaled, wait_until
from tests.hook_fixtures import payload

SANDBOX = str(Path(sys.executable).parent / "sandbox")
CONNECTIONS = 1100
HOOKS = 16

FLOODER = r"""
import json, os, resource, select, socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
REOPEN_EVERY_MS = 250
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 200), hard))
stats = {"opened": 0, "failed": 0, "reopened": 0, "closed_by_host": 0}

def one():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    until = time.monotonic() + 2
    while True:
        try:
            s.connect(path)
            return s
        except BlockingIOError:  # a full listen backlog: retried, as the hooks' client does
            if time.monotonic() < until:
                time.sleep(0.002)
                continue
        except OSError:
            pass
        s.close()
        stats["failed"] += 1
        return None

socks = [s for s in (one() for _ in range(count)) if s is not None]
stats["opened"] = len(socks)
print("opened %d" % len(socks), flush=True)
deadline = time.monotonic() + 120
poll = select.poll()
poll.register(sys.stdin.fileno(), select.POLLIN)
by_fd = {}
for s in socks:
    by_fd[s.fileno()] = s
    poll.register(s.fileno(), select.POLLIN)
done = False
closed = 0
while time.monotonic() < deadline and not done:
    for fd, _ev in poll.poll(REOPEN_EVERY_MS):
        if fd == sys.stdin.fileno():
            if not os.read(fd, 4096):
                done = True  # the test closed our stdin
            continue
        s = by_fd.pop(fd)  # closed by the host (EOF)
        poll.unregister(fd)
        s.close()
        stats["closed_by_host"] += 1
        closed += 1
    time.sleep(REOPEN_EVERY_MS / 1000)
    for _ in range(closed):  # open them again, in one batch a round: the flood goes on
        if select.select([sys.stdin], [], [], 0)[0] and not os.read(sys.stdin.fileno(), 4096):
            done = True  # the test closed our stdin: each reopening may wait 2 s, so not the whole batch
            break
        again = one()
        if again is not None:
            by_fd[again.fileno()] = again
            poll.register(again.fileno(), select.POLLIN)
            stats["reopened"] += 1
    closed = 0
stats["held_at_end"] = len(by_fd)
print(json.dumps(stats), flush=True)
"""


def _soft_limit(n: int) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


@pytest.fixture
def two_runs(repo: Path) -> Iterator[tuple[Run, Run]]:
    project = Project(str(repo / ".git"))
    runs = []
    for _ in range(2):
        out = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
        runs.append(Run.open(project, out["run"]))
    yield runs[0], runs[1]


def start_host(repo: Path, nofile: int) -> subprocess.Popen[bytes]:
    """``sandbox serve --foreground`` with a soft descriptor limit of ``nofile``."""
    proc = subprocess.Popen(
        [SANDBOX, "-C", str(repo), "serve", "--foreground", "--idle-exit", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: _soft_limit(nofile),
    )
    wait_until(lambda: wire.Client(str(repo / ".git")).ping())
    return proc


def time_hooks(run: Run, tag: str, n: int = HOOKS, env: dict[str, str] | None = None) -> tuple[list[float], list[str]]:
    """Wall times of ``n`` hook processes of ``run`` (Bash pre/post pairs), and the failures."""
    times, failures = [], []
    for i in range(n // 2):
        call = f"{tag}-{i}"
        for which in ("pre", "post"):
            data = json.dumps(payload("Bash", which, run.worktree, call)).encode()
            started = time.monotonic()
            proc = subprocess.run(
                [SANDBOX, "hook", "claude-code"],
                cwd=run.worktree,
                input=data,
                capture_output=True,
                timeout=120,
                env={**os.environ, **(env or {})},
            )
            times.append(time.monotonic() - started)
            if proc.returncode != 0 or proc.stderr.strip():
                failures.append(f"{which} {call}: exit {proc.returncode}: {proc.stderr.decode().strip()[:200]}")
    return times, failures


def requests_of(common: str, run: Run) -> int:
    status = wire.status(common)
    assert status is not None
    return int(status["runs"].get(run.run_id, {}).get("requests", 0))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_flood_from_one_run_stops_neither_the_host_nor_another_runs_hooks(
    repo: Path, two_runs: tuple[Run, Run]
) -> None:
    a, b = two_runs
    common = str(repo / ".git")
    served = start_host(repo, 1024)
    flood: subprocess.Popen[bytes] | None = None
    try:
        pid = served.pid
        quiet, failed_quiet = time_hooks(b, "quiet")
        assert failed_quiet == []
        # One flooding process past the default 1,024 open files a confined process gets: the host's caps,
        # not that limit, are what this test is about.
        (repo / ".sandbox.toml").write_text("[isolation]\nmax_open_files = 2048\n")
        flood = subprocess.Popen(
            [
                SANDBOX,
                "exec",
                a.run_id,
                "--network",
                "off",
                "--",
                sys.executable,
                "-c",
                FLOODER,
                wire.socket_path(common),
                str(CONNECTIONS),
            ],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert flood.stdout is not None and flood.stdin is not None
        first = flood.stdout.readline().decode()
        assert first.startswith("opened "), (first, flood.stderr.read().decode() if flood.poll() is not None else "")
        opened = int(first.split()[1])
        before = requests_of(common, b)
        during, failed = time_hooks(b, "flood")
        after = requests_of(common, b)
        out, _err = flood.communicate(input=b"", timeout=120)  # our stdin closed: the flooder stops
        stats = json.loads(out.decode().strip().splitlines()[-1])
        quiet_after, _ = time_hooks(b, "after")
        status = wire.status(common)
        figures = {
            "connections_opened": opened,
            "flood": stats,
            "b_median_quiet_ms": round(statistics.median(quiet) * 1000, 1),
            "b_median_during_ms": round(statistics.median(during) * 1000, 1),
            "b_median_after_ms": round(statistics.median(quiet_after) * 1000, 1),
            "b_failures": len(failed),
            "host_notes": status["notes"] if status else None,
        }
        print("\nhost flood:", json.dumps(figures))
        assert opened >= 1000, figures
        assert failed == [], failed
        # Every hook of B was answered by the host (none fell back to recording by itself).
        assert after - before == len(during), (before, after, figures)
        assert served.poll() is None and alive(pid) and wire.Client(common).ping() is not None
        baseline = max(statistics.median(quiet), statistics.median(quiet_after))
        assert statistics.median(during) <= 2 * baseline, figures
        entries = Run.open(Project(common), b.run_id).entries()
        assert sum(1 for e in entries if e.call_id.startswith("flood-") and e.status.value == "succeeded") == HOOKS // 2
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait(timeout=30)
        served.terminate()
        served.wait(timeout=30)


@pytest.mark.slow
def test_a_host_out_of_descriptors_backs_off_and_keeps_serving(repo: Path, two_runs: tuple[Run, Run]) -> None:
    """EMFILE on accept: the host backs off and sheds instead of dying; once the flood ends it serves."""
    _a, b = two_runs
    common = str(repo / ".git")
    served = start_host(repo, 64)  # far fewer descriptors than four flooders' 4 x 32 connections
    flooders: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(4):
            proc = subprocess.Popen(
                [sys.executable, "-c", FLOODER, wire.socket_path(common), "32"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            flooders.append(proc)
        for proc in flooders:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith(b"opened ")
        time.sleep(1.0)
        assert served.poll() is None
        for proc in flooders:  # all at once: each one's last round of reopening takes up to seconds
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in flooders:
            proc.wait(timeout=scaled(120))
        assert wait_until(lambda: wire.Client(common).ping(), timeout=30)
        _times, failed = time_hooks(b, "after", 4)
        assert failed == []
        status = wire.status(common)
        assert status is not None and status["runs"][b.run_id]["requests"] == 4
        assert any("short of descriptors" in n for n in status["notes"]), status["notes"]
        assert served.poll() is None
    finally:
        for proc in flooders:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        served.terminate()
        served.wait(timeout=30)


def test_a_hook_that_finds_the_host_gone_restarts_it_and_the_outage_is_recorded(
    repo: Path, two_runs: tuple[Run, Run]
) -> None:
    _a, b = two_runs
    common = str(repo / ".git")
    first = start_host(repo, 1024)
    first.kill()  # SIGKILL: it leaves its liveness record behind
    first.wait(timeout=30)
    try:
        # The hook records by itself, and starts a new host for the next ones.
        _times, failed = time_hooks(b, "alone", 2, env={"SANDBOX_HOOK_AUTOSTART": "1"})
        assert failed == []
        assert wait_until(lambda: wire.Client(common).ping(), timeout=60)
        before = requests_of(common, b)
        _times, failed = time_hooks(b, "again", 2)
        assert failed == []
        assert requests_of(common, b) == before + 2  # the new host answered them
        notes = [e for _oid, e in Run.open(Project(common), b.run_id).events() if e.kind.value == "note"]
        outage = [n.data["host_outage"] for n in notes if "host_outage" in n.data]
        assert len(outage) == 1 and outage[0]["previous_pid"] == first.pid, notes
    finally:
        host.stop_host(common)


def test_the_largest_hook_requests_fit_and_larger_ones_are_recorded_by_the_hook(
    repo: Path, two_runs: tuple[Run, Run]
) -> None:
    """What sizes a hook request: a Write's whole content (the model's output: 32k-128k tokens), in
    its PreToolUse and again, with the old file, in its PostToolUse response (cut before sending).
    128k tokens of CJK text JSON-escaped (6 bytes a character) is the worst case we size for."""
    _a, b = two_runs
    common = str(repo / ".git")
    served = start_host(repo, 1024)
    try:
        sizes = {}
        for name, content in (
            ("ascii_512k", "x = 1  # a line of Python source\n" * 16_000),
            ("cjk_128k_tokens", "漢字仮名交じり文" * 22_000),
        ):
            sizes[name] = _write_hook(b, name, content, served=True, common=common)
        print("\nhook request sizes:", json.dumps(sizes), "limit", wire.MAX_REQUEST)
        assert max(sizes.values()) * 3 < wire.MAX_REQUEST  # room to spare
        # Larger than a host reads: never refused, recorded by the hook in its own process.
        _write_hook(b, "huge", "y" * (wire.MAX_REQUEST + 1024), served=False, common=common, echo=False)
        assert served.poll() is None
    finally:
        served.terminate()
        served.wait(timeout=30)


def _write_hook(run: Run, call: str, content: str, *, served: bool, common: str, echo: bool = True) -> int:
    """A Write's PreToolUse and PostToolUse through ``sandbox hook claude-code``; the start request's size."""
    from sandbox.agent.adapters import claude_code

    target = f"{run.worktree}/{call}.txt"
    pre = payload("Write", "pre", run.worktree, call, tool_input={"file_path": target, "content": content})
    event = claude_code.to_event(pre)
    assert event is not None
    size = len(json.dumps({"v": 1, "op": "hook", "run": run.run_id, "token": "t" * 48, "event": event.to_dict()}))
    before = requests_of(common, run)
    Path(target).write_text(content)
    post = payload("Write", "post", run.worktree, call, tool_input={"file_path": target, "content": content})
    post["tool_response"] = {"type": "update", "filePath": target}
    if echo:  # what Claude Code answers: the content, and the file as it was before
        post["tool_response"].update(content=content, originalFile=content)
    for data in (pre, post):
        proc = subprocess.run(
            [SANDBOX, "hook", "claude-code"], cwd=run.worktree, input=json.dumps(data).encode(), capture_output=True
        )
        assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr.decode()
    assert requests_of(common, run) == before + (2 if served else 0)
    entry = Run.open(Project(common), run.run_id).entry(call)
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == [f"{call}.txt"]
    return size


def test_a_request_trickled_in_is_closed_at_its_deadline_not_kept_alive(repo: Path) -> None:
    """A deadline per request, not per ``recv``: a byte every 0.1 s does not hold a connection."""
    import socket
    import threading

    from sandbox.agent import intake
    from sandbox.agent.host import Host

    served = Host(Project(str(repo / ".git")), limits=intake.Limits(request_deadline=1.0))
    thread = threading.Thread(target=served.serve, kwargs={"idle_exit": 600.0, "tick": 0.1}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: wire.Client(str(repo / ".git")).ping())
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(wire.socket_path(str(repo / ".git")))
        started = time.monotonic()
        closed = None
        try:
            while time.monotonic() - started < 10:
                sock.sendall(b" ")
                time.sleep(0.1)
        except OSError:  # EPIPE / ECONNRESET: the host closed it
            closed = time.monotonic() - started
        finally:
            sock.close()
        assert closed is not None and closed < 5, closed
        assert wire.Client(str(repo / ".git")).ping() is not None
        assert any("within 1 s" in n for n in served.notes), served.notes
    finally:
        served.request_stop()
        thread.join(timeout=30)


def test_a_client_that_asks_again_at_once_finds_room_at_its_cap(repo: Path) -> None:
    """A connection's place is free once its answer is ready: with one place per peer, 300 requests
    in a row from one process (each connecting as soon as the previous answer arrived) are all
    answered. Before, the place was given back after the send, and the next connection raced it."""
    import threading

    from sandbox.agent import intake
    from sandbox.agent.host import Host

    served = Host(Project(str(repo / ".git")), limits=intake.Limits(per_peer=1))
    thread = threading.Thread(target=served.serve, kwargs={"idle_exit": 600.0, "tick": 0.1}, daemon=True)
    thread.start()
    try:
        common = str(repo / ".git")
        wait_until(lambda: wire.Client(common).ping())
        asker = "import sys\nfrom sandbox.agent import wire\nc = wire.Client(sys.argv[1])\n"
        asker += "print(sum(1 for _ in range(300) if c.ping() is None))"
        proc = subprocess.run([sys.executable, "-c", asker, common], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "0"
        assert served.intake.shed == 0
    finally:
        served.request_stop()
        thread.join(timeout=30)
