"""``sandbox demo`` leaves nothing behind: no run home in the data directory, no host, no repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sandbox_cmd, wait_until


def _demo_env(tmp_path: Path) -> dict[str, str]:
    # The demo's commands start the repository's host as a user's would (autostart on); its throwaway
    # directory is made in a temporary directory of the test's own, so what is left there shows.
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "SANDBOX_HOOK_AUTOSTART": "1", "TMPDIR": str(tmp_path / "tmp")}


def _left_behind(tmp_path: Path) -> list[str]:
    """Whatever the demo left in the user's data directory or the temporary directory."""
    return sorted(str(p) for base in ("data", "tmp") if (tmp_path / base).is_dir() for p in (tmp_path / base).iterdir())


def _holders(prefix: str) -> list[int]:
    """Pids of processes whose working directory or an open file lies under ``prefix``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        links = [f"/proc/{name}/cwd"]
        try:
            links += [f"/proc/{name}/fd/{fd}" for fd in os.listdir(f"/proc/{name}/fd")]
        except OSError:
            continue
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target.startswith(prefix):
                out.append(int(name))
                break
    return out


def _homes(tmp_path: Path) -> list[str]:
    repos = tmp_path / "data" / "sandbox" / "repos"
    return sorted(str(p) for p in repos.glob("*/*")) if repos.is_dir() else []


def test_demo_removes_its_run_home_and_host(tmp_path: Path) -> None:
    proc = sandbox_cmd("demo", cwd=tmp_path, env=_demo_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    first = out.splitlines()[0]
    repo = first.split(" at ", 1)[1].split(",", 1)[0]
    assert not os.path.exists(repo)
    assert _homes(tmp_path) == []
    # Nothing at all in the user's data directory (not even the repository's home), no temporary
    # directory, and no process (the repository's host) holding anything of the demo's.
    assert _left_behind(tmp_path) == []
    assert not _holders(os.path.dirname(repo))
    # The last lines never tell the user to cd into the directory that was just removed.
    assert f"cd {repo}" not in out


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_demo_cut_short_by_a_closed_pipe_leaves_nothing(tmp_path: Path) -> None:
    """``sandbox demo | head``: the pipe closes after a few lines; the demo still cleans up."""
    exe = Path(sys.executable).parent / "sandbox"
    env = dict(os.environ, **_demo_env(tmp_path))
    out, err = subprocess.PIPE, subprocess.DEVNULL
    proc = subprocess.Popen([str(exe), "demo"], cwd=tmp_path, env=env, stdout=out, stderr=err)
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    repo = first.split(" at ", 1)[1].split(",", 1)[0]
    # Read until the run exists (its home is made), then close the pipe as 'head' does.
    wait_until(lambda: _homes(tmp_path) or proc.stdout.readline() == b"" or _homes(tmp_path), timeout=120)
    proc.stdout.close()
    proc.wait(timeout=300)
    assert not os.path.exists(repo)
    assert _homes(tmp_path) == []
    assert _left_behind(tmp_path) == []
    wait_until(lambda: not _holders(os.path.dirname(repo)), timeout=30)


def test_gc_lists_and_removes_homes_of_deleted_repositories(tmp_path: Path) -> None:
    import json
    import shutil

    from conftest import make_repo

    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    gone = make_repo(tmp_path / "gone", {"a.txt": "a\n"})
    kept = make_repo(tmp_path / "kept", {"b.txt": "b\n"})
    for repo in (gone, kept):
        assert sandbox_cmd("start", cwd=repo, env=env).returncode == 0
    assert len(_homes(tmp_path)) == 2
    shutil.rmtree(gone)  # the clone is deleted with its runs' refs; their homes stay behind
    listed = sandbox_cmd("gc", cwd=kept, env=env)
    assert listed.returncode == 0
    assert "1 run home(s)" in listed.stdout.decode() and "'sandbox gc --orphans' removes them" in listed.stdout.decode()
    assert len(_homes(tmp_path)) == 2  # listed, not removed
    removed = sandbox_cmd("gc", "--orphans", "--json", cwd=kept, env=env)
    assert removed.returncode == 0, removed.stderr.decode()
    data = json.loads(removed.stdout)
    assert data["orphans_removed"] is True and data["orphan_homes"][0]["origin"] == str(gone / ".git")
    homes = _homes(tmp_path)
    assert len(homes) == 1  # the live repository's run is untouched
    assert sandbox_cmd("status", cwd=kept, env=env).returncode == 0
