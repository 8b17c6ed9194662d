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

from sandbox.agent.early import DeferredRefusals
from sandbox.agent.netproxy import Allowlist, NetProxy, Refusal
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
