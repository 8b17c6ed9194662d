"""The real Codex CLI crashes and continues with its conversation (issue #22).

Codex runs confined under ``sandbox run`` (default isolation: bubblewrap, the network only through
the allowlist proxy, which lets Codex reach its model endpoint ``OPENAI_BASE_URL``) with the README's
``config.toml`` snippet (``sandbox mcp`` its only tool provider; ``env_vars = ["SANDBOX_RUN"]`` makes
the server work on the run ``sandbox run`` started). The server runs inside the same sandbox, where
the run's ledger is read-only, and records each call through the repository's host. Each
``tools/call`` Codex sends carries its session id and the model's call id in ``_meta``, so the
ledger's calls are the rollout's function calls. Codex is killed with SIGKILL during a
``run_command``; ``sandbox resume RUN --continue`` relaunches it, confined, with ``codex exec
resume ID NOTE``: the scripted server's next request carries the earlier turns and the note, the
model's retry of the uncertain command is refused until ``sandbox approve``, and the session goes
on recorded in the same Codex session. ``sandbox rewind RUN --to CALL --continue`` puts the files
back and continues a copy of the rollout cut just before CALL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.agent.adapters import codex
from sandbox.models import CallStatus
from tests import cliserver
from tests.agents.claude_harness import TIMEOUT, cli_start, push_into_another_clone, stop_services
from tests.agents.openai_server import ResponsesServer, output_text
from tests.agents.test_claude_code import _with_marker
from tests.agents.test_codex_mcp import KEY, KEY_VAR, NO_TRAFFIC, codex_config, mcp
from tests.hook_fixtures import reopen

pytestmark = pytest.mark.agents

NOTE_HEAD = "The sandbox stopped and resumed this session"


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique marker for the long command; processes carrying it are stopped at the end."""
    mark = f"43.{os.getpid() % 1000:03d}{time.monotonic_ns() % 1000:03d}"
    yield mark
    for pid in _with_marker(f"sleep {mark}"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def codex_env(tmp_path: Path, server: ResponsesServer, repo: Path) -> dict[str, str]:
    """Codex's environment: a private HOME whose ``~/.codex`` (CODEX_HOME) names this server; no other traffic.

    The home is the test's own (``sandbox run`` seeds the run's own Codex home from it at each start:
    the user's ``~/.codex`` is read-only inside), and ``OPENAI_BASE_URL`` names the server, so the
    allowlist lets Codex reach it through the proxy and nothing else.
    """
    user_home = tmp_path / "home"
    home = user_home / ".codex"
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = Path(os.environ["HOME"]) / ".gitconfig"
    if gitconfig.exists() and not (user_home / ".gitconfig").exists():
        shutil.copyfile(gitconfig, user_home / ".gitconfig")
    (home / "config.toml").write_text(codex_config(server, repo))  # the server's port changes per test step
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update({"HOME": str(user_home), "CODEX_HOME": str(home), KEY_VAR: KEY})
    env.update({"NO_COLOR": "1", "OPENAI_BASE_URL": server.base_url})
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[var] = env[var.lower()] = server.proxy_url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    return env


def _sandbox(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cliserver.sandbox(*args, cwd=cwd, env=env, input=b"", timeout=TIMEOUT, text=True)


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (by PID, through /proc's children lists)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except (OSError, ValueError):
            kids = []
        out += kids
        todo += kids
    return out


def _native_codex(root: int) -> list[int]:
    """The native Codex binary below ``root`` (the npm package's node wrapper starts it): found by
    PID, so another test's Codex on another worker is never taken for it."""
    found = []
    for pid in _descendants(root):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if "codex-linux-x64" in exe or os.path.basename(exe) == "codex":
            found.append(pid)
    return found


def _items(body: Any, kind: str) -> list[dict[str, Any]]:
    return [i for i in (body or {}).get("input", []) if isinstance(i, dict) and i.get("type") == kind]


def _user_text(body: Any) -> str:
    out = []
    for item in _items(body, "message"):
        content = item.get("content") if item.get("role") == "user" else []
        if isinstance(content, str):
            out.append(content)
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict):
                out.append(str(part.get("text", "")))
    return "\n".join(out)


def _codex_until(
    codex_bin: str,
    run: Any,
    repo: Path,
    tmp_path: Path,
    server: ResponsesServer,
    marker: Path,
    *,
    new_session: bool = False,
) -> Any:
    """``sandbox run RUN -- codex exec ...`` started, once ``marker`` exists (its long command began)."""
    proc = cliserver.popen(  # forked by the tests' command server: its pid is sandbox run's own
        *("run", run.run_id, "--", codex_bin, "exec", *NO_TRAFFIC, "--strict-config", "--color=never", "Do the task."),
        cwd=repo,
        env=codex_env(tmp_path, server, repo),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )
    deadline = time.monotonic() + 90
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not marker.exists():
        proc.kill()
        raise AssertionError(proc.communicate(timeout=30))
    return proc


def test_codex_kill_9_then_resume_continue(codex_bin: str, repo: Path, tmp_path: Path, marker: str) -> None:
    run = cli_start(repo)
    wt = Path(run.worktree)
    first = mcp("write_file", path="src/new.py", content="def new():\n    return 1\n")
    command = f"echo started > started.txt; sleep {marker}; echo late > late.txt"
    long_call = mcp("run_command", command=command)
    with ResponsesServer([first, long_call]) as server:
        proc = _codex_until(codex_bin, run, repo, tmp_path, server, wt / "started.txt")
        try:
            native = _native_codex(proc.pid)
            assert len(native) == 1, native
            os.kill(native[0], signal.SIGKILL)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    long_id, first_id = long_call.calls[0].call_id, first.calls[0].call_id
    run = reopen(run)
    entries = {e.call_id: e for e in run.entries()}
    # The MCP server recorded each call under the model's call id, in Codex's session.
    assert entries[first_id].status == CallStatus.succeeded, err
    assert entries[long_id].status == CallStatus.started, err
    session = entries[first_id].agent_session
    assert session and entries[long_id].agent_session == session
    from sandbox.recovery.continue_ import recorded_isolation

    assert recorded_isolation(run) not in (None, "off")  # Codex and its MCP server ran confined

    # The rollout is stored with the run at the session's end, each call mapped to its line.
    from sandbox.agent import transcripts

    stored = transcripts.latest(run, session)
    assert stored is not None and stored.index.agent == "codex", err
    assert {first_id, long_id} <= set(stored.index.calls)
    # Codex kept it in the run's own home (CODEX_HOME there), nothing in the user's ~/.codex.
    rollouts = list((Path(codex.config_home(run.dir)) / "sessions").glob(f"*/*/*/rollout-*-{session}.jsonl"))
    assert len(rollouts) == 1
    assert not (tmp_path / "home" / ".codex" / "sessions").exists()

    retry = mcp("run_command", command=command)  # the same input under a new call id
    after = mcp("write_file", path="src/after.py", content="AFTER = 1\n")
    with ResponsesServer([retry, after]) as server:
        started = time.monotonic()
        done = _sandbox("resume", run.run_id, "--continue", cwd=repo, env=codex_env(tmp_path, server, repo))
        requests = server.model_requests()
        refused = output_text(server.output(retry.calls[0].call_id))
    print(f"resume --continue: {requests[0].at - started:.2f} s to Codex's first request")
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"continuing codex session {session}" in done.stderr and long_id in done.stderr, done.stderr
    # The first request of the continued session carries the earlier turns and the note.
    opening = requests[0].body
    called = [i.get("call_id") for i in _items(opening, "function_call")]
    assert called[:2] == [first_id, long_id], called
    said = _user_text(opening)
    assert "Do the task." in said and NOTE_HEAD in said and long_id in said, said
    # The model's retry of the uncertain command is refused, with a reason it understands.
    assert "outcome is unknown" in refused, refused
    assert recorded_isolation(reopen(run)) not in (None, "off")  # and were relaunched confined
    run = reopen(run)
    entries = {e.call_id: e for e in run.entries()}
    assert entries[retry.calls[0].call_id].status == CallStatus.not_run
    assert entries[long_id].status == CallStatus.uncertain
    # The session goes on, recorded, in the same Codex session.
    assert entries[after.calls[0].call_id].status == CallStatus.succeeded
    assert entries[after.calls[0].call_id].agent_session == session
    assert (wt / "src/after.py").read_text() == "AFTER = 1\n" and not (wt / "late.txt").exists()

    # Approving the blocked call lifts the block: the same command would run again.
    from sandbox.agent.hosted import command_input
    from sandbox.run import approvals

    blocked = json.loads(json.dumps(entries[long_id].input)) if entries[long_id].input is not None else None
    spec = blocked if blocked is not None else command_input(["/bin/sh", "-c", command], None)
    assert approvals.is_denied(run, "run_command", spec) is not None
    approved = _sandbox("approve", run.run_id, long_id, cwd=repo)
    assert approved.returncode == 0, approved.stderr
    assert approvals.is_denied(reopen(run), "run_command", spec) is None


def _codex_under_run(codex_bin: str, repo: Path, run_id: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``sandbox run RUN -- codex exec ...`` (confined) to its end."""
    return cliserver.sandbox(  # forked by the tests' command server; stdin at its end at once
        *("run", run_id, "--", codex_bin, "exec", *NO_TRAFFIC, "--strict-config", "--color=never", "Do the task."),
        cwd=repo,
        env=env,
        input=b"",
        timeout=TIMEOUT,
        text=True,
    )


def test_codex_rewind_to_a_call_then_continue(codex_bin: str, repo: Path, tmp_path: Path) -> None:
    """Files back to just before the call; the next request carries exactly the turns before it."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    turns = [
        mcp("write_file", path="a.txt", content="one\n"),
        mcp("run_command", command="echo two > b.txt"),
        mcp("write_file", path="c.txt", content="three\n"),
    ]
    ids = [t.calls[0].call_id for t in turns]
    with ResponsesServer(turns) as server:
        session = _codex_under_run(codex_bin, repo, run.run_id, codex_env(tmp_path, server, repo))
    assert session.returncode == 0, session.stderr
    assert (wt / "b.txt").exists() and (wt / "c.txt").exists()
    original = list((Path(codex.config_home(run.dir)) / "sessions").glob("*/*/*/rollout-*.jsonl"))
    assert len(original) == 1
    before = original[0].read_bytes()

    later = mcp("write_file", path="d.txt", content="four\n")
    with ResponsesServer([later]) as server:
        env = codex_env(tmp_path, server, repo)
        done = _sandbox("rewind", run.run_id, "--to", ids[1], "--continue", cwd=repo, env=env)
        requests = server.model_requests()
    assert done.returncode == 0, done.stderr + done.stdout
    assert "forked just before call #" in done.stderr, done.stderr  # calls named as log numbers them
    opening = requests[0].body
    assert [i.get("call_id") for i in _items(opening, "function_call")] == [ids[0]]  # exactly the turns before
    assert "rewound this session to just before call" in _user_text(opening)
    assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists() and not (wt / "c.txt").exists()
    assert (wt / "d.txt").read_text() == "four\n"
    assert original[0].read_bytes() == before  # Codex's own rollout is never edited
    entries = {e.call_id: e for e in reopen(run).entries()}
    assert entries[later.calls[0].call_id].status == CallStatus.succeeded
    assert entries[later.calls[0].call_id].agent_session not in (None, entries[ids[0]].agent_session)


def test_a_pushed_codex_run_continues_its_conversation_in_another_clone(
    codex_bin: str, repo: Path, tmp_path: Path
) -> None:
    """Clone B (another CODEX_HOME) has never seen Codex's session: resume --continue writes its rollout there."""
    run = cli_start(repo)
    turns = [mcp("write_file", path="a.txt", content="one\n"), mcp("run_command", command="echo built > out.txt")]
    ids = [t.calls[0].call_id for t in turns]
    with ResponsesServer(turns) as server:
        session = _codex_under_run(codex_bin, repo, run.run_id, codex_env(tmp_path / "a", server, repo))
    assert session.returncode == 0, session.stderr
    other = push_into_another_clone(tmp_path, repo, run.run_id)
    stop_services(repo)

    later = mcp("write_file", path="b.txt", content="from b\n")
    try:
        with ResponsesServer([later]) as server:
            env = codex_env(tmp_path / "b", server, other)
            env["PATH"] = f"{Path(codex_bin).parent}{os.pathsep}{env['PATH']}"  # a fetched run's codex: B's own
            assert not list((tmp_path / "b" / "home" / ".codex").glob("sessions/*/*/*/rollout-*.jsonl"))
            done = _sandbox("resume", run.run_id, "--continue", cwd=other, env=env)
            requests = server.model_requests()
            wt_b = Path(_sandbox("path", run.run_id, cwd=other, env=env).stdout.strip())
    finally:
        stop_services(other)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "from the run's stored copy" in done.stderr, done.stderr
    assert [i.get("call_id") for i in _items(requests[0].body, "function_call")] == ids  # clone A's conversation
    assert (wt_b / "b.txt").read_text() == "from b\n" and (wt_b / "out.txt").read_text() == "built\n"
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, _workdir, _cwd_run = Project.discover(str(other))
    entries = {e.call_id: e for e in Run.open(project, run.run_id).entries()}
    assert entries[later.calls[0].call_id].status == CallStatus.succeeded
    assert entries[later.calls[0].call_id].agent_session == entries[ids[0]].agent_session  # the same session


def test_codex_sigint_without_a_terminal_leaves_the_running_call_interrupted(
    codex_bin: str, repo: Path, tmp_path: Path, marker: str
) -> None:
    """Ctrl-C as a script sends it (SIGINT to ``sandbox run``'s group, no terminal) while Codex's MCP tool runs
    a command: the call ends ``interrupted`` with the file it wrote, every time (its MCP server went with the
    session before it recorded anything, and the call was left ``started``, in 3 of 6 runs)."""
    run = cli_start(repo)
    wt = Path(run.worktree)
    command = f"echo started > started.txt; sleep {marker}; echo late > late.txt"
    long_call = mcp("run_command", command=command)
    with ResponsesServer([long_call]) as server:
        # A group of its own, as a script's job.
        proc = _codex_until(codex_bin, run, repo, tmp_path, server, wt / "started.txt", new_session=True)
        try:
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)
            _out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    entries = {e.call_id: e for e in reopen(run).entries()}
    call = entries[long_call.calls[0].call_id]
    assert call.status == CallStatus.interrupted, (call.status, call.error, err)
    assert [f.path for f in call.files] == ["started.txt"], err
    assert not (wt / "late.txt").exists()
    assert "bwrap" not in err, err
