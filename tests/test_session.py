"""The per-run watcher service and its clients, and `sandbox exec` with and without it (real processes)."""

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

import pytest

from sandbox.agent import session
from sandbox.agent.execute import execute
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd, write

# Every kind of change a command can make, on the `repo` fixture's files.
CHANGES = (
    "echo new > created.txt && echo more >> README.md && rm src/util.py && mv src/app.py src/main.py"
    " && chmod +x notes.txt && mkdir -p pkg/sub && echo 1 > pkg/sub/mod.py && echo 2 > pkg/init.py"
    " && ln -s README.md link && echo ignored > trace.log"
)


def start_run(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def files_of(run: Run, call_id: str) -> list[tuple[str, str | None, str | None, int | None, int | None]]:
    """A call's recorded changes, comparable across runs of the same snapshot."""
    return [(f.path, f.before_hash, f.after_hash, f.before_mode, f.after_mode) for f in run.entry(call_id).files]


@pytest.fixture
def run(repo: Path) -> Run:
    return start_run(repo)


@pytest.fixture
def service(run: Run) -> Iterator[session.Service]:
    with session.serve(run) as svc:
        yield svc


def test_service_publishes_itself_and_answers(run: Run, service: session.Service) -> None:
    info = json.loads(Path(run.dir, session.SESSION_FILE).read_text())
    assert info["pid"] == os.getpid() and info["socket"] == session.socket_name(run.dir)
    client = session.client_for(run)
    assert client is not None
    assert client.ping() == {"ok": True, "service_id": service.service_id, "pid": os.getpid(), "vouching": True}
    assert client.end("never-begun") is None
    assert client.begin("c1") is not None
    subprocess.run(["sh", "-c", "echo x > a.txt && mkdir d && echo y > d/b.txt"], cwd=run.worktree, check=True)
    assert {"a.txt", "d/b.txt"} <= (client.end("c1") or set())
    assert client.end("c1") is None  # a call ends once


def test_stop_removes_session_file_and_a_second_service_is_refused(run: Run) -> None:
    with session.serve(run), pytest.raises(session.SessionBusyError):
        session.serve(run)
    assert not Path(run.dir, session.SESSION_FILE).exists()
    assert session.client_for(run) is None


def test_exec_with_and_without_session_records_the_same_changes(repo: Path, tmp_path: Path) -> None:
    plain = start_run(repo)
    watched = start_run(repo)
    assert plain.repo[plain.base].tree_id == watched.repo[watched.base].tree_id
    without = execute(plain, ["sh", "-c", CHANGES])
    assert without.source == "scan"
    with session.serve(watched):
        with_session = execute(watched, ["sh", "-c", CHANGES])
    assert with_session.source == "session"
    expected = files_of(plain, without.entry.call_id)
    assert {f[0] for f in expected} == {
        "created.txt",
        "README.md",
        "src/util.py",
        "src/app.py",
        "src/main.py",
        "notes.txt",
        "pkg/sub/mod.py",
        "pkg/init.py",
        "link",
    }
    assert files_of(watched, with_session.entry.call_id) == expected
    local = start_run(repo)
    with_local = execute(local, ["sh", "-c", CHANGES], local_watcher=True)
    assert with_local.source == "watcher"
    assert files_of(local, with_local.entry.call_id) == expected


def test_begin_and_end_from_different_processes(run: Run, service: session.Service) -> None:
    """As agent hooks do: PreToolUse and PostToolUse are separate short-lived processes."""

    def hook(op: str) -> str:
        code = (
            "import sys\n"
            "from sandbox.agent import session\n"
            "client = session.client_for(sys.argv[1])\n"
            "result = getattr(client, sys.argv[2])('toolu_01')\n"
            "print(sorted(result) if isinstance(result, set) else result)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code, run.dir, op], capture_output=True, text=True, check=True)
        return proc.stdout.strip()

    assert hook("begin").startswith(service.service_id)
    subprocess.run(["sh", "-c", "echo bash > bash.txt && rm README.md"], cwd=run.worktree, check=True)
    assert hook("end") == "['README.md', 'bash.txt']"
    assert hook("end") == "None"


def test_cli_exec_uses_a_live_session(repo: Path, run: Run, service: session.Service) -> None:
    proc = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo cli > cli.txt", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entry = run.entries()[-1]
    assert [f.path for f in entry.files] == ["cli.txt"]
    assert service.counts["vouched"] == 1


def test_overlapping_calls_through_one_session_lose_nothing(repo: Path, run: Run, service: session.Service) -> None:
    script = "for i in 1 2 3 4 5; do echo {tag}$i > {tag}$i.txt; sleep 0.1; done"
    procs = [
        subprocess.Popen(
            [
                str(Path(sys.executable).parent / "sandbox"),
                "exec",
                run.run_id,
                "--",
                "sh",
                "-c",
                script.format(tag=tag),
            ],
            cwd=repo,
            stderr=subprocess.PIPE,
        )
        for tag in ("a", "b")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert service.counts["vouched"] == 2
    recorded = [f.path for e in run.entries() for f in e.files]
    expected = {f"{tag}{i}.txt" for tag in "ab" for i in range(1, 6)}
    assert sorted(recorded) == sorted(expected)  # each change once, none lost
    head_tree = run.repo[run.head()].tree
    assert {e.name for e in head_tree} >= expected


def _service_process(run: Run) -> subprocess.Popen[bytes]:
    code = (
        "import signal, sys\n"
        "from sandbox.store.project import Project\n"
        "from sandbox.run.run import Run\n"
        "from sandbox.agent import session\n"
        "project, _, _ = Project.discover(sys.argv[1])\n"
        "svc = session.serve(Run.open(project, sys.argv[2]))\n"
        "signal.signal(signal.SIGTERM, lambda *_: svc.request_stop())\n"
        "print('ready', flush=True)\n"
        "svc.serve_forever()\n"
        "print('stopped', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, run.worktree, run.run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n", proc.stderr.read() if proc.stderr else ""
    return proc


def test_service_process_stops_cleanly_on_sigterm(run: Run) -> None:
    proc = _service_process(run)
    client = session.client_for(run)
    assert client is not None and client.ping() is not None
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert out == b"stopped\n" and proc.returncode == 0
    assert not Path(run.dir, session.SESSION_FILE).exists()
    assert client.ping() is None


def test_killed_service_makes_clients_fall_back_to_scan(repo: Path, run: Run) -> None:
    proc = _service_process(run)
    client = session.client_for(run)
    assert client is not None and client.begin("early") is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # A client made before the death answers None at once, never raising.
    started = time.monotonic()
    assert client.begin("c") is None and client.end("early") is None
    assert time.monotonic() - started < 1.0
    assert Path(run.dir, session.SESSION_FILE).exists()  # left behind, but recognised as dead
    assert session.client_for(run) is None
    proc2 = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo after > after.txt && rm src/util.py", cwd=repo)
    assert proc2.returncode == 0, proc2.stderr
    assert [f.path for f in run.entries()[-1].files] == ["after.txt", "src/util.py"]


def test_service_killed_during_a_call_still_records_it(run: Run) -> None:
    proc = _service_process(run)
    script = f"echo during > during.txt && kill -9 {proc.pid} && sleep 0.2 && echo late > late.txt"
    outcome = execute(run, ["sh", "-c", script])
    proc.wait()
    assert outcome.source == "scan"
    assert [f.path for f in outcome.entry.files] == ["during.txt", "late.txt"]


def test_hung_service_costs_at_most_the_client_timeout(run: Run) -> None:
    proc = _service_process(run)
    try:
        proc.send_signal(signal.SIGSTOP)
        client = session.client_for(run, timeout=0.3, end_timeout=0.3)
        assert client is not None
        started = time.monotonic()
        assert client.begin("c") is None
        assert time.monotonic() - started < 2.0
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_service_restarts_its_watcher_after_losing_events(run: Run, service: session.Service) -> None:
    client = session.client_for(run)
    assert client is not None
    client.begin("spanning")
    service.watcher._lose("simulated loss (the overflow path is tested with a real overflow in test_watcher)")
    assert client.end("spanning") is None
    deadline = time.monotonic() + 15
    while not (service.restarts and service.watcher.vouching) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.watcher.vouching
    client.begin("later")
    write(Path(run.worktree), "x.txt", "x")
    assert client.end("later") == {"x.txt"}


def test_client_for_ignores_garbage_session_files(run: Run) -> None:
    path = Path(run.dir, session.SESSION_FILE)
    path.write_text("{not json")
    assert session.client_for(run) is None
    path.write_text(json.dumps({"version": 99, "service_id": "x", "pid": os.getpid(), "socket": "@x", "worktree": "/"}))
    assert session.client_for(run) is None


def test_concurrent_requests_in_one_service(run: Run, service: session.Service) -> None:
    client = session.client_for(run)
    assert client is not None
    results: dict[str, set[str] | None] = {}

    def one(tag: str) -> None:
        begun = client.begin(tag)
        write(Path(run.worktree), f"{tag}.txt", tag)
        results[tag] = client.end(tag) if begun else None

    threads = [threading.Thread(target=one, args=(f"t{i}",)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 32
    for tag, paths in results.items():
        assert paths is not None and f"{tag}.txt" in paths
