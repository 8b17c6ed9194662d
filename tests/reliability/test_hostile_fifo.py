"""FIFOs (and symlinks to them) an agent puts where the sandbox reads never hang a command.

A confined agent can make a FIFO anywhere in its worktree and its own git dir. Opening a FIFO for
reading blocks until someone writes to it, for ever here: a recording (``sandbox exec``, a hook, the
shared host of every run of the repository) or a user's command that opened one would hang. Each
case plants one from inside a confined ``sandbox exec`` together with an ordinary change, and
every later command must finish (bounded by a timeout), without a traceback; the user's tree is
never touched. (FIFOs among the agent's loose objects, refs and packs, and the rest of what its git dir
can hold: tests/agent/test_agent_git.py, tests/reliability/test_agent_git_hostile.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sandbox_cmd, tree_digest, user_state

from tests import fifo_swap

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

#: Seconds any one command may take here (each takes well under 5 s when nothing hangs).
LIMIT = 30

PLANTS = {
    "root-gitattributes": "rm -f .gitattributes; mkfifo .gitattributes",
    "nested-gitattributes": "mkfifo src/.gitattributes",
    "gitattributes-symlink-to-fifo": "mkfifo ../fifo-in-tmp 2>/dev/null || mkfifo /tmp/f; ln -sf /tmp/f .gitattributes",
    "gitattributes-symlink-to-dev-zero": "ln -sf /dev/zero .gitattributes",
    "info-attributes": 'g="$(git rev-parse --git-dir)"; mkdir -p "$g/info"; mkfifo "$g/info/attributes"',
    "core-attributesfile": 'mkfifo attrs.fifo && git config core.attributesFile "$PWD/attrs.fifo"',
    "run-git-config": 'g="$(git rev-parse --git-dir)"; rm "$g/config"; mkfifo "$g/config"',
    "run-git-index": 'g="$(git rev-parse --git-dir)"; rm "$g/index"; mkfifo "$g/index"',
    # status listed the run's index with a git that opened HEAD first: 60 s, then a traceback (120 s from
    # the worktree); push read the agent's refs with libgit2, which waited on packed-refs for ever.
    "run-git-head": 'g="$(git rev-parse --git-dir)"; rm "$g/HEAD"; mkfifo "$g/HEAD"',
    "dot-git-file": "rm .git; mkfifo .git",
    "alternates": 'a="$(git rev-parse --git-dir)/objects/info/alternates"; rm -f "$a"; mkfifo "$a"',
    "packed-refs": 'g="$(git rev-parse --git-dir)"; mkfifo "$g/packed-refs"',
    "branch-ref": 'r="$(git rev-parse --git-dir)/$(git symbolic-ref HEAD)"; rm -f "$r"; mkfifo "$r"',
    "sparse-checkout": 'g="$(git rev-parse --git-dir)"; mkdir -p "$g/info"; mkfifo "$g/info/sparse-checkout"',
}


def run(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = sandbox_cmd(*args, cwd=repo, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sandbox {' '.join(args)} hung (more than {LIMIT} s)")
    assert "Traceback" not in proc.stderr.decode(errors="replace"), proc.stderr.decode(errors="replace")
    return proc


@pytest.mark.parametrize("plant", list(PLANTS.values()), ids=list(PLANTS))
def test_a_planted_fifo_never_hangs_recording_or_the_users_commands(repo: Path, tmp_path: Path, plant: str) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "remote.git")], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", str(tmp_path / "remote.git")], check=True)
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    worktree = json.loads(sandbox_cmd("status", run_id, "--json", cwd=repo).stdout)["worktree"]
    before = (tree_digest(repo), user_state(repo))
    # The call that plants it, and one after it: both are recorded (or refused in one line).
    run(repo, "exec", run_id, "--", "sh", "-c", f"{plant}; echo one >> src/app.py; rm -f src/util.py")
    run(repo, "exec", run_id, "--", "sh", "-c", "echo two >> src/app.py")
    for args in (["status", run_id], ["log", run_id], ["diff", run_id], ["list"], ["resume", run_id]):
        run(repo, *args)
    run(Path(worktree), "status")  # from the run's worktree: the other read path
    run(repo, "push", run_id, "origin")  # sent, or refused in one line
    assert (tree_digest(repo), user_state(repo)) == before
    run(repo, "apply", run_id)
    run(repo, "undo", run_id)
    run(repo, "drop", "--force", run_id)
    run(repo, "gc")


#: The rule files libgit2 reads for ``d/x.txt``, in the worktree and the run's git dir, that the swapper swaps.
_RULES = [".gitattributes", ".gitignore", "d/.gitattributes", "d/.gitignore"]
_INFO = ["info/attributes", "info/exclude"]


#: What the host asks about ``d/x.txt`` while it records a call: ignored? converted? For argv[3] s.
_ASK = """
import sys, time
from sandbox.run.run import Run
from sandbox.store.convert import Converter
from sandbox.store.project import Project
project, _, _ = Project.discover(sys.argv[1])
run = Run.open(project, sys.argv[2])
converter = Converter(run.worktree)
end, asked = time.monotonic() + float(sys.argv[3]), 0
while time.monotonic() < end:
    run.is_ignored("d/x.txt")
    run.is_ignored("d/x.log")
    converter.applies("d/x.txt")
    asked += 1
