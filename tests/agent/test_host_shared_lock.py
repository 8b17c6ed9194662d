"""One run's files never cost another run's calls (issue 32, item 2).

The host records every run under one lock (the runs share its repository object). Reading the
agent's files happens outside it, under the run's own lock (sandbox.store.preread): run A's
forged Write naming eight 4 GiB sparse files takes its call seconds per file (each hashed up to its
budget, then refused by size), while run B's ``sandbox exec -- true``, its first request to the
host, finishes meanwhile. Before, B's request waited for the shared lock until A's call was done.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

from sandbox.agent import host, wire
from sandbox.store import agentread, layout
from tests.conftest import alive, sandbox_cmd, scaled, wait_until

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}
FILES = 8


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
        assert ask(common, a, token, {**base, "event": "start", "input": {"file_path": names[0]}})["ok"]
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
