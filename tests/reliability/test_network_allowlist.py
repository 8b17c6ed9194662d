"""``sandbox run``'s network by allowlist: an agent reaches only the hosts allowed, through the run's proxy.

Two scripted HTTP servers listen on two loopback ports outside. The run's settings allow the first
one; an agent (the fake Claude Code, whose Bash tool call is recorded through its hooks) tries both,
by plain HTTP and by ``CONNECT``, through the proxy variables and around them. The allowed one
answers; the other is refused, never reached, and each refusal is in the ledger against the call
that was running (or the session, between calls), shown by ``sandbox log`` and ``status --json``.
``--network on`` reaches both directly; ``--network off`` reaches nothing; the proxy dies with the run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import scaled, wait_until, write

from sandbox.agent import host
from sandbox.confine.policy import PROXY_SOCKET

from .helpers import SANDBOX_EXE, open_run, sb

FIXTURES_AGENT = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "fake_claude.py"

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make venv installs it)"
)

#: Inside the sandbox: every way to reach the two servers, each reported as what came back.
PROBE = r"""
import json, os, socket, sys, urllib.request
allowed, refused = int(sys.argv[1]), int(sys.argv[2])
out = {"proxy": os.environ.get("HTTPS_PROXY"), "no_proxy": os.environ.get("NO_PROXY")}

def http_get(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/probe" % port, timeout=10) as resp:
            return "%d %s" % (resp.status, resp.read().decode())
    except urllib.error.HTTPError as exc:
        return "http %d" % exc.code
    except OSError as exc:
        return "error: %s" % exc

def connect(port):
    proxy = os.environ.get("HTTPS_PROXY")
    if not proxy:
        return "no proxy"
    host, _, pport = proxy.rpartition("/")[2].partition(":")
    s = socket.create_connection((host, int(pport)), timeout=10)
    s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (port, port))
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        return head.split(b"\r\n")[0].decode()
    s.sendall(b"GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return "tunnel " + data.split(b"\r\n")[0].decode() + " " + data.rpartition(b"\r\n\r\n")[2].decode()

def direct(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return "connected"
    except OSError as exc:
        return "error: %s" % exc.strerror

out["get allowed"] = http_get(allowed)
out["get refused"] = http_get(refused)
out["connect allowed"] = connect(allowed)
out["connect refused"] = connect(refused)
out["direct allowed"] = direct(allowed)
out["direct refused"] = direct(refused)
print(json.dumps(out))
"""


class _Server:
    """A scripted HTTP server on a loopback port that answers its name and counts requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.hits: list[str] = []
        hits, body = self.hits, name.encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def net(user_repo: Path) -> Iterator[dict[str, Any]]:
    """The user's repository with a run whose settings allow server A; servers A and B; a host."""
    a, b = _Server("A"), _Server("B")
    write(user_repo, ".sandbox.toml", f'[network]\nallow = ["127.0.0.1:{a.port}"]\n')
    started = sb("start", "--json", cwd=user_repo)
    assert started.returncode == 0, started.stderr
    served = sb("serve", "--idle-exit", "600", cwd=user_repo)
    assert served.returncode == 0, served.stderr
    try:
        yield {"user": user_repo, "run": json.loads(started.stdout)["run"], "a": a, "b": b}
    finally:
        host.stop_host(str(user_repo / ".git"))
        a.close()
        b.close()


def probe_by_agent(net: dict[str, Any], *flags: str, between_calls: bool = False) -> dict[str, Any]:
    """The fake Claude Code runs PROBE as its Bash tool call ``toolu_net`` (and, with
    ``between_calls``, once more outside any call); the probe's findings."""
    command = shlex.join([sys.executable, "-c", PROBE, str(net["a"].port), str(net["b"].port)])
    pre = {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "cwd": str(open_run(net["user"], net["run"]).worktree),
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": "toolu_net",
    }
    post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}}
    steps: list[dict[str, Any]] = [{"pre": pre, "effect": {"sh": command}, "post": post}]
    if between_calls:
        steps.append({"effect": {"sh": command + " >/dev/null"}})
    proc = sb(
        "run",
        net["run"],
        *flags,
        "--hooks",
        "claude-code",
        "--",
        sys.executable,
        str(FIXTURES_AGENT),
        "-",
        cwd=net["user"],
        input=json.dumps(steps).encode(),
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.decode().splitlines()[0]))


