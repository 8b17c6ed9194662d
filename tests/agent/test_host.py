"""The repository's host (one process for every run), its wire protocol and change sources (real processes).

In-process hosts (a :class:`Host` serving from a thread of the test) for the protocol; real
``sandbox serve`` processes, hooks and SIGKILL for sharing, limits and crashes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.agent import host as hostmod
from sandbox.agent import wire
from sandbox.agent.execute import execute
from sandbox.agent.host import Host
from sandbox.fast.inotify import instances_of
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd, wait_until, write
from tests.hook_fixtures import payload, reopen, start_run

# Every kind of change a command can make, on the `repo` fixture's files.
CHANGES = (
    "echo new > created.txt && echo more >> README.md && rm src/util.py && mv src/app.py src/main.py"
    " && chmod +x notes.txt && mkdir -p pkg/sub && echo 1 > pkg/sub/mod.py && echo 2 > pkg/init.py"
    " && ln -s README.md link && echo ignored > trace.log"
)


def files_of(run: Run, call_id: str) -> list[tuple[str, str | None, str | None, int | None, int | None]]:
    """A call's recorded changes, comparable across runs of the same snapshot."""
    return [(f.path, f.before_hash, f.after_hash, f.before_mode, f.after_mode) for f in run.entry(call_id).files]


@pytest.fixture
def run(repo: Path) -> Run:
    return start_run(repo)


def serve_in_thread(common_dir: str, **options: Any) -> tuple[Host, threading.Thread]:
    """A host of the repository in a thread of this process (its own Project: its own repository object)."""
    served = Host(Project(common_dir), **options)
    thread = threading.Thread(target=served.serve, kwargs={"idle_exit": 600.0, "tick": 0.1}, daemon=True)
    thread.start()
    wait_until(lambda: wire.Client(common_dir).ping())
    return served, thread


@pytest.fixture
def served(run: Run) -> Iterator[Host]:
    host, thread = serve_in_thread(run.project.common_dir)
    yield host
    host.request_stop()
    thread.join(timeout=30)


def changes_of(run: Run) -> wire.RunChanges:
    return wire.run_ops(run.project.common_dir, run.run_id, run.dir)


