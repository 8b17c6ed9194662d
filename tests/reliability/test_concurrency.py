"""Concurrency with real processes: many writers on one run, applies on one tree, gc racing start/drop,
and a writer paused with SIGSTOP while the run is resumed elsewhere (fencing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import git, tree_digest, user_state, write

from tests import cliserver

from .helpers import (
    TIMEOUT,
    assert_fsck_clean,
    has_command,
    live_run_ids,
    ok,
    open_run,
    sandbox_things,
    things_of,
)

WRITER = textwrap.dedent(
    """
    import sys
    from sandbox.store.project import Project
    from sandbox.run.run import Run

    root, run_id, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    project, _, _ = Project.discover(root)
    run = Run.open(project, run_id)
    for k in range(count):
        with run.tool_call("write_file", {"writer": name, "k": k}, call_id=f"{name}-{k}") as call:
            call.write(f"out/{name}/{k}.txt", f"{name} {k}\\n")
        print(call.call_id, flush=True)  # acknowledged: the finish returned
    """
)

CLI_WRITER = textwrap.dedent(
    """
    set -e
    for k in $(seq 0 $(($4 - 1))); do
      cid=$("$5" -C "$1" call start "$2" --tool cli --call-id "$3-$k")
      wt=$("$5" -C "$1" path "$2")
      mkdir -p "$wt/out/$3" && echo "$3 $k" > "$wt/out/$3/$k.txt"
      "$5" -C "$1" call finish "$2" "$cid" --status succeeded --path "out/$3/$k.txt" > /dev/null
      echo "$cid"
    done
    """
)


def writer(folder: Path, *args: str) -> Any:
    """A process running :data:`WRITER` with ``args`` (forked by the tests' command server, as
    :func:`tests.cliserver.popen` does; stdout and stderr piped)."""
    script = folder / "writer.py"
    if not script.exists():
        script.write_text(WRITER)
    return cliserver.popen(*args, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, script=str(script))


def start_run(root: Path) -> str:
    return str(json.loads(ok("start", "--json", cwd=root))["run"])


def wait_all(procs: list[Any], timeout: float = 180.0) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + timeout
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise AssertionError(f"a concurrent process hung: {stderr.decode()}") from None
        out.append((proc.returncode, stdout.decode(), stderr.decode()))
    return out


@pytest.mark.parametrize("writers,calls", [(8, 6)])
def test_eight_writers_on_one_run(user_repo: Path, tmp_path: Path, writers: int, calls: int) -> None:
    """8 processes record calls on one run at once: nothing lost, nothing duplicated, one head chain."""
    run_id = start_run(user_repo)
    exe = cliserver.stand_in(tmp_path)  # each ``sandbox`` of the shell writers forked by the command server
    before = user_state(user_repo), tree_digest(user_repo)
    procs = []
    cli_writers = 2
    for i in range(writers):
        name = f"w{i}"
        if i < cli_writers:  # two writers speak the CLI protocol, the rest use the library
            argv = ["sh", "-c", CLI_WRITER, "sh", str(user_repo), run_id, name, str(calls // 2), exe]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        else:
            procs.append(writer(tmp_path, str(user_repo), run_id, name, str(calls)))
    results = wait_all(procs)
    acked: list[str] = []
    for code, stdout, stderr in results:
        assert code == 0, stderr
        acked += stdout.split()
    expected = cli_writers * (calls // 2) + (writers - cli_writers) * calls
    assert len(acked) == expected

    run = open_run(user_repo, run_id)
    events = run.events()
    ids = [e.event_id for _oid, e in events]
    assert len(ids) == len(set(ids)), "duplicated ledger events"
    per_call: dict[str, list[str]] = {}
    for _oid, event in events:
        if event.call_id:
            per_call.setdefault(event.call_id, []).append(event.kind.value)
    for cid in acked:
        assert per_call.get(cid) == ["call_started", "call_succeeded"], f"{cid}: {per_call.get(cid)}"
    assert len(events) == 1 + 2 * expected, "events lost or extra events"
    state = run.state()
    assert sorted(state.order) == sorted(acked)
    # Every call's commit is on one chain, and the head has every file every writer wrote.
    head_files = set(git(user_repo, "ls-tree", "-r", "--name-only", str(state.head), "out").split())
    assert head_files == {f"out/{cid.rsplit('-', 1)[0]}/{cid.rsplit('-', 1)[1]}.txt" for cid in acked}
    chain = git(user_repo, "rev-list", "--first-parent", f"{run.base}..{state.head}").split()
    assert len(chain) == expected
    assert (user_state(user_repo), tree_digest(user_repo)) == before
    assert_fsck_clean(user_repo)


def test_four_runs_apply_to_one_tree(user_repo: Path) -> None:
    """4 runs apply at once: serialized by the tree's lock, each one whole or not at all."""
    if not has_command("apply"):
        pytest.skip("'sandbox apply' does not exist yet")
    runs = []
    for i in range(4):
        run_id = start_run(user_repo)
        run = open_run(user_repo, run_id)
        with run.tool_call("write", {}) as call:
            for k in range(5):
                call.write(f"applied/r{i}/f{k}.txt", f"run {i} file {k}\n")
            call.write("shared.txt", f"run {i} wins\n")  # every run creates it: only one can apply it
        runs.append(run_id)
    before_user = user_state(user_repo)
    digest = tree_digest(user_repo)
    procs = [
        cliserver.popen("apply", r, "--json", cwd=user_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for r in runs
    ]
    results = wait_all(procs)
    winners = [runs[i] for i, (code, _o, _e) in enumerate(results) if code == 0]
    assert len(winners) == 1, f"exactly one run can create shared.txt: {[(c, e) for c, _o, e in results]}"
    for i, (code, _stdout, stderr) in enumerate(results):
        assert "Traceback" not in stderr
        files = {f"applied/r{i}/f{k}.txt" for k in range(5)}
        present = {f for f in files if (user_repo / f).exists()}
        if code == 0:
            assert present == files
            for k in range(5):
                assert (user_repo / f"applied/r{i}/f{k}.txt").read_text() == f"run {i} file {k}\n"
        else:
            assert code == 1, stderr
            assert not present, f"run {i} was half-applied: {present}"
    w = runs.index(winners[0])
    assert (user_repo / "shared.txt").read_text() == f"run {w} wins\n"
    after = tree_digest(user_repo)
    changed = {p for p in set(after) | set(digest) if after.get(p) != digest.get(p)}
    assert changed == {"shared.txt"} | {f"applied/r{w}/f{k}.txt" for k in range(5)}
    assert user_state(user_repo) == before_user
    assert not list(user_repo.rglob(".sandbox-tmp-*")), "temp files left in the user's tree"


def test_start_and_drop_race_with_gc(user_repo: Path) -> None:
    """gc running while runs start and drop never removes a live or starting run."""
    victims = [start_run(user_repo) for _ in range(3)]
    for run_id in victims:
        ok("write", run_id, "v.txt", cwd=user_repo, input=b"v\n")
    procs: list[tuple[str, Any]] = []

    def spawn(kind: str, *args: str) -> None:
        procs.append(
            (
                kind,
                cliserver.popen(*args, cwd=user_repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
            )
        )

    for i in range(4):
        spawn("start", "start", "--json")
        spawn("gc", "gc")
        if i < len(victims):
            spawn("drop", "drop", victims[i], "--force")
    started = []
    for kind, proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT * 3)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{kind} hung") from None
        assert proc.returncode == 0, f"{kind}: {stderr.decode()}"
        if kind == "start":
            started.append(json.loads(stdout)["run"])
    live = live_run_ids(user_repo)
    assert live == set(started), f"live {live}, acknowledged starts {started}"
    for run_id in started:
        run = open_run(user_repo, run_id)
        assert run.worktree_exists(), f"gc removed the worktree of live run {run_id}"
        assert git(user_repo, "rev-parse", f"refs/sandbox/{run_id}/base").strip() == run.base
        ok("write", run_id, "alive.txt", cwd=user_repo, input=b"alive\n")
    ok("gc", cwd=user_repo)
    things = sandbox_things(user_repo)
    for run_id in victims:
        assert not things_of(things, run_id), things_of(things, run_id)
    assert things["worktrees"] == set(started) and things["runs"] == set(started)
    assert_fsck_clean(user_repo)


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def test_paused_writer_is_fenced_by_resume(user_repo: Path) -> None:
    """A writer frozen mid-call cannot commit after the run was resumed elsewhere."""
    if not has_command("resume"):
        pytest.skip("'sandbox resume' does not exist yet")
    run_id = start_run(user_repo)
    ok("write", run_id, "first.txt", cwd=user_repo, input=b"first\n")
    # The command writes a file, then stops its own recording process (its parent) mid-call.
    script = "echo stale > stale.txt; kill -STOP $PPID"
    proc = cliserver.popen(
        # --isolate off: a confined command cannot see its recorder (another PID namespace) to stop it.
        *("exec", run_id, "--isolate", "off", "--call-id", "call_paused", "--", "sh", "-c", script),
        cwd=user_repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not _stopped(proc.pid):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the writer never paused"
            time.sleep(0.02)
        report = json.loads(ok("resume", run_id, "--json", cwd=user_repo))
        assert "call_paused" in json.dumps(report.get("uncertain"))
        # What the frozen call wrote so far is booked to it by the resume (its one owner): the head the
        # resume left is the one the stale writer must not move.
        head = open_run(user_repo, run_id).state().head
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    _stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode != 0, "the stale writer's finish was accepted"
    assert "Traceback" not in stderr.decode()
    run = open_run(user_repo, run_id)
    assert run.state().head == head, "the stale writer moved the head"
    assert run.entry("call_paused").status.value == "uncertain"
    ok("write", run_id, "next.txt", cwd=user_repo, input=b"next\n")
    assert_fsck_clean(user_repo)


def test_writers_racing_a_drop(user_repo: Path, tmp_path: Path) -> None:
    """Calls racing a drop either finish before it or are refused cleanly; nothing is left behind."""
    run_id = start_run(user_repo)
    procs = [writer(tmp_path, str(user_repo), run_id, f"w{i}", "5") for i in range(3)]
    time.sleep(0.3)
    ok("drop", run_id, "--force", cwd=user_repo)
    # Writers that lost the race fail (the run is gone); none may hang or resurrect the run.
    wait_all(procs)
    assert run_id not in live_run_ids(user_repo), RESURRECT
    ok("gc", cwd=user_repo)
    leftovers = things_of(sandbox_things(user_repo), run_id)
    assert not leftovers, leftovers
    write(user_repo, "after.txt", "user\n")
    assert_fsck_clean(user_repo)


RESURRECT = "a call started concurrently with 'sandbox drop' must not re-create the dropped run's ledger"


def test_append_after_drop_does_not_resurrect_the_run(user_repo: Path) -> None:
    """A writer that read the run before a drop and appends after it must be refused."""
    from sandbox.errors import SandboxError
    from sandbox.models import CallSpec, EventKind

    run_id = start_run(user_repo)
    stale = open_run(user_repo, run_id)
    epoch = stale.state().epoch  # what start_call reads before it appends
    ok("drop", run_id, "--force", cwd=user_repo)
    spec = CallSpec(tool_name="t", input_hash="h")
    with pytest.raises(SandboxError):
        stale.record(EventKind.call_started, "call_late", call=spec, epoch=epoch)
    assert run_id not in live_run_ids(user_repo)
    # What the late writer is told says what happened: the run was dropped, not "damaged".
    with pytest.raises(SandboxError, match="no longer exists \\(it was dropped\\)"):
        stale.state()


def test_a_write_after_the_worktree_was_removed_does_not_make_the_home_again(user_repo: Path) -> None:
    """The window test_writers_racing_a_drop hits now and then, made certain: the drop removed the
    worktree between a call's path checks and its write. The write is refused; no directory of the
    removed run comes back (gc could not have told it was the sandbox's)."""
    import shutil

    from sandbox.errors import PathRefusedError

    run = open_run(user_repo, start_run(user_repo))
    with pytest.raises(PathRefusedError, match="no longer exists"), run.tool_call("write_file", {}) as call:
        shutil.rmtree(run.worktree)
        call.write("out/w0/0.txt", "late\n")
    assert not os.path.exists(run.worktree)