print(asked)
"""


def test_rule_files_the_agent_swaps_for_fifos_while_the_host_reads_them_never_hang_it(repo: Path) -> None:
    """A check before libgit2 opens a rule file by name is a race: the agent, writing while the host records
    (another call of the run, a hook), swaps the file for a FIFO in between, and libgit2 blocked for ever
    holding the GIL (measured: on the first try). The host now gives libgit2 its own copies, read by
    descriptor (sandbox.store.rulemirror): a real process swaps, a real process asks, the asking ends."""
    asking = _while_swapped(repo, _ASK, "the host's questions about the run's rules hung")
    assert int(asking.stdout) > 10


def _while_swapped(repo: Path, script: str, hung: str) -> subprocess.CompletedProcess[bytes]:
    """``script`` (argv: the repository, a new run, 5 s) run while tests/fifo_swap.py swaps the run's rule files
    for 8 s; the test fails with ``hung`` when it does not end within :data:`LIMIT`, or fails itself."""
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    worktree = json.loads(sandbox_cmd("status", run_id, "--json", cwd=repo).stdout)["worktree"]
    git_dir = str(Path(worktree).parent / "git")
    targets = [os.path.join(worktree, n) for n in _RULES] + [os.path.join(git_dir, n) for n in _INFO]
    swapper = subprocess.Popen([sys.executable, fifo_swap.SCRIPT, "8", *targets])
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(repo), run_id, "5"], capture_output=True, timeout=LIMIT, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{hung} (more than {LIMIT} s)")
    finally:
        swapper.kill()
        swapper.wait()
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done


#: A session's cuts (sandbox.agent.launch.cut: a quiet point whose window did not vouch, so a scan) for
#: argv[3] s, each changing a file first; prints how many ended, how many were stopped.
_CUT = """
import sys, time
from sandbox.agent import launch
from sandbox.errors import SandboxError
from sandbox.run.run import Run
from sandbox.store import scan
from sandbox.store.project import Project
scan.WORKER_DEADLINE = 3.0  # a blocked scan is stopped within the test's time
project, _, _ = Project.discover(sys.argv[1])
run = Run.open(project, sys.argv[2])
end, cut, stopped = time.monotonic() + float(sys.argv[3]), 0, 0
while time.monotonic() < end:
    with open(run.worktree + "/d/x.txt", "w") as fh:
        fh.write(str(cut))
    try:
        launch.cut(run, None)
    except SandboxError:
        stopped += 1
    cut += 1
print(cut, stopped)
"""


def test_a_sessions_scan_while_the_agent_swaps_rule_files_for_fifos_never_hangs_the_session(repo: Path) -> None:
    """A quiet point of 'sandbox run' whose window cannot vouch (the host's queue overflowed, or no host)
    scans the worktree while the agent still runs. libgit2's status opens every rule file by name after the
    plain check, so a FIFO swapped in between blocked the session's own process, holding the GIL. The scan
    runs in a worker killed at its deadline: a cut may fail (the final scan retries), the session goes on."""
    cutting = _while_swapped(repo, _CUT, "a session's scan hung on a rule file swapped for a FIFO")
    cut, _stopped = map(int, cutting.stdout.split())
    assert cut > 1
