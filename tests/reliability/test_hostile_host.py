"""Requests a confined agent forges to the repository's host never reach another run or stop it.

One host serves every run of a repository on one path socket, which a confined agent can connect
to (that is how its hooks record). From inside a confined ``sandbox exec`` of run A, a script sends
garbage, an oversized request, a deeply nested JSON document, control operations, run B's id with
A's token and with no token, a hook event naming paths outside the worktree, and holds many idle
connections open. Afterwards the host still answers, run B's ledger and the user's files are
unchanged, and a later exec in each run is recorded through the host.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.run.run import Run
from sandbox.store import layout
from sandbox.store.project import Project
from tests.conftest import alive, sandbox_cmd, tree_digest, user_state, wait_until

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}

FORGER = r"""
import json, os, socket, sys, time
sock_path, token_a, run_a, run_b, wt, token_b_path = sys.argv[1:7]
out = {}

def ask(raw, name, wait=10):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(wait)
    try:
        s.connect(sock_path)
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        out[name] = json.loads(data) if data.strip() else "closed"
    except Exception as exc:
        out[name] = "error: %s" % exc
    finally:
        s.close()

def req(obj):
    return json.dumps(obj).encode() + b"\n"

ask(b"\xff\xfe not json at all\n", "garbage")
ask(b"[" * 200000 + b"]" * 200000, "deep")
ask(b"{" + b'"a":' * 10 + b" " * (25 * 1024 * 1024), "oversized")
ask(req({"v": 1, "op": "stop"}), "stop")
ask(req({"v": 1, "op": "forget", "run": run_a}), "forget")
ask(req({"v": 1, "op": "status"}), "status")
ask(req({"v": 1, "op": "begin", "run": run_b, "token": token_a, "call": "forged"}), "other-run-own-token")
ask(req({"v": 1, "op": "begin", "run": run_b, "call": "forged"}), "other-run-no-token")
ask(req({"v": 1, "op": "begin", "run": "../" + run_b, "token": token_a, "call": "x"}), "run-id-path")
event = {"event": "start", "cwd": wt, "tool": "Write", "call_id": "forged-out", "kind": "write",
         "paths": ["/etc/passwd", "../../outside.txt"], "input": {}}
ask(req({"v": 1, "op": "hook", "run": run_a, "token": token_a, "event": event}), "paths-outside")
try:
    with open(token_b_path) as fh:
        out["read-token-b"] = "read"
except OSError as exc:
    out["read-token-b"] = "refused: %s" % exc.strerror
idle = []
for _ in range(100):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    idle.append(s)
for _ in range(20):  # a full listen backlog (EAGAIN) on a busy machine is retried, as a hook would
    ask(req({"v": 1, "op": "ping"}), "ping-while-idle-held", wait=60)
    if isinstance(out["ping-while-idle-held"], dict):
        break
    time.sleep(1)
print(json.dumps(out))
"""


def test_forged_requests_from_a_confined_agent(repo: Path) -> None:
    runs: list[Run] = []
    project = Project(str(repo / ".git"))
    try:
        for _ in range(2):
            out = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
            runs.append(Run.open(project, out["run"]))
        a, b = runs
        first = sandbox_cmd("exec", a.run_id, "--", "true", cwd=repo, env=AUTOSTART)
        assert first.returncode == 0, first.stderr
        common = project.common_dir
        wait_until(lambda: wire.Client(common).ping())
        pid = host.host_pid(common)
        token_a = wire.run_token(layout.run_dir(common, a.run_id))
        assert token_a is not None
        sandbox_cmd("exec", b.run_id, "--", "sh", "-c", "echo b > b.txt", cwd=repo, env=AUTOSTART)
        ledger_b = Run.open(Project(common), b.run_id).state().head
        entries_b = len(Run.open(Project(common), b.run_id).entries())
        before = (tree_digest(repo), user_state(repo))
        args = [
            wire.socket_path(common),
            token_a,
            a.run_id,
            b.run_id,
            a.worktree,
            os.path.join(layout.run_dir(common, b.run_id), wire.TOKEN),
        ]
        proc = sandbox_cmd(
            "exec", a.run_id, "--", sys.executable, "-c", FORGER, *args, cwd=repo, env=AUTOSTART, timeout=180
        )
        assert proc.returncode == 0, proc.stderr.decode()
        answers = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        for name in ("stop", "forget", "status", "other-run-own-token", "other-run-no-token", "run-id-path"):
            assert isinstance(answers[name], dict) and answers[name]["ok"] is False, (name, answers[name])
        assert answers["garbage"]["ok"] is False
        assert answers["deep"] != "closed" and answers["deep"]["ok"] is False, answers["deep"]  # answered, not dropped
        assert answers["read-token-b"].startswith("refused"), answers["read-token-b"]
        held = answers["ping-while-idle-held"]
        assert isinstance(held, dict) and held["ok"] is True, held
        hooked = answers["paths-outside"]
        assert not (isinstance(hooked, dict) and hooked.get("ok") and hooked.get("decision") != "deny"), hooked
        # The host is the same process and still serves both runs.
        assert host.host_pid(common) == pid and alive(pid)
        assert Run.open(Project(common), b.run_id).state().head == ledger_b
        assert len(Run.open(Project(common), b.run_id).entries()) == entries_b
        assert (tree_digest(repo), user_state(repo)) == before
        for run in runs:
            proc = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo after > after.txt", cwd=repo, env=AUTOSTART)
            assert proc.returncode == 0, proc.stderr.decode()
            assert [f.path for f in Run.open(Project(common), run.run_id).entries()[-1].files] == ["after.txt"]
        assert not Path("/etc/passwd.sandbox").exists()
        assert not (repo.parent / "outside.txt").exists()
    finally:
        for run in runs:
            pid = host.host_pid(run.project.common_dir)
            host.stop_host(run.project.common_dir)
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        for run in runs:
            sandbox_cmd("drop", "--force", run.run_id, cwd=repo)


pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")
