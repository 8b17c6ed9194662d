"""The attack of issue 32 from inside real bubblewrap, against the host every run shares.

A confined ``sandbox run`` session of run A swaps, in a loop (``renameat2(RENAME_EXCHANGE)``), a file with a
symlink to a secret outside and another file with a FIFO, while it sends the host forged Write
events naming both (the run's token is visible inside). Meanwhile run B records its own calls through
the same host. The host never hashes the secret (it did: lstat, then open by name, which followed the
link) and never blocks (it did, on the FIFO, holding the one recording lock: every run hung).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from sandbox.agent import host, wire
from sandbox.store import layout
from tests.conftest import alive, sandbox_cmd, wait_until

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed")

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- the user's, not the agent's\n"

ATTACK = r"""
import ctypes, json, os, socket, sys, time
sock_path, token, run_id, wt, secret, seconds = sys.argv[1:7]
os.chdir(wt)
with open("a.txt", "w") as fh:
    fh.write("changed\n")
with open("b.txt", "w") as fh:
    fh.write("changed\n")
os.symlink(secret, "link")
os.mkfifo("fifo")
pid = os.fork()
if pid == 0:  # the racer
    libc = ctypes.CDLL(None, use_errno=True)
    while True:
        libc.renameat2(-100, b"a.txt", -100, b"link", 2)
        libc.renameat2(-100, b"b.txt", -100, b"fifo", 2)

def short(path):
    if len(path) < 100:
        return path
    return "/proc/self/fd/%d/%s" % (os.open(os.path.dirname(path), os.O_PATH), os.path.basename(path))

def ask(event):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    try:
        s.connect(short(sock_path))
        s.sendall(json.dumps({"v": 1, "op": "hook", "run": run_id, "token": token, "event": event}).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return json.loads(data)
    except Exception as exc:
        return "error: %s" % exc
    finally:
        s.close()

answers = []
until = time.monotonic() + float(seconds)
i = 0
while time.monotonic() < until:
    i += 1
    base = {"cwd": wt, "tool": "Write", "call_id": "forged-%d" % i, "kind": "write",
            "paths": ["a.txt", "b.txt", "link", "fifo"], "input": {"file_path": "a.txt"}}
    for phase in ("start", "finish"):
        answers.append(ask({**base, "event": phase}))
os.kill(pid, 9)
os.waitpid(pid, 0)
recorded = sum(1 for a in answers if isinstance(a, dict) and a.get("ok"))
print(json.dumps({"rounds": i, "recorded": recorded, "errors": [a for a in answers if isinstance(a, str)]}))
"""


def test_a_racing_agent_never_gets_a_secret_hashed_nor_blocks_another_run(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET)
    runs = [json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout) for _ in range(2)]
    (a, wt_a), (b, _wt_b) = ((r["run"], r["worktree"]) for r in runs)
    common = str(repo / ".git")
    try:
        assert sandbox_cmd("exec", a, "--", "true", cwd=repo, env=AUTOSTART).returncode == 0
        wait_until(lambda: wire.Client(common).ping())
        pid = host.host_pid(common)
        token = wire.run_token(layout.run_dir(common, a))
        assert token is not None
        args = [wire.socket_path(common), token, a, wt_a, str(secret), "8"]
        exe = str(Path(sys.executable).parent / "sandbox")
        attack = subprocess.Popen(
            # A session's process, as a hostile agent's own command is: the host refuses payloads sent
            # from inside a call (issue 33), so from an exec's command it would read nothing at all.
            [exe, "run", a, "--hooks", "none", "--", sys.executable, "-c", ATTACK, *args],
            cwd=repo,
            env={**os.environ, **AUTOSTART},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(2)
            for i in range(3):  # run B's calls go through the same host while A attacks it
                started = time.monotonic()
                proc = sandbox_cmd(
                    "exec", b, "--", "sh", "-c", f"echo {i} >> b.txt", cwd=repo, env=AUTOSTART, timeout=30
                )
                assert proc.returncode == 0, proc.stderr.decode()
                assert time.monotonic() - started < 20
            out, err = attack.communicate(timeout=120)
        finally:
            if attack.poll() is None:
                attack.kill()
                attack.wait()
        assert attack.returncode == 0, err.decode()
        report = json.loads(out.decode().strip().splitlines()[-1])
        assert report["rounds"] > 5 and report["errors"] == [], report
        assert report["recorded"] > 0, report  # the host did read the racing files, not refuse them unread
        oid = str(pygit2.hash(SECRET))
        for where in (str(repo), wt_a):
            found = subprocess.run(["git", "-C", where, "cat-file", "-e", oid], capture_output=True, check=False)
            assert found.returncode != 0, f"the secret was hashed into {where}"
        assert host.host_pid(common) == pid and alive(pid)
    finally:
        pid = host.host_pid(common)
        host.stop_host(common)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
