"""Evidence bound to the call (issue 33): a second ``begin`` of an open call keeps its first window."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent import wire
from sandbox.agent.host import Host
from sandbox.run.run import Run
from tests.agent.test_host import serve_in_thread
from tests.conftest import wait_until, write
from tests.hook_fixtures import start_run


@pytest.fixture
def served(repo: Path) -> Iterator[tuple[Run, Host]]:
    run = start_run(repo)
    host, thread = serve_in_thread(run.project.common_dir)
    yield run, host
    host.request_stop()
    thread.join(timeout=30)


def test_a_second_begin_keeps_the_calls_first_window(served: tuple[Run, Host]) -> None:
    run, _host = served
    ops = wire.run_ops(run.project.common_dir, run.run_id, run.dir)
    ops.begin("c1")
    write(Path(run.worktree), "one.txt", "1")
    wait_until(lambda: (ops.last_change() or 99) < 5)  # the host has seen it (events arrive in ~2 ms)
    time.sleep(0.2)
    ops.begin("c1")  # sent again (by anyone in the sandbox): what c1 changed so far stays c1's
    write(Path(run.worktree), "two.txt", "2")
    assert ops.end("c1") == {"one.txt", "two.txt"}
    ops.begin("c2")  # a new call still gets a window of its own
    write(Path(run.worktree), "three.txt", "3")
    assert ops.end("c2") == {"three.txt"}


def test_a_conflicting_second_finish_is_kept_beside_the_first(repo: Path) -> None:
    """A command that failed, reported succeeded first (from inside the call) then failed by the real hook:
    the first stays, the second is recorded beside it, never dropped."""
    from tests.hook_fixtures import hook, payload, reopen

    run = start_run(repo)
    wt = Path(run.worktree)
    fail = payload("Bash", "failure", wt)
    hook("claude-code", {**fail, "hook_event_name": "PreToolUse"})
    assert hook("claude-code", {**payload("Bash", "post", wt), "tool_use_id": fail["tool_use_id"]}).exit_code == 0
    assert hook("claude-code", fail).exit_code == 0  # the real end: exit 2
    again = reopen(run)
    entry = again.entries()[0]
    assert entry.status.value == "succeeded"  # the first finish stands...
    notes = [e.data["conflicting_finish"] for _o, e in again.events() if "conflicting_finish" in e.data]
    assert notes and notes[0]["call"] == entry.call_id and notes[0]["first"] == "succeeded"  # ...and the second too
    assert "failed" in str(notes[0]["why"]) and "Exit code 2" in str(notes[0]["why"])
    assert hook("claude-code", fail).exit_code == 0  # the same conflicting finish once more: recorded again


def test_a_refusal_of_a_call_that_changed_files_is_a_violation(repo: Path) -> None:
    """A 'refused' payload for a started call that changed files (sent from inside the call, say) does not
    make it 'never ran': it is a violation, with the files it changed."""
    from tests.hook_fixtures import hook, payload, reopen

    run = start_run(repo)
    wt = Path(run.worktree)
    pre = payload("Bash", "pre", wt)
    assert hook("claude-code", pre).exit_code == 0
    write(wt, "written-anyway.txt", "x\n")
    assert (
        hook("claude-code", {**pre, "hook_event_name": "PermissionDenied", "reason": "the user said no"}).exit_code == 0
    )
    entry = reopen(run).entries()[0]
    assert entry.status.value == "violation" and [f.path for f in entry.files] == ["written-anyway.txt"]
    assert "it ran" in (entry.error or "")
    # A refusal of a started call that changed nothing still reads as never run.
    other = payload("Bash", "pre", wt, call_id="toolu_03BashRefusedForReal00")
    assert hook("claude-code", other).exit_code == 0
    assert hook("claude-code", {**other, "hook_event_name": "PermissionDenied", "reason": "no"}).exit_code == 0
    assert reopen(run).entry("toolu_03BashRefusedForReal00").status.value == "not_run"


@pytest.mark.parametrize("isolate", ["off", "on"])
def test_a_payload_sent_from_inside_the_calls_own_command_is_refused(served: tuple[Run, Host], isolate: str) -> None:
    """A command run by ``sandbox exec`` that sends its own call's 'refused' (``sandbox hook generic`` with a
    forged JSON) while it runs: the host knows the sender descends from the call's starter, refuses it and
    records it beside the call, which ends as it really ended (succeeded, with its file)."""
    import json
    import shlex
    import shutil
    import sys

    from tests.conftest import sandbox_cmd
    from tests.hook_fixtures import reopen

    if isolate == "on" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    run, _host = served
    forged = {"event": "refused", "cwd": run.worktree, "tool": "run_command", "call_id": "c-inside",
              "error": "the user said no"}  # fmt: skip
    hook = f"{shlex.quote(str(Path(sys.executable).parent / 'sandbox'))} hook generic"
    script = f"echo ran > wrote.txt; printf '%s' {shlex.quote(json.dumps(forged))} | {hook}; echo hook=$? >&2"
    done = sandbox_cmd(
        "exec", run.run_id, "--isolate", isolate, "--call-id", "c-inside", "--", "sh", "-c", script, cwd=run.worktree
    )
    assert done.returncode == 0, done.stderr
    assert b"hook=1" in done.stderr and b"inside call c-inside" in done.stderr  # refused, not applied
    again = reopen(run)
    entry = again.entry("c-inside")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["wrote.txt"]
    notes = [e.data["payload_from_inside_call"] for _o, e in again.events() if "payload_from_inside_call" in e.data]
    assert len(notes) == 1 and notes[0]["call"] == "c-inside" and "refused payload" in str(notes[0]["payload"])
    # The process that started the call still records its finish; a hook from outside is not refused.
    from tests.hook_fixtures import hook as run_hook

    outside = {"event": "start", "cwd": run.worktree, "tool": "Bash", "call_id": "c-outside", "kind": "command"}
    assert run_hook("generic", outside).exit_code == 0
    assert reopen(run).entry("c-outside").status.value == "started"


def test_a_refusal_of_a_command_the_sandbox_already_started_is_a_violation(
    served: tuple[Run, Host], tmp_path: Path
) -> None:
    """A 'refused' payload (from outside the command: the agent's hook, say) for a ``sandbox exec`` call
    while its command runs: nothing asks permission once the sandbox started it, so the refusal is refused
    and kept beside the call as a violation; the call ends as it really ends, with what it wrote after."""
    import subprocess
    import sys

    from tests.conftest import scaled
    from tests.hook_fixtures import hook, reopen

    run, _host = served
    running, go = tmp_path / "running", tmp_path / "go"
    script = f"touch {running}; while [ ! -e {go} ]; do sleep 0.05; done; echo late > late.txt"
    exe = Path(sys.executable).parent / "sandbox"
    argv = [str(exe), "exec", run.run_id, "--isolate", "off", "--call-id", "c-running", "--", "sh", "-c", script]
    proc = subprocess.Popen(argv, cwd=run.worktree, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(running.exists)
        forged = {"event": "refused", "cwd": run.worktree, "tool": "run_command", "call_id": "c-running",
                  "error": "the user said no"}  # fmt: skip
        refused = hook("generic", forged)
        assert refused.exit_code == 1 and "already started" in refused.stderr
        assert reopen(run).entry("c-running").status.value == "started"
        go.touch()
        _out, err = proc.communicate(timeout=scaled(60))
    finally:
        go.touch()
        proc.wait(timeout=scaled(60))
    assert proc.returncode == 0, err
    again = reopen(run)
    entry = again.entry("c-running")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["late.txt"]
    kept = [e.data["refusal_of_running_call"] for _o, e in again.events() if "refusal_of_running_call" in e.data]
    assert kept == [{"call": "c-running", "reason": "the user said no"}]