def hook_proc(
    run: Run, tool: str, which: str, call_id: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    data = json.dumps(payload(tool, which, run.worktree, call_id)).encode()
    return sandbox_cmd("hook", "claude-code", cwd=run.worktree, input=data, env=env)


# -- the protocol --------------------------------------------------------------------------------


def test_host_publishes_itself_and_answers(run: Run, served: Host) -> None:
    common = run.project.common_dir
    info = json.loads(Path(wire.host_dir(common), wire.INFO).read_text())
    assert info["pid"] == os.getpid() and info["socket"] == wire.socket_path(common)
    assert os.stat(wire.socket_path(common)).st_mode & 0o777 == 0o600
    assert os.stat(wire.host_dir(common)).st_mode & 0o777 == 0o700
    assert wire.Client(common).ping() == {"ok": True, "pid": os.getpid(), "runs": 0}
    ops = changes_of(run)
    assert ops.end("never-begun") is None
    ops.begin("c1")
    write(Path(run.worktree), "one.txt", "1")
    assert ops.end("c1") == {"one.txt"}
    assert hostmod.host_pid(common) == os.getpid()


def test_a_request_without_the_runs_token_is_refused(run: Run, served: Host) -> None:
    client = wire.Client(run.project.common_dir)
    wire.run_token(run.dir)
    for token in (None, "0" * 48, ""):
        reply = client.request({"op": "begin", "run": run.run_id, "token": token, "call": "c"})
        assert reply is not None and reply["ok"] is False and "token" in reply["error"]
    event = {"event": "start", "cwd": run.worktree, "tool": "Evil", "call_id": "call_evil", "kind": "read"}
    reply = client.request({"op": "hook", "run": run.run_id, "token": "x", "event": event})
    assert reply is not None and reply["ok"] is False
    assert "call_evil" not in reopen(run).state().calls
    assert client.request({"op": "nonsense"}) == {"ok": False, "error": "Unknown operation 'nonsense'."}


def test_exec_through_the_host_and_by_scanning_record_the_same_changes(repo: Path, served: Host) -> None:
    with_host = start_run(repo)
    hosted = execute(with_host, ["sh", "-c", CHANGES])
    assert hosted.source == "host"
    scanned = start_run(repo)
    plain = execute(scanned, ["sh", "-c", CHANGES], use_host=False)
    assert plain.source == "scan"
    expected = files_of(scanned, plain.entry.call_id)
    assert files_of(with_host, hosted.entry.call_id) == expected
    assert {p for p, *_ in expected} >= {"created.txt", "src/util.py", "src/main.py", "pkg/sub/mod.py", "link"}
    local = start_run(repo)
    with_local = execute(local, ["sh", "-c", CHANGES], local_watcher=True, use_host=False)
    assert with_local.source == "watcher"
    assert files_of(local, with_local.entry.call_id) == expected


def test_begin_and_end_from_different_processes(run: Run, served: Host) -> None:
    """As agent hooks do: PreToolUse and PostToolUse are separate short-lived processes."""

    def ask(op: str) -> str:
        code = (
            "import sys\n"
            "from sandbox.agent import wire\n"
            "ops = wire.run_ops(sys.argv[1], sys.argv[2], sys.argv[3])\n"
            "result = getattr(ops, sys.argv[4])('toolu_01')\n"
            "print(sorted(result) if isinstance(result, set) else result)\n"
        )
        args = [sys.executable, "-c", code, run.project.common_dir, run.run_id, run.dir, op]
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()

    assert ask("begin") == "None"
    subprocess.run(["sh", "-c", "echo bash > bash.txt && rm README.md"], cwd=run.worktree, check=True)
    assert ask("end") == "['README.md', 'bash.txt']"
    assert ask("end") == "None"


def test_overlapping_execs_through_one_host_lose_nothing(repo: Path, run: Run, served: Host) -> None:
    script = "for i in 1 2 3 4 5; do echo {tag}$i > {tag}$i.txt; sleep 0.1; done"
    exe = str(Path(sys.executable).parent / "sandbox")
    procs = [
        subprocess.Popen(
            [exe, "exec", run.run_id, "--", "sh", "-c", script.format(tag=tag)], cwd=repo, stderr=subprocess.PIPE
        )
        for tag in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    recorded = [f.path for e in reopen(run).entries() for f in e.files]
    expected = {f"{tag}{i}.txt" for tag in "ab" for i in range(1, 6)}
    assert sorted(recorded) == sorted(expected)  # each change once, none lost


def test_concurrent_requests_in_one_host(run: Run, served: Host) -> None:
    ops = changes_of(run)
    results: dict[str, set[str] | None] = {}

    def one(tag: str) -> None:
        ops.begin(tag)
        write(Path(run.worktree), f"{tag}.txt", tag)
        results[tag] = ops.end(tag)

    threads = [threading.Thread(target=one, args=(f"t{i}",)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 32
    for tag, paths in results.items():
        assert paths is not None and f"{tag}.txt" in paths, (tag, served.intake.shed, served.notes)


def test_host_watches_again_after_losing_events(run: Run, served: Host) -> None:
    ops = changes_of(run)
    ops.begin("spanning")
    tree = served.slot(run.run_id).tree
    assert tree is not None
    tree.lose("simulated loss (a real overflow is tested in tests/fast/test_inotify.py)")
    assert ops.end("spanning") is None  # cannot vouch: the caller scans
    wait_until(lambda: served.slot(run.run_id).tree is not None and served.slot(run.run_id).tree.vouching, 15)  # type: ignore[union-attr]
    ops.begin("later")
    write(Path(run.worktree), "x.txt", "x")
    assert ops.end("later") == {"x.txt"}


def test_garbage_liveness_record_is_ignored(run: Run) -> None:
    common = run.project.common_dir
    os.makedirs(wire.host_dir(common), exist_ok=True)
    Path(wire.host_dir(common), wire.INFO).write_text("{not json")
    assert hostmod.host_pid(common) is None  # no process holds the lock: no host, whatever the file says
    assert wire.Client(common).ping() is None


# -- a host process: stop, SIGKILL, SIGSTOP -------------------------------------------------------


def host_process(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    exe = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.Popen(
        [exe, "serve", "--foreground", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    common = str(repo / ".git")
    wait_until(lambda: wire.Client(common).ping() or proc.poll() is not None)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return proc


def test_host_process_stops_cleanly_on_sigterm(repo: Path, run: Run) -> None:
    proc = host_process(repo)
    common = run.project.common_dir
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and b"stopped: asked to stop" in err
    assert not Path(wire.socket_path(common)).exists() and not Path(wire.host_dir(common), wire.INFO).exists()
    assert wire.Client(common).ping() is None and not wire.host_alive(common)


def test_killed_host_makes_clients_fall_back_to_scan(repo: Path, run: Run) -> None:
    proc = host_process(repo)
    # A long client timeout: a dead host is known from the refused connection, never by waiting it out.
    ops = wire.run_ops(run.project.common_dir, run.run_id, run.dir, timeout=120.0)
    ops.begin("early")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    started = time.monotonic()
    assert ops.end("early") is None  # never raising
    assert time.monotonic() - started < 120.0  # did not wait for the timeout (not a speed bound)
    assert Path(wire.socket_path(run.project.common_dir)).exists()  # left behind, recognised as dead
    assert not wire.host_alive(run.project.common_dir)
    done = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo after > after.txt && rm src/util.py", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert [f.path for f in reopen(run).entries()[-1].files] == ["after.txt", "src/util.py"]
    again = host_process(repo)  # a new host binds over the stale socket
    try:
        assert wire.Client(run.project.common_dir).ping() is not None
    finally:
        again.kill()
        again.wait()


def test_host_killed_during_a_call_still_records_it(repo: Path, run: Run) -> None:
    proc = host_process(repo)
    script = f"echo during > during.txt && kill -9 {proc.pid} && sleep 0.2 && echo late > late.txt"
    outcome = execute(run, ["sh", "-c", script])
    proc.wait()
    assert outcome.source == "scan"
    assert [f.path for f in outcome.entry.files] == ["during.txt", "late.txt"]


def test_host_killed_after_recording_before_answering(repo: Path, run: Run) -> None:
    """SIGKILL between the host's ledger write and its reply: the hook records again, idempotently."""
    proc = host_process(repo, env={"SANDBOX_FAULT": "host.after_record"})
    first = hook_proc(run, "Bash", "pre", "toolu_k1")
    assert first.returncode == 0, first.stderr
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    write(Path(run.worktree), "made.txt", "made\n")
    second = hook_proc(run, "Bash", "post", "toolu_k1")
    assert second.returncode == 0, second.stderr
    state = reopen(run)
    entry = state.entry("toolu_k1")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["made.txt"]
    assert list(state.state().calls) == ["toolu_k1"]  # asked twice, one call (a repeated start is allowed)


def test_hung_host_costs_at_most_the_client_timeout(repo: Path, run: Run) -> None:
    proc = host_process(repo)
    try:
        proc.send_signal(signal.SIGSTOP)
        ops = wire.run_ops(run.project.common_dir, run.run_id, run.dir, timeout=0.3)
        started = time.monotonic()
        assert ops.end("c") is None  # the client gave up: the caller scans instead
        # It waited for the stopped host (its timeout), and then stopped waiting: bounded, not hung.
        # The upper bound is 100 times the timeout, a liveness check, not a speed bound.
        assert 0.3 <= time.monotonic() - started < 30.0
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


# -- many runs, one host; limits ------------------------------------------------------------------


def holders_of(path: str) -> list[int]:
    """The processes holding ``path`` open, from /proc."""
    out = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                    out.append(int(pid))
                    break
        except OSError:
            continue
    return out


def test_twenty_runs_share_one_host_one_inotify_instance(repo: Path) -> None:
    runs = [start_run(repo) for _ in range(21)]
    common = runs[0].project.common_dir
    env = {"SANDBOX_HOOK_AUTOSTART": "1"}
    try:
        for i, run in enumerate(runs):
            done = hook_proc(run, "Bash", "pre", f"toolu_many{i}", env=env)
            assert done.returncode == 0, done.stderr
            if i == 0:
                wait_until(lambda: wire.Client(common).ping())
        for i, run in enumerate(runs):
            write(Path(run.worktree), f"out{i}.txt", f"{i}\n")
            done = hook_proc(run, "Bash", "post", f"toolu_many{i}", env=env)
            assert done.returncode == 0, done.stderr
        hosts = holders_of(os.path.realpath(os.path.join(wire.host_dir(common), wire.LOCK)))
        assert len(hosts) == 1, hosts
        instances, watches = instances_of(hosts[0])
        assert instances == 1
        status = wire.status(common)
        assert status is not None and status["pid"] == hosts[0]
        assert sorted(status["runs"]) == sorted(r.run_id for r in runs)
        assert all(r["watched"] for r in status["runs"].values())
        assert status["inotify"]["watches"] == watches
        for i, run in enumerate(runs[1:], start=1):  # the first call ran before the host: a scan
            assert [f.path for f in reopen(run).entry(f"toolu_many{i}").files] == [f"out{i}.txt"]
    finally:
        hostmod.stop_host(common)


def test_runs_beyond_the_limit_are_scanned_and_the_hook_says_so(repo: Path) -> None:
    watched, scanned = start_run(repo), start_run(repo)
    common = watched.project.common_dir
    proc = host_process(repo, "--max-runs-watched", "1")
    try:
        first = hook_proc(watched, "Bash", "pre", "toolu_w")
        assert first.returncode == 0 and b"note:" not in first.stderr
        pre = hook_proc(scanned, "Bash", "pre", "toolu_s")
        assert pre.returncode == 0
        assert pre.stderr.decode().strip() == (
            "sandbox: note: the host watches 1 runs already (its limit); this run's changes are found by scanning"
        )
        write(Path(scanned.worktree), "scanned.txt", "found by a scan\n")
        post = hook_proc(scanned, "Bash", "post", "toolu_s")
        assert post.returncode == 0 and post.stderr == b""  # said once
        assert [f.path for f in reopen(scanned).entry("toolu_s").files] == ["scanned.txt"]
        status = wire.status(common)
        assert status is not None
        assert status["runs"][watched.run_id]["watched"] is True
        assert status["runs"][scanned.run_id]["watched"] is False
        assert "its limit" in status["runs"][scanned.run_id]["note"]
        shown = sandbox_cmd("status", scanned.run_id, cwd=repo).stdout.decode()
        assert f"host:      pid {proc.pid}; this run's changes are found by scanning (the host watches 1" in shown
        shown = sandbox_cmd("status", watched.run_id, cwd=repo).stdout.decode()
        assert f"host:      pid {proc.pid}; this run's changes come from its watcher" in shown
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_watch_budget_too_small_for_the_tree_falls_back_to_scanning(run: Run) -> None:
    host, thread = serve_in_thread(run.project.common_dir, max_watches=1)  # the worktree has 2 directories
    try:
        ops = changes_of(run)
        ops.begin("c")
        write(Path(run.worktree), "src/new.py", "x = 2\n")
        assert ops.end("c") is None
        status = host.status()
        assert status["runs"][run.run_id]["watched"] is False
        assert "watch budget (1) is used up" in status["runs"][run.run_id]["note"]
        assert status["inotify"]["watches"] == 0  # a tree that does not fit holds none
        outcome = execute(run, ["sh", "-c", "echo y > y.txt"])
        assert outcome.source == "scan" and [f.path for f in outcome.entry.files] == ["src/new.py", "y.txt"]
    finally:
        host.request_stop()
        thread.join(timeout=30)


def test_a_quiet_host_seals_what_it_recorded_so_status_reads_without_git(run: Run, served: Host) -> None:
    from sandbox.fast import foldcache

    def fast_state() -> dict[str, Any] | None:
        try:
            return foldcache.Repository(run.project.common_dir).state(run.run_id)
        except foldcache.Miss:
            return None

    run.seal_cache()
    assert fast_state() is not None
    assert hook_proc(run, "Bash", "pre", "toolu_seal").returncode == 0
    write(Path(run.worktree), "sealed.txt", "by the agent\n")
    assert hook_proc(run, "Bash", "post", "toolu_seal").returncode == 0
    # Recorded by the host, every 16 events only; once no request came for a second, it is sealed.
    state = wait_until(lambda: (s := fast_state()) is not None and "toolu_seal" in s["calls"] and s)
    assert state["calls"]["toolu_seal"]["status"] == "succeeded"
    assert [f["path"] for f in state["calls"]["toolu_seal"]["files"]] == ["sealed.txt"]


def test_asking_a_repository_without_a_host_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """The checked connect opens the socket's directory first; when no socket is there (no host runs) it
    closes it again. A long-lived process (the MCP server, a host, `sandbox run`) asks often: it held one
    more descriptor per question, and a pytest worker reached descriptor numbers above 1024."""
    folder = tmp_path / "sandbox"
    folder.mkdir(mode=0o700)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        with pytest.raises(FileNotFoundError):
            wire.connect(str(folder / "sock"), 0.1, checked=True)
    assert len(os.listdir("/proc/self/fd")) <= before
