"""One run's files never cost another run's calls (issue 32, item 2).

The host records every run under one lock (the runs share its repository object). Reading the
agent's files happens outside it, under the run's own lock (sandbox.store.preread): run A's
forged Write naming five 4 GiB sparse files takes its call seconds per file (each hashed up to its
budget, then refused by size), while run B's ``sandbox exec -- true``, its first request to the
host, finishes meanwhile. Before, B's request waited for the shared lock until A's call was done.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox.agent import host, wire
from sandbox.store import agentread, layout
from tests.conftest import alive, sandbox_cmd, scaled, wait_until

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}
ROOT = Path(__file__).resolve().parents[2]
FILES = 5  # A reads for FILES x HASH_BUDGET (10 s): B's exec, under 2 s even on a loaded machine, ends well within


def ask(common: str, run_id: str, token: str, event: dict[str, object]) -> dict[str, object]:
    """Send one hook event to the host as a hook process would (the token is visible to the agent)."""
    path = wire.socket_path(common)
    fd = os.open(os.path.dirname(path), os.O_PATH)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(scaled(120))
    try:
        s.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")  # a long temporary path
        request = {"v": 1, "op": "hook", "run": run_id, "token": token, "event": event}
        s.sendall(json.dumps(request).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        reply: dict[str, object] = json.loads(data)
        return reply
    finally:
        s.close()
        os.close(fd)


def test_a_runs_huge_files_never_hold_up_another_runs_exec(repo: Path) -> None:
    runs = [json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout) for _ in range(2)]
    (a, wt_a), (b, _wt_b) = ((r["run"], r["worktree"]) for r in runs)
    common = str(repo / ".git")
    try:
        assert sandbox_cmd("exec", a, "--", "true", cwd=repo, env=AUTOSTART).returncode == 0
        wait_until(lambda: wire.Client(common).ping())
        pid = host.host_pid(common)
        names = [f"big{i}.bin" for i in range(FILES)]
        for name in names:  # what a confined agent can make: no disk, no memory inside
            with open(os.path.join(wt_a, name), "wb") as fh:
                fh.truncate(4 << 30)
        token = wire.run_token(layout.run_dir(common, a))
        assert token is not None
        base = {"cwd": wt_a, "tool": "Write", "call_id": "forged-1", "kind": "write", "paths": names}
        # The start from a process of its own that ends, as a hook's does: the host holds a call's
        # starter, and B's exec (this process's child) must not count as sent from inside A's call.
        start = {**base, "event": "start", "input": {"file_path": names[0]}}
        code = (
            "import json, sys; from tests.agent.test_host_shared_lock import ask; "
            "print(json.dumps(ask(*json.loads(sys.argv[1]))))"
        )
        sent = subprocess.run(
            [sys.executable, "-c", code, json.dumps([common, a, token, start])],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},  # as pytest's rootdir gives them
            capture_output=True,
            timeout=scaled(60),
            check=True,
        )
        assert json.loads(sent.stdout)["ok"], sent.stdout
        replies: list[tuple[float, dict[str, object]]] = []

        def finish() -> None:
            reply = ask(common, a, token, {**base, "event": "finish", "input": {"file_path": names[0]}})
            replies.append((time.monotonic(), reply))

        thread = threading.Thread(target=finish)
        thread.start()
        time.sleep(0.5)  # A's finish is being recorded: its files take FILES x the hash budget to read
        proc = sandbox_cmd("exec", b, "--", "true", cwd=repo, env=AUTOSTART, timeout=scaled(120))
        b_done = time.monotonic()
        assert proc.returncode == 0, proc.stderr.decode()
        thread.join(scaled(240))
        assert not thread.is_alive()
        ((a_done, reply),) = replies
        assert b_done < a_done, "run B's exec waited for run A's recording"
        assert reply["ok"] is False and "max_read_size" in str(reply["message"]), reply
        assert a_done - b_done > agentread.HASH_BUDGET  # A was still reading its files when B was done
        calls = json.loads(sandbox_cmd("log", a, "--json", cwd=repo).stdout)
        forged = [c for c in calls if "forged-1" in json.dumps(c)]
        assert forged and all("failed" in json.dumps(c) for c in forged), forged
        assert host.host_pid(common) == pid and alive(pid)
    finally:
        pid = host.host_pid(common)
        host.stop_host(common)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_payload_from_inside_a_call_while_its_run_reads_never_hangs_the_host(repo: Path) -> None:
    """The host refuses a payload sent from inside a running call (issue 33). Sent while that call's
    run reads its files with the shared lock let go, the refusal took the shared lock, then waited
    for the run's ledger lock: the reading call never got the shared lock back, and the host hung."""
    (a, wt_a) = (lambda r: (r["run"], r["worktree"]))(json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout))
    common = str(repo / ".git")
    try:
        assert sandbox_cmd("exec", a, "--", "true", cwd=repo, env=AUTOSTART).returncode == 0
        wait_until(lambda: wire.Client(common).ping())
        names = [f"big{i}.bin" for i in range(2)]
        for name in names:
            with open(os.path.join(wt_a, name), "wb") as fh:
                fh.truncate(4 << 30)
        token = wire.run_token(layout.run_dir(common, a))
        assert token is not None
        base = {"cwd": wt_a, "tool": "Write", "call_id": "forged-2", "kind": "write", "paths": names}
        # Started from this process: its children are inside the call from now on.
        assert ask(common, a, token, {**base, "event": "start", "input": {"file_path": names[0]}})["ok"]
        replies: list[dict[str, object]] = []
        thread = threading.Thread(
            target=lambda: replies.append(ask(common, a, token, {**base, "event": "finish", "input": {}}))
        )
        thread.start()
        time.sleep(0.5)  # the finish reads its files, the shared lock let go
        inner = {**base, "call_id": "forged-3", "event": "start", "input": {"file_path": "x"}}
        code = (
            "import json, sys; from tests.agent.test_host_shared_lock import ask; "
            "print(json.dumps(ask(*json.loads(sys.argv[1]))))"
        )
        sent = subprocess.run(
            [sys.executable, "-c", code, json.dumps([common, a, token, inner])],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
            capture_output=True,
            timeout=scaled(120),
            check=True,
        )
        assert json.loads(sent.stdout)["ok"] is False, sent.stdout  # refused: sent from inside forged-2
        thread.join(scaled(120))
        assert not thread.is_alive() and replies, "the host hung"
    finally:
        host.stop_host(common)
