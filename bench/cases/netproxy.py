"""What the network allowlist (``sandbox run --network allow``, its default) costs.

Side by side, alternating within each repetition, on one run of the generated repository:

- start: ``sandbox run RUN --hooks none -- true`` with ``--network allow`` (the proxy started in
  the ``sandbox run`` process, the forwarder started inside before the agent) and with
  ``--network off`` (the same sandbox, its own network namespace, no proxy): the paired difference
  is what the proxy adds to starting (and ending) a session;
- floors, which whole processes on a loaded machine hide: bubblewrap with the run's policy around
  ``true`` with the forwarder in front of it and without, and the proxy's own start and stop;
- per request: a client inside the sandbox makes 100 sequential plain-HTTP requests, each on a new
  connection (as ``urllib`` does), to a server on loopback outside: through the proxy
  (``--network allow``: forwarder inside, proxy outside) and directly (``--network on``); the
  medians of the 100 are compared. A ``CONNECT`` tunnel per request is measured too.

Targets (issue #20): ``run`` start at most 100 ms more with the proxy; the proxy adds at most 5 ms
per request on loopback (median of 100 requests).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "netproxy"
G_START = "sandbox run -- true (whole session)"
G_REQUEST = "one HTTP request from inside (median of 100)"
G_TUNNEL = "one CONNECT tunnel + request from inside (median of 100)"
G_FLOOR = "floor: bwrap -- true, with the forwarder vs without"
G_PROXY = "floor: the proxy started and stopped in-process"
ALLOW = "network allow (proxy)"
OFF = "network off"
ON = "network on (direct)"
DELTA = "paired difference, allow - the other (same round)"
REQUESTS = 100

#: Inside the sandbox: REQUESTS timed requests to the port given; seconds each, as JSON.
CLIENT = r"""
import json, os, socket, sys, time, urllib.request
port, tunnel = int(sys.argv[1]), sys.argv[2] == "tunnel"
proxy = os.environ.get("HTTP_PROXY")
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
def request():
    if not tunnel:
        with opener.open("http://127.0.0.1:%d/" % port, timeout=10) as r:
            r.read()
        return
    host, _, pport = proxy.rpartition("/")[2].partition(":")
    with socket.create_connection((host, int(pport)), timeout=10) as s:
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while s.recv(65536):
            pass
times = []
request()  # warm-up, not counted
for _ in range(COUNT):
    t0 = time.perf_counter()
    request()
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
""".replace("COUNT", str(REQUESTS))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def run(ctx: Context, repo: Repo) -> None:
    """Measure session start and per-request cost with and without the allowlist proxy."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    if shutil.which("bwrap") is None:
        res.skip(CASE, repo.size, "bubblewrap is not installed")
        return
    project, workdir, _ = Project.discover(repo.path)
    assert workdir is not None
    run_ = Run.start(project, workdir)
    rid = run_.run_id
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    # The server's port is the allowlist (what an agent's base URL adds).
    settings = os.path.join(repo.path, ".sandbox.toml")
    with open(settings, "w", encoding="utf-8") as fh:
        fh.write(f'[network]\nallow = ["127.0.0.1:{port}"]\n')
    env = {"SANDBOX_HOOK_AUTOSTART": "0"}

    def session(mode: str, *argv: str) -> tuple[float, bytes]:
        cmd = [SANDBOX, "-C", repo.path, "run", rid, "--hooks", "none", "--network", mode, "--", *argv]
        proc = run_proc(cmd, env=env)
        return proc.seconds, proc.stdout

    def start(mode: str) -> float:
        return session(mode, "true")[0]

    def per_request(kind: str) -> Callable[[str], float]:
        def measure(mode: str) -> float:
            out = session(mode, sys.executable, "-I", "-c", CLIENT, str(port), kind)[1]
            return statistics.median(json.loads(out.decode().strip().splitlines()[-1]))

        return measure

    def pair(group: str, variants: tuple[str, str], measure: Callable[[str], float], i: int) -> None:
        got = {}
        for mode in rotate(list(variants), i):
            settle()
            got[mode] = measure(str(mode))
        names = {"allow": ALLOW, "off": OFF, "on": ON}
        for mode in variants:
            res.add(CASE, repo.size, group, names[mode], got[mode])
        res.add(CASE, repo.size, group, DELTA, got["allow"] - got[variants[1]])

    from sandbox.confine import spawn
    from sandbox.confine.bwrap import bwrap_argv
    from sandbox.confine.policy import policy_for
    from sandbox.confine.proxy import Allowlist, NetProxy

    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    from sandbox.cli.machine import installed_paths

    # The interpreter stays visible as the CLI keeps it (the bridge inside runs it): a venv under /tmp
    # would otherwise be hidden by the private /tmp ("python: not found" inside).
    readable = tuple(installed_paths([]))
    iso = spawn.Isolation(enabled=True, network=False, program=bwrap, readable=readable, allow=(f"127.0.0.1:{port}",))
    policy = policy_for(iso, common_dir=project.common_dir, run_id=rid, worktree=run_.worktree, user_workdir=workdir)
    assert policy.proxy is not None
    plain = spawn.Policy(**{**policy.__dict__, "proxy": None})

    def floor(mode: str) -> float:
        argv = bwrap_argv(bwrap, policy if mode == "allow" else plain, ["true"], run_.worktree)
        return run_proc(argv, cwd=run_.worktree).seconds

    def proxy_cycle() -> float:
        t0 = time.perf_counter()
        NetProxy(str(policy.proxy), Allowlist(iso.allow or ())).start().stop()
        return time.perf_counter() - t0

    res.row(CASE, repo.size, G_START, OFF, ref=True)
    res.row(CASE, repo.size, G_FLOOR, OFF, ref=True)
    res.row(CASE, repo.size, G_REQUEST, ON, ref=True)
    try:
        for i in ctx.rounds(21, budget=30):
            pair(G_FLOOR, ("allow", "off"), floor, i)
            res.add(CASE, repo.size, G_PROXY, ALLOW, proxy_cycle())
        for i in ctx.rounds(7, budget=60):
            pair(G_START, ("allow", "off"), start, i)
        for i in ctx.rounds(3, budget=60):
            pair(G_REQUEST, ("allow", "on"), per_request("plain"), i)
        for _i in ctx.rounds(3, budget=30):
            got = per_request("tunnel")("allow")
            res.add(CASE, repo.size, G_TUNNEL, ALLOW, got)
    finally:
        httpd.shutdown()
        httpd.server_close()
        os.unlink(settings)
        from sandbox.agent.host import stop_host

        stop_host(run_.project.common_dir)
        run_.drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """The proxy adds <= 100 ms to a session's start and <= 5 ms per request (medians, smallest size)."""
    size = min(sizes)
    out = []
    for group, goal, limit in (
        (G_FLOOR, "+<= 100 ms median", 0.100),
        (G_START, "+<= 100 ms median", 0.100),
        (G_REQUEST, "+<= 5 ms median", 0.005),
    ):
        name = f"network allowlist cost: {group}, at {size // 1000}k"
        row = results.find(CASE, size, group, DELTA)
        if row is None:
            out.append(Target(name, goal, "-", None))
        else:
            delta = row.stats.median
            out.append(Target(name, goal, f"{delta * 1e3:+.1f} ms", delta <= limit))
    return out
