"""``sandbox run``'s early start (:mod:`sandbox.agent.early`): what happens before the run is opened."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandbox.agent.early import DeferredRefusals
from sandbox.confine.proxy import Allowlist, NetProxy, Refusal
from sandbox.run.run import Run
from sandbox.store.project import Project


def refusal(port: int) -> Refusal:
    return Refusal("example.com", port, datetime.datetime.now(datetime.timezone.utc), "CONNECT")


def test_refusals_before_the_run_is_open_are_kept_and_handed_on_in_order() -> None:
    deferred = DeferredRefusals()
    deferred(refusal(1))
    deferred(refusal(2))
    seen: list[int] = []
    deferred.attach(lambda r: seen.append(r.port))
    assert seen == [1, 2]
    deferred(refusal(3))
    assert seen == [1, 2, 3]


def test_a_named_run_started_early_records_its_session_as_before(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.seal_cache()  # as 'sandbox start' leaves it: 'sandbox run RUN' takes the early start
    script = str(Path(sys.executable).parent / "sandbox")
    agent = ["sh", "-c", "echo early > early.txt; exit 3"]
    proc = subprocess.run(
        [script, "run", run.run_id, "--hooks", "none", "--", *agent],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr.decode()
    assert "1 call(s) recorded in this session" in proc.stderr.decode()
    again = Run.open(Project(project.common_dir), run.run_id)
    notes = again.state().data.note
    assert [n["agent_command"] for n in notes if "agent_command" in n] == [agent]
    assert [n["session"] for n in notes if "isolation" in n] == ["sandbox run"]
    entries = again.entries()
    assert [e.tool_name for e in entries] == ["agent_session"]
    assert "early.txt" in json.dumps(entries[0].model_dump(mode="json"))


def test_a_connection_made_before_the_proxy_serves_waits_and_is_answered(tmp_path: Path) -> None:
    # sandbox run binds the allowlist proxy's socket before the agent starts and serves it (imports
    # asyncio) after: an agent that connects in between waits in the backlog, it is not refused.
    path = str(tmp_path / "net.sock")
    proxy = NetProxy(path, Allowlist([])).listen()
    try:
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(10)
        client.connect(path)  # accepted by the kernel, nobody reads yet
        client.sendall(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        answered = threading.Event()
        reply: list[bytes] = []

        def read() -> None:
            reply.append(client.recv(65536))
            answered.set()

        threading.Thread(target=read, daemon=True).start()
        assert not answered.wait(0.3)  # not served yet
        proxy.serve()
        assert answered.wait(10)
        assert reply[0].startswith(b"HTTP/1.1 403")
        client.close()
    finally:
        proxy.stop()
    assert not os.path.exists(path)


def test_a_proxy_listened_but_never_served_is_cleaned_up(tmp_path: Path) -> None:
    path = str(tmp_path / "net.sock")
    proxy = NetProxy(path, Allowlist([])).listen()
    assert os.path.exists(path)
    proxy.stop()
    assert not os.path.exists(path)


def test_what_the_sandbox_sets_reaches_an_agent_started_early_whatever_it_is_called(repo: Path) -> None:
    # Claude Code's home in the run (CLAUDE_CONFIG_DIR) is the sandbox's own setting: it passes the
    # confined environment's allowlist although the agent is started as 'sh', whose family has no
    # CLAUDE_* names (own_env), and the run's id and session token come with it.
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.seal_cache()
    script = str(Path(sys.executable).parent / "sandbox")
    agent = ["sh", "-c", 'printf "%s %s %s" "$SANDBOX_RUN" "$SANDBOX_SESSION" "$CLAUDE_CONFIG_DIR" > seen.txt']
    proc = subprocess.run(
        [script, "run", run.run_id, "--hooks", "claude-code", "--", *agent],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    seen = (Path(run.worktree) / "seen.txt").read_text().split()
    assert seen[0] == run.run_id and len(seen[1]) == 32
    assert len(seen) == 3 and os.path.isdir(seen[2])  # the run's home for Claude Code, not unset


def test_the_run_is_opened_beside_the_agent_at_a_lower_priority_in_its_own_thread() -> None:
    from sandbox.agent.early import YIELD_NICE, yielding

    def nice_here() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = nice_here()
    if sys.platform.startswith("linux"):
        assert yielding(nice_here) == min(mine + YIELD_NICE, 19)  # only that thread yields to the agent
    assert nice_here() == mine  # the caller (signals, the session) keeps its priority

    def fails() -> None:
        raise ValueError("no run")

    with pytest.raises(ValueError, match="no run"):  # the work's error reaches the caller
        yielding(fails)


def test_an_agent_seen_ended_while_the_run_opens_keeps_its_exit_status(tmp_path: Path) -> None:
    from sandbox.agent.early import DeferredRefusals, Started, Where

    where = Where(str(tmp_path), "r", str(tmp_path), str(tmp_path), None, legacy=False)
    started = Started(where, "t" * 32, None, False, None, None, None, DeferredRefusals())
    started.proc = subprocess.Popen(["sh", "-c", "exit 7"])
    for _ in range(400):
        started.look()
        if started.ended_at is not None:
            break
        threading.Event().wait(0.01)
    assert started.ended_at is not None  # when it ended is known: a Ctrl-C before it is judged against it
    assert started.wait() == 7  # the status was only looked at, not taken


def test_a_refusal_recorded_late_names_the_call_that_ran_when_it_was_refused(repo: Path) -> None:
    # A connection refused while 'sandbox run' was still opening the run is recorded once it is open,
    # maybe after the call that made it finished: it still names that call, by the time it was refused.
    from sandbox.agent import netrecord
    from sandbox.models import CallStatus

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    call = run.start_call("Bash", {"command": "curl"}, idempotency="conditional", replay="ask")
    during = datetime.datetime.now(datetime.timezone.utc)
    run.finish_call(call, CallStatus.succeeded, paths=[])
    after = datetime.datetime.now(datetime.timezone.utc)
    record = netrecord.recorder(run, "s" * 32)
    record(Refusal("example.com", 1, during, "CONNECT"))
    record(Refusal("example.com", 2, after, "CONNECT"))
    seen = [n["network_refused"] for n in Run.open(project, run.run_id).state().data.note if "network_refused" in n]
    assert [(r["port"], r["call_id"]) for r in seen] == [(1, call), (2, None)]
