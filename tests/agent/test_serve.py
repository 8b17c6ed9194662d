"""`sandbox serve`: the repository's background host of every run's hooks and watcher, and what starts it.

Real processes throughout: the host, hooks, ``sandbox exec`` and ``sandbox run``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.errors import SandboxError
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import alive, sandbox_cmd, wait_until, write
from tests.hook_fixtures import payload, reopen, start_run

AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "1"}


def common(run: Run) -> str:
    return run.project.common_dir


def ready_pid(run: Run) -> int:
    """Wait until the repository's host answers; its pid."""

    def check() -> int | None:
        pid = host.host_pid(common(run))
        answer = wire.Client(common(run)).ping()
        return pid if pid and answer and answer["pid"] == pid else None

    pid: int = wait_until(check)
    return pid


def log_text(run: Run) -> str:
    path = Path(wire.host_dir(common(run)), wire.LOG)
    return path.read_text() if path.exists() else ""


def hook(tool: str, which: str, run: Run, call_id: str, env: dict[str, str] | None = None) -> None:
    data = json.dumps(payload(tool, which, run.worktree, call_id)).encode()
    proc = sandbox_cmd("hook", "claude-code", cwd=run.worktree, input=data, env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def runs(repo: Path) -> Iterator[Callable[[], Run]]:
    """Makes runs of ``repo``; afterwards stops their services and drops them (a late one then exits)."""
    made: list[Run] = []

    def make() -> Run:
        made.append(start_run(repo))
        return made[-1]

    yield make
    pids = {host.host_pid(common(run)) for run in made}
    for run in made:
        host.stop_host(common(run))
    for run in made:
        try:
            Run.open(Project(run.project.common_dir), run.run_id).drop(force=True)
        except SandboxError:
            pass  # the test dropped it itself
    for pid in pids:
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_serve_detaches_answers_and_idles_out(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    proc = sandbox_cmd("serve", run.run_id, "--idle-exit", "2", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "hosting this repository's runs in the background" in proc.stdout.decode()
    pid = ready_pid(run)
    assert os.getsid(pid) != os.getsid(0)  # its own session: no terminal, no signals from ours
    hook("Read", "pre", run, "toolu_read1")  # answered through the socket: the idle clock restarts
    assert "start Read toolu_read1 via socket: ok" in log_text(run)
    wait_until(lambda: not alive(pid), timeout=60)
    assert "stopped: no request for 2 s" in log_text(run)
    for name in (wire.SOCKET, wire.INFO):
        assert not Path(wire.host_dir(common(run)), name).exists(), name
    assert not wire.host_alive(common(run))
    assert oct(os.stat(wire.host_dir(common(run))).st_mode & 0o777) == "0o700"  # only the user opens it


def test_one_host_per_repository(repo: Path, runs: Callable[[], Run]) -> None:
    run, other = runs(), runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    pid = ready_pid(run)
    again = sandbox_cmd("serve", other.run_id, cwd=repo)
    assert again.returncode == 0 and f"already hosted (pid {pid})" in again.stdout.decode()
    hook("Read", "pre", run, "toolu_one")
    hook("Read", "pre", other, "toolu_two")
    assert host.host_pid(common(run)) == pid and log_text(run).count("hosting the runs of") == 1
    assert f"{run.run_id} start Read toolu_one via socket: ok" in log_text(run)
    assert f"{other.run_id} start Read toolu_two via socket: ok" in log_text(run)


def test_the_socket_path_imports_neither_pygit2_nor_pydantic(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    script = str(Path(sys.executable).parent / "sandbox")
    data = json.dumps(payload("Bash", "pre", run.worktree, "toolu_imports")).encode()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, "hook", "claude-code"],
        cwd=run.worktree,
        input=data,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "start Bash toolu_imports via socket: ok" in log_text(run)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines() if "|" in line}
    assert "sandbox.agent.hookproto" in imported
    heavy = {"sandbox.run.run", "sandbox.models", "sandbox.store.ledger"}
    assert not {m for m in imported if m.split(".")[0] in ("pygit2", "pydantic", "watchdog") or m in heavy}


def served(run: Run) -> bool:
    status = wire.status(common(run))
    return status is not None and run.run_id in status["runs"]


def test_drop_makes_the_host_forget_the_run(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    pid = ready_pid(run)
    hook("Read", "pre", run, "toolu_before_drop")
    assert served(run)
    worktree = run.worktree
    dropped = sandbox_cmd("drop", "--force", run.run_id, cwd=repo)
    assert dropped.returncode == 0, dropped.stderr
    wait_until(lambda: not served(run), timeout=15)
    assert alive(pid)  # other runs of the repository may still need it
    assert not Path(run.dir).exists() and not Path(worktree).exists()
    assert f"run {run.run_id}: no longer served (asked to forget it: it is being dropped)" in log_text(run)


def test_host_forgets_a_run_whose_worktree_disappears(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    hook("Read", "pre", run, "toolu_before_move")
    os.rename(run.worktree, run.worktree + ".moved")
    try:
        wait_until(lambda: not served(run), timeout=30)
    finally:
        os.rename(run.worktree + ".moved", run.worktree)
    assert f"run {run.run_id}: no longer served (the run's worktree is gone)" in log_text(run)


def test_a_hook_that_finds_no_host_starts_one_and_hands_it_its_event(runs: Callable[[], Run]) -> None:
    run = runs()
    hook("Write", "pre", run, "toolu_w1", env=AUTOSTART)  # no host: it spawns one and waits for it
    assert reopen(run).entry("toolu_w1").status.value == "started"
    ready_pid(run)
    assert f"{run.run_id} start Write toolu_w1 via socket: ok" in log_text(run)
    write(Path(run.worktree), "src/greet.py", "def greet():\n    return 'hi'\n")
    hook("Write", "post", run, "toolu_w1", env=AUTOSTART)
    assert "finish Write toolu_w1 via socket: ok: toolu_w1 succeeded, 1 file(s)" in log_text(run)
    entry = reopen(run).entry("toolu_w1")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["src/greet.py"]


def test_a_hook_records_in_its_own_process_when_the_host_does_not_come_up(runs: Callable[[], Run]) -> None:
    """A host that cannot start (its socket path is taken by a directory) costs the hook a wait, never the event."""
    run = runs()
    os.makedirs(os.path.join(wire.socket_path(common(run)), "in-the-way"))
    started = time.monotonic()
    hook("Read", "pre", run, "toolu_nohost", env=AUTOSTART)
    assert reopen(run).entry("toolu_nohost").status.value == "started"
    assert time.monotonic() - started < 30
    assert not wire.host_alive(common(run))


@pytest.mark.parametrize("off_by", ["settings", "environment"])
def test_autostart_off(repo: Path, runs: Callable[[], Run], off_by: str) -> None:
    if off_by == "settings":
        write(repo, ".sandbox.toml", "[hooks]\nautostart = false\n")
    run = runs()
    hook("Read", "pre", run, "toolu_r1", env=AUTOSTART if off_by == "settings" else None)
    time.sleep(1.0)
    assert not wire.host_alive(common(run)) and not Path(wire.socket_dir(common(run)), wire.SPAWNED).exists()
    assert reopen(run).entry("toolu_r1").status.value == "started"


def test_bash_through_a_live_service_records_exactly_its_changes(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    wt = Path(run.worktree)
    write(wt, "stray.txt", "changed before the call: a scan would take it\n")
    hook("Bash", "pre", run, "toolu_b1")
    write(wt, "build/out.txt", "built\n")
    write(wt, "README.md", "rewritten\n")
    (wt / "src" / "util.py").unlink()
    hook("Bash", "post", run, "toolu_b1")
    assert "finish Bash toolu_b1 via socket: ok" in log_text(run)
    entry = reopen(run).entry("toolu_b1")
    assert sorted(f.path for f in entry.files) == ["README.md", "build/out.txt", "src/util.py"]


def test_killed_host_the_next_hook_starts_another_and_the_call_is_scanned(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    pid = ready_pid(run)
    wt = Path(run.worktree)
    hook("Bash", "pre", run, "toolu_b2")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), timeout=15)
    write(wt, "after.txt", "made while no service ran\n")
    hook("Bash", "post", run, "toolu_b2", env=AUTOSTART)  # stale socket: a new host, which never saw the start
    new_pid = ready_pid(run)
    assert new_pid != pid
    assert "finish Bash toolu_b2 via socket: ok: toolu_b2 succeeded, 1 file(s)" in log_text(run)  # by a scan
    entry = reopen(run).entry("toolu_b2")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["after.txt"]
    hook("Read", "pre", run, "toolu_r2")
    assert "start Read toolu_r2 via socket: ok" in log_text(run)


def test_sandbox_run_uses_the_repositorys_host(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    pid = ready_pid(run)
    proc = sandbox_cmd("run", run.run_id, "--hooks", "none", "--", "sh", "-c", "echo x > a.txt", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert alive(pid) and host.host_pid(common(run)) == pid and "note:" not in proc.stderr.decode()
    assert [f.path for e in reopen(run).entries() for f in e.files] == ["a.txt"]


def test_hooks_install_starts_the_service(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    proc = sandbox_cmd("hooks", "install", "claude-code", run.run_id, cwd=repo, env=AUTOSTART)
    assert proc.returncode == 0, proc.stderr
    assert "starting the repository's host in the background" in proc.stdout.decode()
    ready_pid(run)


def test_exec_autostarts_the_service_and_the_next_exec_uses_its_watcher(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    first = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo one > one.txt", cwd=repo, env=AUTOSTART)
    assert first.returncode == 0, first.stderr
    ready_pid(run)
    second = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", "echo two > two.txt", cwd=repo, env=AUTOSTART)
    assert second.returncode == 0, second.stderr
    entries = reopen(run).entries()
    assert [[f.path for f in e.files] for e in entries[-2:]] == [["one.txt"], ["two.txt"]]
    assert f"{run.run_id} start run_command" in log_text(run)


def test_exec_does_not_autostart_when_turned_off(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    proc = sandbox_cmd("exec", run.run_id, "--", "true", cwd=repo, env={"SANDBOX_HOOK_AUTOSTART": "0"})
    assert proc.returncode == 0, proc.stderr
    time.sleep(0.5)
    assert host.host_pid(common(run)) is None


def test_exec_through_the_host_records_exactly_its_changes_without_heavy_imports(
    repo: Path, runs: Callable[[], Run]
) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    write(Path(run.worktree), "stray.txt", "changed before the call: not this call's\n")
    script = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, "exec", run.run_id, "--call-id", "call_hosted1", "--",
         "sh", "-c", "echo made > made.txt; rm src/util.py"],
        cwd=repo, capture_output=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert "call_hosted1 succeeded (exit 0), 2 file(s) changed" in proc.stderr.decode()
    assert "start run_command call_hosted1 via socket: ok" in log_text(run)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines() if "|" in line}
    heavy = {"sandbox.run.run", "sandbox.models", "sandbox.store.ledger"}
    assert not {m for m in imported if m.split(".")[0] in ("pygit2", "pydantic", "watchdog") or m in heavy}
    entry = reopen(run).entry("call_hosted1")
    assert entry.status.value == "succeeded" and sorted(f.path for f in entry.files) == ["made.txt", "src/util.py"]
    assert entry.summary == "sh -c echo made > made.txt; rm src/util.py"


def test_exec_through_the_host_passes_the_exit_code_and_records_a_failure(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    proc = sandbox_cmd("exec", run.run_id, "--call-id", "call_hosted2", "--", "sh", "-c", "echo x > x.txt; exit 3",
                       cwd=repo)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    entry = reopen(run).entry("call_hosted2")
    assert entry.status.value == "failed" and entry.result["exit_code"] == 3
    assert set(entry.result) == {"exit_code", "output_tail"}  # the output's tails, kept beside (#34)
    assert [f.path for f in entry.files] == ["x.txt"]


def test_exec_whose_host_dies_mid_command_records_the_finish_itself(repo: Path, runs: Callable[[], Run]) -> None:
    """The start went through the host (durable); the host is killed while the command runs."""
    run = runs()
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    pid = ready_pid(run)
    command = f"echo during > during.txt; kill -9 {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.05; done"
    # --isolate off: confined, the command could not see (nor kill) the host outside its PID namespace.
    proc = sandbox_cmd(
        "exec", run.run_id, "--isolate", "off", "--call-id", "call_hosted3", "--", "sh", "-c", command, cwd=repo
    )
    assert proc.returncode == 0, proc.stderr
    assert "start run_command call_hosted3 via socket: ok" in log_text(run)
    assert "finish run_command call_hosted3" not in log_text(run)
    entry = reopen(run).entry("call_hosted3")
    assert entry.status.value == "succeeded" and [f.path for f in entry.files] == ["during.txt"]


def test_exec_refused_by_the_host_does_not_run_the_command(repo: Path, runs: Callable[[], Run]) -> None:
    run = runs()
    run.plan_call("run_command", {"argv": ["touch", "denied.txt"]}, call_id="call_denied")
    run.deny("call_denied", reason="not today")
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    ready_pid(run)
    proc = sandbox_cmd("exec", run.run_id, "--call-id", "call_denied", "--", "touch", "denied.txt", cwd=repo)
    assert proc.returncode == 1 and "denied" in proc.stderr.decode()
    assert len(proc.stderr.decode().strip().splitlines()) == 1
    assert not (Path(run.worktree) / "denied.txt").exists()