def test_allowlist_lets_the_allowed_server_answer_and_records_each_refusal(net: dict[str, Any]) -> None:
    found = probe_by_agent(net, between_calls=True)
    assert found["proxy"].startswith("http://127.0.0.1:") and found["no_proxy"] == ""
    assert found["get allowed"] == "200 A"
    assert found["connect allowed"] == "tunnel HTTP/1.1 200 OK A"
    assert found["get refused"] == "http 403"
    assert found["connect refused"].startswith("HTTP/1.1 403")
    # Around the proxy there is no way: the agent's namespace has only its own loopback.
    assert found["direct allowed"].startswith("error") and found["direct refused"].startswith("error")
    assert net["b"].hits == [] and net["a"].hits == ["/probe", "/tunnel", "/probe", "/tunnel"]

    status = json.loads(sb("status", net["run"], "--json", cwd=net["user"]).stdout)
    b = net["b"].port
    refused = [(r["host"], r["port"], r["method"], r["call_id"]) for r in status["network_refused"]]
    assert refused == [
        ("127.0.0.1", b, "GET", "toolu_net"),
        ("127.0.0.1", b, "CONNECT", "toolu_net"),
        ("127.0.0.1", b, "GET", None),  # between calls: tied to the session
        ("127.0.0.1", b, "CONNECT", None),
    ]
    assert len({r["session"] for r in status["network_refused"]}) == 1
    notes = open_run(net["user"], net["run"]).state().data.note
    allow = [n["isolation"] for n in notes if "isolation" in n]
    assert allow == [f"bwrap, network allow (api.anthropic.com, console.anthropic.com, 127.0.0.1:{net['a'].port})"]

    text = sb("log", net["run"], cwd=net["user"]).stdout.decode()
    lines = text.splitlines()
    call_row = next(i for i, line in enumerate(lines) if "toolu_net" in line)
    outside = lines.index("network refused outside any call (during an agent session):")
    assert sum(f"refused: network 127.0.0.1:{b} " in line for line in lines[call_row:outside]) == 2
    assert sum(f"refused: network 127.0.0.1:{b} " in line for line in lines[outside:]) == 2
    # The full read path (not the sealed cache) shows the same.
    full = sb("log", net["run"], "--patch", cwd=net["user"]).stdout.decode()
    assert sum(f"refused: network 127.0.0.1:{b} " in line for line in full.splitlines()) == 4


def test_base_url_of_the_agent_is_allowed(net: dict[str, Any]) -> None:
    """The host:port of the started agent's base URL is on its allowlist (Claude Code: ANTHROPIC_BASE_URL)."""
    write(net["user"], ".sandbox.toml", "")
    env = {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{net['b'].port}"}
    command = shlex.join([sys.executable, "-c", PROBE, str(net["b"].port), str(net["a"].port)])
    proc = sb(
        "run",
        net["run"],
        "--hooks",
        "claude-code",
        "--",
        sys.executable,
        str(FIXTURES_AGENT),
        "-",
        cwd=net["user"],
        env=env,
        input=json.dumps([{"effect": {"sh": command}}]).encode(),
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.decode().splitlines()[0])
    assert found["get allowed"] == "200 B" and found["get refused"] == "http 403"


def test_network_on_is_unrestricted(net: dict[str, Any]) -> None:
    found = probe_by_agent(net, "--network", "on")
    assert found["proxy"] is None
    assert found["direct allowed"] == "connected" and found["direct refused"] == "connected"
    assert found["get refused"] == "200 B"
    status = json.loads(sb("status", net["run"], "--json", cwd=net["user"]).stdout)
    assert status["network_refused"] == []


def test_network_off_reaches_nothing(net: dict[str, Any]) -> None:
    found = probe_by_agent(net, "--network", "off")
    assert found["proxy"] is None
    assert found["get allowed"].startswith("error") and found["get refused"].startswith("error")
    assert found["direct allowed"].startswith("error") and found["direct refused"].startswith("error")
    assert net["a"].hits == [] and net["b"].hits == []


def _proxy_answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            dir_fd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
        except FileNotFoundError:  # the proxy's directory is made when the run's policy is
            return False
        try:
            s.connect(f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}")
            return True
        except OSError:
            return False
        finally:
            os.close(dir_fd)


def test_the_proxy_dies_with_the_run(net: dict[str, Any]) -> None:
    """``sandbox run`` killed with SIGKILL: its proxy (a thread of it) and the sandbox go with it."""
    run = open_run(net["user"], net["run"])
    sock = os.path.join(os.path.realpath(run.dir), PROXY_SOCKET)
    proc = subprocess.Popen(
        [SANDBOX_EXE, "run", net["run"], "--hooks", "none", "--", "sleep", "60"],
        cwd=net["user"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not _proxy_answers(sock):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline, "the run's proxy never listened"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(scaled(10))
        assert not _proxy_answers(sock)
        # The sandbox (bubblewrap, --die-with-parent) and the agent in it are gone too.
        wait_until(lambda: not _sleepers(run.worktree), timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _sleepers(worktree: str) -> list[int]:
    """Processes working in the run's worktree (found by their cwd, never by words in command lines)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd") == os.path.realpath(worktree):
                    found.append(int(name))
            except OSError:
                continue
    return found


def test_run_json_says_the_mode_the_allowlist_and_the_refusals(net: dict[str, Any]) -> None:
    b = net["b"].port
    get = f"import urllib.request as u\ntry: u.urlopen('http://127.0.0.1:{b}/', timeout=10)\nexcept OSError: pass\n"
    argv = ["run", net["run"], "--hooks", "none", "--json", "--", sys.executable, "-c", get]
    proc = sb(*argv, cwd=net["user"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["network"], out["network_allow"], out["network_refused"]) == (
        "allow",
        [f"127.0.0.1:{net['a'].port}"],  # a command of no known agent: the settings' list only
        1,
    )
    assert b"the network allowlist refused 1 connection(s)" in proc.stderr
    off = json.loads(sb(*argv[:4], "--network", "off", *argv[4:], cwd=net["user"]).stdout)
    assert (off["network"], off["network_allow"], off["network_refused"]) == ("off", None, 0)
