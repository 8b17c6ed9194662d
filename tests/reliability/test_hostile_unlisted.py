"""What no list names (issue #31's principles, tried again from inside): a prompt-injected agent's
command, in a real ``sandbox exec`` (real bubblewrap), looks for what the confinement reveals by
accident rather than by a rule: the names of the user's other repositories (the mount points that
hide their run state), and the descriptors the command inherits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import make_repo, sandbox_cmd

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


def start(repo: Path, env: dict[str, str]) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    run_id: str = json.loads(proc.stdout)["run"]
    return run_id


def probe(repo: Path, run_id: str, env: dict[str, str], *paths: str) -> dict[str, object]:
    proc = sandbox_cmd("exec", run_id, "--", "python3", "-c", PROBE, *paths, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    found: dict[str, object] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return found


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
