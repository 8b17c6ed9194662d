"""The unconfined sandbox never reads an agent's file by name (docs/design.md, "Reading what the agent wrote").

An agent writes its worktree while the host (or ``sandbox exec``) records it, outside the agent's
confinement. Each test here pits a real hostile process against the reader:

* a loop of ``renameat2(RENAME_EXCHANGE)`` swapping a file with a symlink to a secret outside: the
  secret is never hashed into the run (it was: ``lstat`` checked, then ``open`` by name followed);
* the same swap with a FIFO: recording never blocks (it did, for ever, holding the host's lock);
* a 4 GiB sparse file: the reader's resident memory stays bounded, the file is refused by size
  and blob id (it was read whole: 4 GiB resident);
* through real bubblewrap, the call that made a sparse file, a 3,000-deep tree or a FIFO ends
  ``failed`` with its reason, the command's exit code is passed through, and later calls record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pygit2
import pytest
from conftest import alive, make_repo, sandbox_cmd

from sandbox.agent import host

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not for the agent\n"

#: A hostile process: swaps two names of one directory with renameat2(RENAME_EXCHANGE) until killed.
RACER = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = (os.fsencode(p) for p in sys.argv[1:3])
    print("ready", flush=True)
    while True:
        libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    """
)

#: The reader, in its own process (its memory measured, its hang bounded): captures the paths given
#: again and again for a few seconds; prints what it recorded and its peak resident memory.
READER = textwrap.dedent(
    """
    import json, resource, sys, time
    import pygit2
    from sandbox.errors import SandboxError
    from sandbox.store import objects
    from sandbox.store.capture import capture

    worktree, seconds, *paths = sys.argv[1:]
    repo = pygit2.Repository(worktree)
    head_tree = objects.commit_tree(repo, str(repo.head.target))
    recorded, refused, rounds = set(), set(), 0
    until = time.monotonic() + float(seconds)
    while True:
        rounds += 1
        try:
            cap = capture(repo, worktree, head_tree, paths)
            recorded.update(e.oid for e in cap.changes.values() if e is not None)
        except SandboxError as exc:
            refused.add(exc.message)
        if time.monotonic() > until:
            break
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"recorded": sorted(recorded), "refused": sorted(refused), "rounds": rounds, "rss_mib": rss}))
    """
)


def _read(worktree: Path, seconds: float, *paths: str, timeout: float = 60) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", READER, str(worktree), str(seconds), *paths],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reader hung (more than {timeout} s)")
    assert proc.returncode == 0, proc.stderr.decode()
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def _racing(cwd: Path, a: str, b: str) -> subprocess.Popen[bytes]:
    racer = subprocess.Popen([sys.executable, "-c", RACER, a, b], cwd=cwd, stdout=subprocess.PIPE)
    assert racer.stdout is not None and racer.stdout.readline() == b"ready\n"
    return racer


def _stop(racer: subprocess.Popen[bytes]) -> None:
    racer.kill()
    racer.wait()


def test_a_file_swapped_with_a_link_to_a_secret_never_hashes_the_secret(tmp_path: Path) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET)
    wt = make_repo(tmp_path / "wt", {"a.txt": "innocent\n"})
    (wt / "a.txt").write_text("innocent, changed\n")
    os.symlink(secret, wt / "swap")
    racer = _racing(wt, "a.txt", "swap")
    try:
        out = _read(wt, 3.0, "a.txt", "swap")
    finally:
        _stop(racer)
    assert out["rounds"] > 50
    assert str(pygit2.hash(SECRET)) not in out["recorded"]  # type: ignore[operator]
    repo = pygit2.Repository(str(wt))
    assert str(pygit2.hash(SECRET)) not in repo.odb


def test_a_file_swapped_with_a_fifo_never_blocks_the_reader(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", {"a.txt": "innocent\n"})
    (wt / "a.txt").write_text("changed\n")
    os.mkfifo(wt / "fifo")
    racer = _racing(wt, "a.txt", "fifo")
    try:
        out = _read(wt, 3.0, "a.txt", "fifo", timeout=30)
    finally:
        _stop(racer)
    assert out["rounds"] > 50


def test_a_sparse_file_of_4_gib_is_refused_by_size_and_id_in_bounded_memory(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", {"a.txt": "a\n"})
    with open(wt / "big.bin", "wb") as fh:
        fh.truncate(4 * 1024**3)
    out = _read(wt, 0, "big.bin", timeout=120)
    assert out["recorded"] == []
    (message,) = out["refused"]  # type: ignore[misc]
    assert re.search(r"'big.bin' is 4294967296 bytes \(blob (id not computed|[0-9a-f]{40})", message)
    # Against the same reader on a 2-byte file (its imports, pygit2's caches): a whole read would add 4 GiB.
    baseline = _read(wt, 0, "a.txt")
    assert out["rss_mib"] < baseline["rss_mib"] + 100, (out, baseline)  # type: ignore[operator]


# -- through real bubblewrap: the attack from inside a confined `sandbox exec` ----------------------

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

DEEP = "python3 -c \"import os\nfor _ in range(3000): os.mkdir('d'); os.chdir('d')\nopen('f', 'w').write('x')\""


def _call(repo: Path, run_id: str, call_id: str) -> dict[str, object]:
    proc = sandbox_cmd("log", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    calls = json.loads(proc.stdout)
    found: dict[str, object] = next(c for c in calls if c["call_id"] == call_id)
    return found


@needs_bwrap
@pytest.mark.parametrize("hosted", [False, True], ids=["in-process", "through-the-host"])
@pytest.mark.parametrize(
    ("plant", "code"),
    [("truncate -s 4G big.bin; exit 3", 3), (DEEP, 1)],
    ids=["sparse-4g", "deep-3000"],
)
def test_a_call_whose_recording_fails_ends_failed_with_its_reason(
    repo: Path, plant: str, code: int, hosted: bool
) -> None:
    env = {"SANDBOX_HOOK_AUTOSTART": "1" if hosted else "0"}
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    try:
        if hosted:  # the host is up (and watching) before the agent plants its file
            assert sandbox_cmd("exec", run_id, "--", "true", cwd=repo, env=env).returncode == 0
        _fails_then_records(repo, run_id, plant, code, env)
    finally:
        common = str(repo / ".git")
        pid = host.host_pid(common)
        host.stop_host(common)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


def _fails_then_records(repo: Path, run_id: str, plant: str, code: int, env: dict[str, str]) -> None:
    wrapper = "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); " + (
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024); sys.exit(p.returncode)"
    )
    exe = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.run(
        [sys.executable, "-c", wrapper, exe, "exec", run_id, "--json", "--", "sh", "-c", plant],
        cwd=repo,
        env={**os.environ, **env},
        capture_output=True,
        timeout=300,
        check=False,
    )
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    assert proc.returncode == code, err  # the command's own exit code (1 when it exited 0 unrecorded)
    *_, rss = proc.stdout.decode().split()
    assert int(rss) < 300, f"sandbox exec reached {rss} MiB"
    call_id = json.loads(proc.stdout.decode().rsplit("\n", 2)[0])["call_id"]
    call = _call(repo, run_id, call_id)
    assert call["status"] == "failed", call
    assert "could not be recorded" in str(call.get("error")), call
    # Later calls work once the agent removed what could not be recorded.
    later = sandbox_cmd("exec", run_id, "--", "sh", "-c", "rm -rf big.bin d; echo after > after.txt", cwd=repo, env=env)
    assert later.returncode == 0, later.stderr.decode()
    assert "1 file(s) changed" in later.stderr.decode(), later.stderr.decode()
