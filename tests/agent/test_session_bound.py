"""Evidence bound to the call (issue 33): only the ``sandbox run`` session that started a call, or ``sandbox
resume``, ends it; the next ``sandbox run`` first marks a killed session's started calls uncertain."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import sandbox_cmd
from tests.hook_fixtures import payload, reopen, start_run

#: Session tokens are looked for among every process of the machine: this suite's own, so that another
#: suite running at the same time (another clone's CI) has none of them.
_SUFFIX = secrets.token_hex(4)


def _token(session: str) -> str:
    return f"{session}-{_SUFFIX}"


def _hook_in(session: str, data: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """``sandbox hook claude-code`` as a process of the ``sandbox run`` session ``session`` (its token is
    in the process's initial environment, where the sandbox reads it)."""
    exe = Path(sys.executable).parent / "sandbox"
    return subprocess.run(
        [str(exe), "hook", "claude-code"],
        input=json.dumps(data).encode(),
        env={**os.environ, "SANDBOX_SESSION": _token(session)},
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_a_payload_from_another_session_about_a_call_is_refused_and_kept(repo: Path) -> None:
    """Session one started a call and was killed (no process of it left); session two's hook says the call
    was refused, then its turn ended: the call stays started (resume decides it), the payload is kept."""
    run = start_run(repo)
    wt = Path(run.worktree)
    pre = payload("Bash", "pre", wt)
    assert _hook_in("session-one", pre).returncode == 0
    entry = reopen(run).entries()[0]
    assert entry.status.value == "started" and entry.session == _token("session-one")
    denied = {**pre, "hook_event_name": "PermissionDenied", "reason": "the user said no"}
    refused = _hook_in("session-two", denied)
    assert refused.returncode == 1 and b"another sandbox session" in refused.stderr
    post = _hook_in("session-two", payload("Bash", "post", wt, call_id=pre["tool_use_id"]))
    assert post.returncode == 1
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
