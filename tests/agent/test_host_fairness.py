"""One run's flood of valid requests never starves another run's on the same host (issue 32).

Run A is flooded by ``FLOODERS`` processes (forked: each a peer of its own to the host, as an
agent's concurrent hook processes are), each sending Bash start/finish hook pairs to the host in a
bounded loop, one request at a time. Run A's requests are recorded one after another (each holds
A's run lock, then the shared one), so A's throughput is the host's per-request service time, and
that time, measured from the flood itself, is the unit the test's bound is written in: it holds on
a loaded machine as on an idle one. Meanwhile run B's hook round trips, and one
``sandbox exec -- true``, are timed.

Before the host's workers were shared between runs (``intake.Limits.per_run_workers``), all of them
could wait on run A's lock, one per flooding process, and B's request was served only after every
flooding process ahead of it in the round-robin had had its turn: B waited about ``FLOODERS`` of A's
requests. The figures are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.agent.adapters import claude_code
from sandbox.store import layout
from tests.conftest import alive, sandbox_cmd, scaled, wait_until
from tests.hook_fixtures import payload

SANDBOX = str(Path(sys.executable).parent / "sandbox")
FLOODERS = 48
ROUNDS = 8  # B's Bash calls timed during the flood (a start and a finish each)
MEASURED = 100  # A's requests over which the flood's throughput is measured

FLOODER = r"""
import json, os, socket, sys, time
path, run, token, count, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
start, finish = json.loads(sys.argv[7]), json.loads(sys.argv[8])

