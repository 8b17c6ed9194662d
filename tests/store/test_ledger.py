"""The ledger: durable before the tool runs, append-only, concurrent-safe, corruption detected."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.errors import CorruptionError
from sandbox.models import CallStatus, EventKind
from sandbox.run.fold import FOLD
from sandbox.run.run import Run
from sandbox.store.ledger import Ledger
from sandbox.store.project import Project
from tests.conftest import loose_path, replace_stored_object, sandbox_cmd, stored_object_data


def start_run(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    project, _, _ = Project.discover(run.worktree)
    return Run.open(project, run.run_id)


def test_started_event_survives_sigkill_of_the_recorder_and_the_tool(repo: Path) -> None:
    run = start_run(repo)
    # A recorder process: records `started`, prints the call id, then runs a long "tool" and is killed.
    code = (
        "import sys, time\n"
        "from sandbox.store.project import Project\nfrom sandbox.run.run import Run\n"
        f"p, _, _ = Project.discover({run.worktree!r})\n"
        f"run = Run.open(p, {run.run_id!r})\n"
        "call = run.start_call('send_email', {'to': 'a@b'}, idempotency='non_idempotent', replay='never')\n"
        "print(call, flush=True)\n"
        "open(run.worktree + '/half.txt', 'w').write('half')\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=repo)
    assert proc.stdout is not None
    call_id = proc.stdout.readline().decode().strip()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    entry = reopen(run).entry(call_id)
    assert entry.status == CallStatus.started
    assert entry.tool_name == "send_email" and entry.replay_policy.value == "never"
    # The call that never finished is findable as such.
    assert [e.call_id for e in reopen(run).entries() if e.status == CallStatus.started] == [call_id]


def test_cli_call_start_then_kill_then_status_shows_in_flight(repo: Path) -> None:
    run = start_run(repo)
    out = sandbox_cmd("call", "start", run.run_id, "--tool", "deploy", "--input", '{"env": "prod"}', cwd=repo)
    assert out.returncode == 0, out.stderr
    call_id = out.stdout.decode().strip()
    status = sandbox_cmd("status", run.run_id, "--json", cwd=repo)
    assert call_id in json.loads(status.stdout)["in_flight"]


def _recorder(repo: Path, run_id: str, tag: str, n: int) -> subprocess.Popen[bytes]:
    code = (
        "from sandbox.store.project import Project\nfrom sandbox.run.run import Run\n"
        f"p, _, _ = Project.discover({str(repo)!r})\n"
        f"run = Run.open(p, {run_id!r})\n"
        f"for i in range({n}):\n"
        f"    with run.tool_call('write_file', {{'i': i, 'w': {tag!r}}}, call_id=f'{tag}-{{i}}') as c:\n"
        f"        c.write(f'{tag}/file{{i}}.txt', f'{tag} {{i}}\\n')\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=repo, stderr=subprocess.PIPE)


def test_concurrent_recorders_lose_and_duplicate_nothing(repo: Path) -> None:
    run = start_run(repo)
    procs = [_recorder(repo, run.run_id, f"w{k}", 6) for k in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    fresh = reopen(run)
    events = fresh.events()
    ids = [e.event_id for _, e in events]
    assert len(ids) == len(set(ids))
    entries = {e.call_id: e for e in fresh.entries()}
    assert set(entries) == {f"w{k}-{i}" for k in range(3) for i in range(6)}
    assert all(e.status == CallStatus.succeeded and len(e.files) == 1 for e in entries.values())
    # Head is linear: walking parents from the head passes through every call's commit once.
    parent_of = {e.commit: e.parent_commit for e in fresh.entries()}
    chain, node = [], fresh.head()
    while node in parent_of:
        chain.append(node)
        node = parent_of[node]
    assert node == fresh.base and len(chain) == 18
    assert len(fresh.changed_paths()) == 18


def _loose_object_path(repo: Path, oid: str) -> Path:
    return loose_path(repo, oid)


@pytest.mark.parametrize("where", ["packed", "loose"])
def test_garbled_ledger_event_is_detected_not_read(repo: Path, where: str) -> None:
    """A garbled event that still inflates: its SHA-1 gives it away, loose or packed."""
    run = start_run(repo)
    with run.tool_call("a") as c:
        c.write("x.txt", "x")
    if where == "loose":
        run.start_call("b")  # a started event is one loose object
    tip = run.ledger_tip()
    assert tip is not None
    assert _loose_object_path(repo, tip).exists() == (where == "loose")
    data = stored_object_data(repo, tip)
    kind = b"call_started" if where == "loose" else b"call_succeeded"
    assert kind in data
    replace_stored_object(repo, tip, data.replace(kind, kind[:-1] + b"X"))
    with pytest.raises(CorruptionError):
        Ledger(reopen(run).repo, run.run_id, run.dir + "-nocache", FOLD).state()
    out = sandbox_cmd("log", run.run_id, cwd=repo)
    assert out.returncode != 0
    assert out.stderr.decode().count("\n") == 1 and b"Traceback" not in out.stderr


def test_truncated_ledger_object_is_detected(repo: Path) -> None:
    run = start_run(repo)
    run.start_call("a")  # a started event is one loose object
    tip = run.ledger_tip()
    assert tip is not None
    path = _loose_object_path(repo, tip)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(CorruptionError):
        Ledger(reopen(run).repo, run.run_id, run.dir + "-nocache", FOLD).events()


def test_fold_cache_is_rebuilt_when_stale_or_damaged(repo: Path) -> None:
    run = start_run(repo)
    for i in range(20):
        with run.tool_call("w", {"i": i}) as c:
            c.write(f"f{i}.txt", str(i))
    cache = Path(run.dir) / "ledger-cache.json"
    assert cache.exists()
    cache.write_text("{not json")
    assert len(reopen(run).entries()) == 20
    kinds = [e.kind for _, e in reopen(run).events()]
    assert kinds[0] == EventKind.run_started and kinds.count(EventKind.call_succeeded) == 20


def test_ledger_travels_with_plain_git_fetch(repo: Path, tmp_path: Path) -> None:
    run = start_run(repo)
    with run.tool_call("w") as c:
        c.write("moved.txt", "across machines\n")
    clone = tmp_path / "elsewhere"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    subprocess.run(["git", "fetch", "-q", str(repo), "refs/sandbox/*:refs/sandbox/*"], cwd=clone, check=True)
    project, _, _ = Project.discover(str(clone))
    assert project.run_ids() == [run.run_id]
    moved = Run.open(project, run.run_id)
    assert [e.files[0].path for e in moved.entries()] == ["moved.txt"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see the fsyncs")
def test_a_cli_call_is_durable_before_the_ledger_moves_and_before_it_returns(repo: Path) -> None:
    """Objects synced before the ref that names them moves; the ref and its directory synced after.

    Traced in a real CLI process: libgit2 decides once per repository whether to fsync refs, so a
    repository opened before the option was on would move the ledger without syncing it.
    """
    run = start_run(repo)
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.run(
        ["strace", "-f", "-y", "-e", "trace=fsync,rename", str(exe), "write", run.run_id, "traced.txt"],
        input=b"traced\n",
        capture_output=True,
        cwd=repo,
        env={**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    lines = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if "fsync(" in ln or "rename(" in ln]
    ref_dir = f"refs/sandbox/{run.run_id}"
    moves = [i for i, ln in enumerate(lines) if "rename(" in ln and f"{ref_dir}/ledger.lock" in ln]
    assert len(moves) == 2, "one ledger move for the started event, one for the finish"
    previous = 0
    for move in moves:
        before = lines[previous:move]
        assert any("fsync(" in ln and "/objects/" in ln for ln in before), "the event's objects are synced first"
        assert any("fsync(" in ln and f"{ref_dir}/ledger.lock>" in ln for ln in before), "the new ref is synced"
        after = lines[move + 1 : move + 3]
        assert any("fsync(" in ln and ln.rstrip().split(">")[0].endswith(ref_dir) for ln in after), after
        previous = move + 1
    packs = [ln for ln in lines if "fsync(" in ln and "/objects/pack/tmp_sandbox_" in ln]
    assert len(packs) == 2, "the finished call's objects went into one pack (pack and index synced)"
