"""Driving the real Claude Code against the scripted model server, the two ways people do.

* ``sandbox run RUN -- claude -p ...`` (the sandbox installs the hooks and hosts the run), and
* ``sandbox hooks install claude-code RUN`` then ``claude -p ...`` started in the run's worktree.

Every process is bounded by a timeout; Claude Code gets a private ``HOME`` so nothing of the
developer's own Claude Code settings (or of another test) is read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests import cliserver
from tests.agents.anthropic_server import ModelServer

if TYPE_CHECKING:
    from sandbox.run.run import Run

SANDBOX = str(Path(sys.executable).parent / "sandbox")
TIMEOUT = 120


@dataclass
class Session:
    """One finished Claude Code session: its exit code, output and debug log."""

    returncode: int
    stdout: str
    stderr: str
    debug_log: Path


def claude_env(server: ModelServer, home: Path) -> dict[str, str]:
    """The environment for Claude Code: the scripted server, a private HOME, no other traffic.

    Hooks may start the repository's background host, as they do for users (the test stops it).
    """
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = Path(os.environ["HOME"]) / ".gitconfig"
    if gitconfig.exists() and not (home / ".gitconfig").exists():
        shutil.copy(gitconfig, home / ".gitconfig")
    env = dict(os.environ)
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-0000",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",  # tests run as root here: bypass mode needs it
            "SANDBOX_HOOK_AUTOSTART": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def claude_args(claude_bin: str, mode: str, debug_log: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """A headless Claude Code command line in permission mode ``mode``."""
    args = [claude_bin, "-p", "Do the task.", "--debug-file", str(debug_log)]
    args += ["--dangerously-skip-permissions"] if mode == "bypassPermissions" else ["--permission-mode", mode]
    return [*args, *extra]


def via_run(
    claude_bin: str, repo: Path, run_id: str, server: ModelServer, home: Path, mode: str, extra: tuple[str, ...] = ()
) -> Session:
    """``sandbox run RUN -- claude ...`` from the user's repository."""
    debug_log = home / f"debug-{len(server.requests)}.log"
    # Forked by the tests' command server (tests/cliserver.py); stdin at its end at once, as DEVNULL's.
    args = ("run", run_id, "--", *claude_args(claude_bin, mode, debug_log, extra))
    proc = cliserver.sandbox(*args, cwd=repo, env=claude_env(server, home), input=b"", timeout=TIMEOUT, text=True)
    return Session(proc.returncode, proc.stdout, proc.stderr, debug_log)


def install_hooks(repo: Path, run_id: str) -> None:
    """``sandbox hooks install claude-code RUN``."""
    proc = subprocess.run(
        [SANDBOX, "hooks", "install", "claude-code", run_id],
        cwd=repo,
        env={**os.environ, "SANDBOX_HOOK_AUTOSTART": "1"},  # as for users: the repository's host starts
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def in_worktree(
    claude_bin: str, worktree: Path, server: ModelServer, home: Path, mode: str, extra: tuple[str, ...] = ()
) -> Session:
    """``claude ...`` started by hand in the run's worktree (hooks installed before)."""
    debug_log = home / f"debug-{len(server.requests)}.log"
    proc = subprocess.run(
        claude_args(claude_bin, mode, debug_log, extra),
        cwd=worktree,
        env=claude_env(server, home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return Session(proc.returncode, proc.stdout, proc.stderr, debug_log)


def sandbox(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``sandbox`` command as a real process."""
    from tests import cliserver

    return cliserver.sandbox(*args, cwd=cwd, timeout=TIMEOUT, text=True)


def push_into_another_clone(tmp_path: Path, repo: Path, run_id: str) -> Path:
    """Push ``repo`` and its run ``run_id`` to a new bare remote, fetch the run into a new clone: that clone."""
    from tests.conftest import git

    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "HEAD:refs/heads/main")
    pushed = sandbox("push", run_id, "origin", cwd=repo)
    assert pushed.returncode == 0, pushed.stderr
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    fetched = sandbox("fetch", "origin", run_id, cwd=other)
    assert fetched.returncode == 0, fetched.stderr
    return other


def stop_services(repo: Path) -> None:
    """Stop the repository's background host (``sandbox serve``, started by hooks or ``sandbox run``)."""
    from sandbox.agent import host
    from sandbox.store.project import Project

    project, _workdir, _ = Project.discover(str(repo))
    host.stop_host(project.common_dir)


def cli_start(repo: Path) -> Run:
    """``sandbox start`` as a user runs it (the run's home in the per-user data directory), opened."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    proc = sandbox("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    worktree = json.loads(proc.stdout)["worktree"]
    assert "/.git/" not in worktree + "/"  # Claude Code refuses edits under any .git directory
    project, _workdir, run_id = Project.discover(worktree)
    assert run_id is not None
    return Run.open(project, run_id)
