"""Kernel surfaces a confined command must not reach (issue #31, item 4): the user's SysV IPC, the
kernel keyring, a writable ``/dev``, a live session's network proxy socket.

Each attack runs from inside a real ``sandbox exec`` (real bubblewrap).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import sandbox_cmd

from sandbox.confine import bwrap

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def start(repo: Path) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    run_id: str = json.loads(proc.stdout)["run"]
    return run_id


def inside(repo: Path, run_id: str, *argv: str, network: str = "off") -> subprocess.CompletedProcess[bytes]:
    return sandbox_cmd("exec", run_id, "--network", network, "--", *argv, cwd=repo)


@pytest.mark.skipif(shutil.which("ipcmk") is None, reason="needs ipcmk (util-linux)")
def test_the_users_sysv_shared_memory_is_not_visible(repo: Path) -> None:
    made = subprocess.run(["ipcmk", "-M", "4096"], capture_output=True, text=True, check=True)
    shmid = made.stdout.strip().rsplit(" ", 1)[-1]
    try:
        with open("/proc/sysvipc/shm", encoding="ascii") as fh:
            assert any(line.split()[1] == shmid for line in fh.readlines()[1:] if line.split())
        run_id = start(repo)
        proc = inside(repo, run_id, "cat", "/proc/sysvipc/shm")
        assert proc.returncode == 0, proc.stderr.decode()
        ids = [line.split()[1] for line in proc.stdout.decode().splitlines()[1:] if line.split()]
        assert shmid not in ids, proc.stdout.decode()
    finally:
        subprocess.run(["ipcrm", "-m", shmid], capture_output=True, check=False)


KEYCTL = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
ret = libc.syscall(nr, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, create: no
print(ret, ctypes.get_errno())
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="keyctl numbers known here")
def test_keyring_calls_are_refused(repo: Path) -> None:
    run_id = start(repo)
    proc = inside(repo, run_id, "python3", "-c", KEYCTL)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["-1", "1"], proc.stdout.decode()  # EPERM


URING = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
ret = libc.syscall(425, 1, params)  # io_uring_setup: the same number on every table
print(ret, ctypes.get_errno())
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="the filter knows these machines")
def test_io_uring_is_refused(repo: Path) -> None:
    """io_uring is a large kernel surface (most of the kernel exploits of recent bounty programs) that
    no build tool needs: its calls fail with EPERM inside, as Docker's default profile does."""
    run_id = start(repo)
    proc = inside(repo, run_id, "python3", "-c", URING)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["-1", "1"], proc.stdout.decode()  # EPERM


def test_keyring_numbers_in_the_filter() -> None:
    from tests.agent.test_confine import _seccomp_verdict

    program = bwrap.seccomp_program("x86_64", ioctls=False)
    assert program is not None
    for nr in (248, 249, 250):
        assert _seccomp_verdict(program, 0xC000003E, nr, 0) == "deny"
    for nr in (286, 287, 288):
        assert _seccomp_verdict(program, 0x40000003, nr, 0) == "deny"
    assert _seccomp_verdict(program, 0xC000003E, 16, 0x5412) == "allow"  # TIOCSTI only with the terminal


def test_dev_is_read_only_apart_from_its_device_nodes(repo: Path) -> None:
    run_id = start(repo)
    script = (
        "echo x > /dev/null && echo devnull-ok; "
        "(echo x > /dev/planted) 2>/dev/null && echo planted || echo dev-refused; "
        "head -c 1024 /dev/zero > /dev/shm/f && echo shm-ok"
    )
    proc = inside(repo, run_id, "sh", "-c", script)
    assert proc.stdout.decode().split() == ["devnull-ok", "dev-refused", "shm-ok"], proc.stderr.decode()