def ask(event):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    try:
        s.connect(path)
        s.sendall(json.dumps({"v": 1, "op": "hook", "run": run, "token": token, "event": event}).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        reply = json.loads(data)
        if reply.get("ok") is not True:
            sys.stderr.write(json.dumps(reply)[:300] + "\n")
        return reply.get("ok") is True
    except (OSError, ValueError) as exc:
        sys.stderr.write(repr(exc) + "\n")
        return False
    finally:
        s.close()

children = []
for n in range(count):
    pid = os.fork()
    if pid == 0:
        done = failed = 0
        until = time.monotonic() + limit
        i = 0
        while time.monotonic() < until and not os.path.exists(sys.argv[6]):
            call = "flood-%d-%d" % (n, i)
            for event in (start, finish):
                if ask({**event, "call_id": call}):
                    done += 1
                else:
                    failed += 1
            i += 1
        os.write(1, (json.dumps({"done": done, "failed": failed}) + "\n").encode())
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


TIMER = r"""
import json, sys, time
from tests.agent.test_host_shared_lock import ask
common, run, token, tag, n, start, finish = json.loads(sys.argv[1])
times = []
for i in range(n):
    for event in (start, finish):
        began = time.monotonic()
        reply = ask(common, run, token, {**event, "call_id": "%s-%d" % (tag, i)})
        times.append(time.monotonic() - began)
        assert reply["ok"] is True, reply
print(json.dumps(times))
"""
ROOT = Path(__file__).resolve().parents[2]


def _events(worktree: str) -> tuple[dict[str, object], dict[str, object]]:
    out = []
    for which in ("pre", "post"):
        event = claude_code.to_event(payload("Bash", which, worktree, "x"))
        assert event is not None
        out.append(event.to_dict())
    return out[0], out[1]


def _round_trips(common: str, run: str, token: str, worktree: str, tag: str, n: int) -> list[float]:
    """Wall times of ``n`` Bash calls' start and finish requests of ``run``, each checked ``ok``, sent
    from a process of its own: a call started from this one would have the flooding processes (its
    descendants) refused as payloads sent from inside it (sandbox.agent.calltrees)."""
    start, finish = _events(worktree)
    proc = subprocess.run(
        [sys.executable, "-c", TIMER, json.dumps([common, run, token, tag, n, start, finish])],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
        capture_output=True,
        timeout=scaled(300),
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    times: list[float] = json.loads(proc.stdout)
    return times


@pytest.mark.slow
def test_a_flood_of_one_runs_requests_never_starves_another_runs(repo: Path, tmp_path: Path) -> None:
    runs = [json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout) for _ in range(2)]
    (a, wt_a), (b, wt_b) = ((r["run"], r["worktree"]) for r in runs)
    common = str(repo / ".git")
    served = subprocess.Popen(
        [SANDBOX, "-C", str(repo), "serve", "--foreground", "--idle-exit", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    flood: subprocess.Popen[bytes] | None = None
    stop = tmp_path / "stop-flood"
    try:
        wait_until(lambda: wire.Client(common).ping())
        tokens = [wire.run_token(layout.run_dir(common, r)) for r in (a, b)]
        token_a, token_b = tokens
        assert token_a is not None and token_b is not None
        quiet = _round_trips(common, b, token_b, wt_b, "quiet", ROUNDS)
        _round_trips(common, a, token_a, wt_a, "warm", 1)  # A's slot opened before the clock starts
        start, finish = _events(wt_a)
        limit = scaled(120)
        flood = subprocess.Popen(
            [
                sys.executable,
                "-c",
                FLOODER,
                wire.socket_path(common),
                a,
                token_a,
                str(FLOODERS),
                str(limit),
                str(stop),
                json.dumps(start),
                json.dumps(finish),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # The flood is on: every flooding process has had requests answered.
        wait_until(lambda: _requests(common, a) >= 2 + FLOODERS, timeout=120)
        # The flood's own throughput, B quiet: the time one of A's requests takes, under this flood, now
        # (they are recorded one after another). The bound below is written in it.
        a_start, t_start = _requests(common, a), time.monotonic()
        wait_until(lambda: _requests(common, a) >= a_start + MEASURED, timeout=120)
        a_before, t_before = _requests(common, a), time.monotonic()
        per_a_request = (t_before - t_start) / (a_before - a_start)
        during = _round_trips(common, b, token_b, wt_b, "flood", ROUNDS)
        exec_began = time.monotonic()
        proc = sandbox_cmd("exec", b, "--", "true", cwd=repo, timeout=scaled(120))
        exec_took = time.monotonic() - exec_began
        a_after, t_after = _requests(common, a), time.monotonic()
        stop.touch()
        out, err = flood.communicate(timeout=scaled(180))
        assert proc.returncode == 0, proc.stderr.decode()
        counts = [json.loads(line) for line in out.decode().splitlines()]
        assert len(counts) == FLOODERS, err.decode()[-2000:]
        figures = {
            "flooders": FLOODERS,
            "flood_requests": sum(c["done"] for c in counts),
            "flood_failed": sum(c["failed"] for c in counts),
            "flood_per_s_b_quiet": round(1 / per_a_request, 1),
            "flood_per_s_while_b_timed": round((a_after - a_before) / (t_after - t_before), 1),
            "a_ms_per_request": round(per_a_request * 1000, 1),
            "b_median_quiet_ms": round(statistics.median(quiet) * 1000, 1),
            "b_median_during_ms": round(statistics.median(during) * 1000, 1),
            "b_max_during_ms": round(max(during) * 1000, 1),
            "b_exec_true_ms": round(exec_took * 1000, 1),
            "load": os.getloadavg()[0],
        }
        print("\nhost fairness:", json.dumps(figures))
        assert figures["flood_failed"] == 0, (figures, err.decode()[-3000:])
        # B's request waits for at most the few of A's being handled (one recording, the shared lock),
        # never for a turn of every flooding process: a tenth of FLOODERS of A's requests is far above
        # the first and far below the second.
        assert statistics.median(during) < (FLOODERS / 10) * per_a_request + max(statistics.median(quiet), 0.05), (
            figures
        )
        assert served.poll() is None
    finally:
        stop.touch()
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait(timeout=30)
        pid = host.host_pid(common)
        host.stop_host(common)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
        served.wait(timeout=30)


def _requests(common: str, run: str) -> int:
    status = wire.status(common)
    assert status is not None
    return int(status["runs"].get(run, {}).get("requests", 0))


def test_the_run_a_request_names_is_read_from_its_first_bytes() -> None:
    """The lane of a request (sandbox.agent.intake): the run it names as the clients write it, else none."""
    from sandbox.fast import fastjson

    hook = fastjson.dumps({"v": 1, "op": "hook", "run": "ab12cd34", "token": "t", "event": {"x": "y" * 10_000}})
    assert wire.run_named(hook.encode()) == "ab12cd34"
    assert wire.run_named(b'{"v":1,"op":"end","run":"ab12cd34","call":"c"}') == "ab12cd34"
    assert wire.run_named(b'{"v": 1, "op": "ping"}') is None
    assert wire.run_named(b'{"op": "hook", "run": "../../etc"}') is None  # not a run id: the peer's own lane
    assert wire.run_named(b" " * 300 + b'"run": "ab12cd34"') is None  # only the first bytes are looked at
