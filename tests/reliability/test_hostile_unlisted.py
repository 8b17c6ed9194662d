"""What no list names (issue #31's principles, tried again from inside): a prompt-injected agent's
command, in a real ``sandbox exec`` (real bubblewrap), looks for what the confinement reveals by
accident rather than by a rule: the names of the user's other repositories (the mount points that
hide their run state), and the descriptors the command inherits.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest
from conftest import make_repo, sandbox_cmd, scaled

from tests.reliability.test_hostile_home import probe as home_probe
from tests.reliability.test_hostile_home import start

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

#: Lists each directory (or says it is not there), then the mount points and the open descriptors.
PROBE = r"""
import json, os, sys
out = {}
for path in sys.argv[1:]:
    out[path] = sorted(os.listdir(path)) if os.path.isdir(path) else ("exists" if os.path.lexists(path) else "absent")
out["mountinfo"] = open("/proc/self/mountinfo").read()
out["fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print(json.dumps(out))
"""


def probe(repo: Path, run_id: str, env: dict[str, str], *paths: str) -> dict[str, object]:
    return home_probe(repo, run_id, env, *paths, script=PROBE)


def test_the_names_of_the_users_other_repositories_are_not_revealed(repo: Path, tmp_path: Path) -> None:
    # Another repository of the user's, in the home, with a run of its own: its run state
    # (.git/sandbox) is hidden from this run. Hiding it must not make an empty directory chain
    # inside the (empty) home that names the project, nor a mount point that names it.
    home = tmp_path / "userhome"
    other = make_repo(home / "clients" / "acme-merger", {"a.txt": "a\n"})
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    start(other, env)
    assert (other / ".git" / "sandbox").is_dir()
    run_id = start(repo, env)
    seen = probe(repo, run_id, env, str(home), str(home / "clients"), str(other))
    assert seen[str(other)] == "absent", seen[str(other)]
    assert seen[str(home / "clients")] == "absent"
    listing = seen[str(home)]
    assert isinstance(listing, list) and "clients" not in listing, listing
    assert "acme-merger" not in str(seen["mountinfo"])


def test_shared_scratch_directories_of_the_machine_are_private(repo: Path, tmp_path: Path) -> None:
    # /var/tmp is every user's scratch that outlives a reboot (editors' swap and backup files hold
    # what was edited). Like /tmp, inside it is the sandbox's own: nothing of the machine's is seen.
    scratch = Path("/var/tmp")
    if not scratch.is_dir() or scratch.is_symlink():
        pytest.skip("no /var/tmp of its own on this machine")
    try:
        planted = scratch / f"sandbox-test-{tmp_path.name}.swp"
        planted.write_text("swap of ~/notes/passwords.txt")
    except OSError:
        pytest.skip("/var/tmp is not writable here")
    try:
        env = {"HOME": str(tmp_path / "userhome")}
        run_id = start(repo, env)
        seen = probe(repo, run_id, env, str(planted), str(scratch))
        assert seen[str(planted)] == "absent"
        assert seen[str(scratch)] == [], seen[str(scratch)]
    finally:
        planted.unlink()


def rest_of_the_machine(tmp_path: Path) -> Path | None:
    """A new directory in the read-only rest of the machine (outside every home, /tmp and /run), where
    a daemon would keep its control socket (LXD's is /var/snap/lxd/common/lxd/unix.socket); None
    where this user may write none."""
    for parent in (Path("/var/lib"), Path("/srv"), Path("/opt"), Path(__file__).resolve().parent):
        made = parent / f"sbx-{tmp_path.name}"
        try:
            made.mkdir()
        except OSError:
            continue
        return made
    return None


CONNECT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("connected")
except OSError as exc:
    print("refused: " + (exc.strerror or str(exc)))
"""


def test_a_daemons_socket_outside_run_and_the_homes_is_not_reachable(repo: Path, tmp_path: Path) -> None:
    # connect() needs no write access: a daemon's socket in a place left visible read-only (outside
    # /run, /tmp and the homes) was reached from inside. Only what something shows on purpose (the
    # host's socket, unix_sockets) is reachable; doctor says the same.
    place = rest_of_the_machine(tmp_path)
    if place is None:
        pytest.skip("no place outside /tmp and the homes is writable here")
    daemon = place / "unix.socket"
    chosen, chosen_there = tmp_path / "chosen.sock", place / "chosen.sock"  # below /tmp, in the rest
    (repo / ".sandbox.toml").write_text(f'[isolation]\nunix_sockets = ["{chosen}", "{chosen_there}"]\n')
    env = {"HOME": str(tmp_path / "userhome")}
    try:
        with socket.socket(socket.AF_UNIX) as a, socket.socket(socket.AF_UNIX) as b, socket.socket(socket.AF_UNIX) as c:
            for sock, path in ((a, daemon), (b, chosen), (c, chosen_there)):
                sock.bind(str(path))
                sock.listen()
            run_id = start(repo, env)
            for path, expected in ((daemon, "refused"), (chosen, "connected"), (chosen_there, "connected")):
                proc = sandbox_cmd("exec", run_id, "--", "python3", "-c", CONNECT, str(path), cwd=repo, env=env)
                assert proc.returncode == 0, proc.stderr.decode()
                assert proc.stdout.decode().startswith(expected), (path, proc.stdout.decode())
            report = json.loads(sandbox_cmd("--json", "doctor", run_id, cwd=repo, env=env).stdout)
            assert str(chosen) in report["unix_sockets"], report["unix_sockets"]
            assert str(daemon) not in report["unix_sockets"], report["unix_sockets"]
    finally:
        # Closed above, so no sandbox started from now on masks them; one that listed them while they
        # were bound (any test's, on this machine) is given time to set up before they vanish (a socket
        # masked then gone makes that start fail: docs/confinement.md).
        time.sleep(scaled(2))
        daemon.unlink(missing_ok=True)
        chosen_there.unlink(missing_ok=True)
        place.rmdir()


@pytest.mark.parametrize("root", ["/media", "/mnt"])
def test_the_mount_points_of_other_file_systems_are_hidden(repo: Path, tmp_path: Path, root: str) -> None:
    # /media/<user>/<disk> is the user's USB drive, /mnt a share or a second disk: the user's data,
    # not the system's, so hidden like a home (allow_read shows a path of it).
    if not Path(root).is_dir() or Path(root).is_symlink():
        pytest.skip(f"no {root} here")
    disk = Path(root) / f"sbx-{tmp_path.name}"
    try:
        disk.mkdir()
    except OSError:
        pytest.skip(f"{root} is not writable here")
    try:
        (disk / "tax-return.pdf").write_text("the user's")
        env = {"HOME": str(tmp_path / "userhome")}
        run_id = start(repo, env)
        seen = probe(repo, run_id, env, str(disk / "tax-return.pdf"), str(disk))
        assert seen[str(disk)] == "absent" and seen[str(disk / "tax-return.pdf")] == "absent", seen
    finally:
        shutil.rmtree(disk)


def test_the_object_directories_the_runs_git_borrows_are_the_hosts_to_name(repo: Path, tmp_path: Path) -> None:
    # The run's git reaches the user's objects through objects/info/alternates, a file the host wrote.
    # Were it the agent's to rewrite, the host's own readers of the run's git (status, log, push of the
    # agent's refs) and the user's git in the worktree would read objects from any directory the agent
    # names, seen or not from inside. Its own objects stay its to write.
    env = {"HOME": str(tmp_path / "userhome")}
    run_id = start(repo, env)
    script = (
        'alt="$(git rev-parse --git-path objects)/info/alternates"; '
        'if echo /elsewhere/objects >> "$alt" 2>/dev/null; then echo written; else echo refused; fi; '
        "echo x > new.txt && git add new.txt && git -c user.name=a -c user.email=a@b commit -qm x && echo committed"
    )
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", script, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["refused", "committed"], proc.stdout.decode()