def test_a_sessions_proxy_socket_is_not_reachable_from_another_command(repo: Path) -> None:
    """A live ``sandbox run --network allow`` session listens on its run's proxy socket; an
    ``exec --network off`` of the same run must not reach the allowlisted hosts through it."""
    from sandbox.confine.policy import PROXY_SOCKET
    from sandbox.store import layout

    run_id = start(repo)
    path = os.path.join(layout.run_dir(str(repo / ".git"), run_id), PROXY_SOCKET)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # A long path (a test's temporary directory) is reached through the directory's descriptor, as the
    # proxy itself binds it (a socket's path may hold 107 bytes at most).
    where = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    with socket.socket(socket.AF_UNIX) as listening:  # the session's proxy, as far as a client can tell
        listening.bind(f"/proc/self/fd/{where}/{os.path.basename(path)}")
        os.close(where)
        listening.listen(1)
        probe = (
            "import os, socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
            "try:\n    d = os.open(os.path.dirname(sys.argv[1]), os.O_PATH | os.O_DIRECTORY)\n"
            "    s.connect(f'/proc/self/fd/{d}/' + os.path.basename(sys.argv[1])); print('connected')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
        )
        proc = inside(repo, run_id, "python3", "-c", probe, path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().startswith("refused"), proc.stdout.decode()


INOTIFY = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 200 and libc.inotify_init() >= 0:
    n += 1
print(n)
"""


def test_inotify_instances_are_bounded_in_the_sandboxs_own_namespace(tmp_path: Path) -> None:
    """With the bound given, the command's watchers take from a budget of their own (32), not the user's
    whole (128 here), and it cannot raise it (the bound is off by default: Limits)."""
    from sandbox.confine import spawn
    from sandbox.confine.policy import Limits

    limits = Limits(max_inotify_instances=32, max_inotify_watches=65536)
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), limits=limits)
    iso = spawn.Isolation(enabled=True, network=False, program=shutil.which("bwrap") or "bwrap", interactive=False)
    script = (
        f"python3 -c '{INOTIFY}' > n; cat /proc/sys/user/max_inotify_instances "
        "/proc/sys/user/max_inotify_watches > limits; echo 1000 > /proc/sys/user/max_inotify_instances; "
        "cat /proc/sys/user/max_inotify_instances > after"
    )
    null = subprocess.DEVNULL
    box = spawn.spawn(iso, policy, ["sh", "-c", script], str(tmp_path), stdout=null, stderr=null)
    try:
        assert box.wait() in (0, 1)
    finally:
        # The handshake's bubblewrap has been seen to outlive its sandbox (why the bound is off by
        # default): whatever of it is left is stopped here.
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"/usr/bin/bwrap") and str(tmp_path).encode() in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert int((tmp_path / "n").read_text()) <= 32
    assert (tmp_path / "limits").read_text().split() == ["32", "65536"]
    assert (tmp_path / "after").read_text().strip() == "32"


def test_open_files_are_bounded_and_cannot_be_raised(repo: Path) -> None:
    run_id = start(repo)
    proc = inside(repo, run_id, "sh", "-c", "ulimit -n; ulimit -Hn; ulimit -n 4096 2>/dev/null || echo refused")
    assert proc.stdout.decode().split() == ["1024", "1024", "refused"], proc.stderr.decode()


def test_a_calls_size_is_bounded_by_default() -> None:
    from sandbox.confine.policy import Limits
    from sandbox.run import config

    assert Limits().max_call_bytes == config.DEFAULT_MAX_CALL_SIZE == 256 * 1024**2
    assert Limits().max_processes == 1024 and Limits().max_open_files == 1024


def test_doctor_finds_the_reachable_sockets(repo: Path, tmp_path: Path) -> None:
    """``doctor`` looks at the sockets bound on the machine and says which a run's agent reaches: one that
    ``unix_sockets`` shows (below the private ``/tmp``), yes; Docker Desktop's in the home, no (a socket
    in the machine's read-only rest is masked: tests/reliability/test_hostile_unlisted.py)."""
    home = Path(os.environ["HOME"])
    mine = tmp_path / f"sbx-{os.getpid()}.sock"
    (repo / ".sandbox.toml").write_text(f'[isolation]\nunix_sockets = ["{mine}"]\n')
    out = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
    docker = home / ".docker" / "desktop" / "docker.sock"
    docker.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as a, socket.socket(socket.AF_UNIX) as b:
        a.bind(str(docker))
        b.bind(str(mine))
        try:
            report = json.loads(sandbox_cmd("--json", "doctor", out["run"], cwd=repo).stdout)
        finally:
            docker.unlink()
            mine.unlink()
    assert str(mine) in report["unix_sockets"] and str(docker) not in report["unix_sockets"], report["unix_sockets"]
    if report["backend"] == "bwrap":
        # What no backend holds yet is said, with what the kernel would need (issue 31, item 4).
        gap = [line for line in report["cannot_enforce"] if "bound after a sandbox started" in line]
        assert (
            len(gap) == 1
            and "ABI 9" in gap[0]
            and f"ABI {report['landlock_abi']}" in gap[0]
            or (report["landlock_abi"] >= 9 and "does not use it yet" in gap[0])
        ), report["cannot_enforce"]
