"""Evidence bound to the call (issue 33): only the ``sandbox run`` session that started a call, or ``sandbox
resume``, ends it; the next ``sandbox run`` first marks a killed session's started calls uncertain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import sandbox_cmd, scaled
from tests.hook_fixtures import payload, reopen, start_run


def _hook_in(session: str, data: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """``sandbox hook claude-code`` as a process of the ``sandbox run`` session ``session`` (its token is
    in the process's initial environment, where the sandbox reads it)."""
    exe = Path(sys.executable).parent / "sandbox"
    return subprocess.run(
        [str(exe), "hook", "claude-code"],
        input=json.dumps(data).encode(),
        env={**os.environ, "SANDBOX_SESSION": session},
        capture_output=True,
        timeout=120,
        check=False,
    )


def _gone(session: str) -> None:
    """Wait (bounded) until no process of ``session`` is left: what a hook of it started may outlive it a
    moment on a loaded machine. Fails naming the processes when some stay."""
    from sandbox.agent import procs

    deadline = time.monotonic() + scaled(20)
    while procs.find(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.find(session), procs.find(session)


def test_a_payload_from_another_session_about_a_call_is_refused_and_kept(repo: Path) -> None:
    """Session one started a call and was killed (no process of it left); session two's hook says the call
    was refused, then its turn ended: the call stays started (resume decides it), the payload is kept."""
    run = start_run(repo)
    wt = Path(run.worktree)
    pre = payload("Bash", "pre", wt)
    assert _hook_in("session-one", pre).returncode == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "started" and entry.session == "session-one"
    denied = {**pre, "hook_event_name": "PermissionDenied", "reason": "the user said no"}
    refused = _hook_in("session-two", denied)
    assert refused.returncode == 1 and b"another sandbox session" in refused.stderr
    post = _hook_in("session-two", payload("Bash", "post", wt, call_id=pre["tool_use_id"]))
    assert post.returncode == 1
    _gone("session-one")  # killed: no process of it left (CI once found one still there here)
    stop = {"session_id": pre["session_id"], "hook_event_name": "Stop", "cwd": str(wt)}
    assert _hook_in("session-two", stop).returncode == 0  # settles its own calls only
    again = reopen(run)
    assert again.entry(entry.call_id).status.value == "started"
    kept = [e.data["payload_from_other_session"] for _o, e in again.events() if "payload_from_other_session" in e.data]
    assert [k["payload"] for k in kept] == [
        f"refused payload for {entry.call_id}",
        f"finish payload for {entry.call_id}",
    ]
    # The session that started it still ends it.
    assert _hook_in("session-one", payload("Bash", "post", wt, call_id=pre["tool_use_id"])).returncode == 0
    assert reopen(run).entry(entry.call_id).status.value == "succeeded"


def test_sandbox_run_marks_a_gone_sessions_started_calls_uncertain_first(repo: Path) -> None:
    run = start_run(repo)
    wt = Path(run.worktree)
    pre = payload("Bash", "pre", wt)
    assert _hook_in("session-killed", pre).returncode == 0
    outside = payload("Bash", "pre", wt, call_id="toolu_01OutsideAnySession000")
    from tests.hook_fixtures import hook

    assert hook("claude-code", outside).exit_code == 0  # no session: left as it is (sandbox exec, hooks by hand)
    ran = sandbox_cmd("run", run.run_id, "--isolate", "off", "--", "sh", "-c", "exit 0", cwd=repo)
    assert ran.returncode == 0, ran.stderr
    line = f"sandbox: 1 call(s) left started by a sandbox session that is gone are now uncertain ({pre['tool_use_id']})"
    assert line.encode() in ran.stderr and f"'sandbox resume {run.run_id}'".encode() in ran.stderr
    again = reopen(run)
    assert again.entry(pre["tool_use_id"]).status.value == "uncertain"
    assert again.entry("toolu_01OutsideAnySession000").status.value == "started"
    ran = sandbox_cmd("run", run.run_id, "--isolate", "off", "--", "sh", "-c", "exit 0", cwd=repo)
    assert b"now uncertain" not in ran.stderr  # once
