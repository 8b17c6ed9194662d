"""gitcli.read (git started with posix_spawn, for the quick path) gives what subprocess.run of the same
command gives: exit code and standard output, with input on standard input (one that fits a pipe and
one that does not), and the same TimeoutExpired when git takes too long."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import git

from sandbox.store import gitcli


def reference(
    args: list[str], cwd: str, env: dict[str, str] | None = None, input: bytes | None = None
) -> tuple[int, bytes]:
    argv, full_env = gitcli.command(args, env)
    proc = subprocess.run(argv, cwd=cwd, env=full_env, input=input, capture_output=True, check=False)
    return proc.returncode, proc.stdout


def test_output_and_exit_code_are_subprocess_runs(repo: Path) -> None:
    git(repo, "config", "color.ui", "always")
    for args in (
        ["config", "-z", "--get-regexp", r"^color\.ui$"],
        ["config", "--get", "no.such"],  # exit code 1, no output
        ["rev-parse", "--show-toplevel"],
        ["ls-files", "--stage", "-z"],
        ["no-such-command"],
    ):
        assert gitcli.read(args, str(repo)) == reference(args, str(repo)), args
    assert gitcli.output(["rev-parse", "--git-dir"], str(repo)) == reference(["rev-parse", "--git-dir"], str(repo))[1]


@pytest.mark.parametrize("size", [0, 100, 1 << 20])
def test_input_is_subprocess_runs(size: int) -> None:
    lines = b"".join(b"[section%d]\n\tkey = %d\n" % (i, i) for i in range(size // 20 + 1))[: max(size, 1)]
    args = ["config", "--no-includes", "--file", "-", "--list", "-z"]
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    assert gitcli.read(args, "/", env, input=lines) == reference(args, "/", env, input=lines)


def test_a_git_that_takes_too_long_is_killed(tmp_path: Path) -> None:
    # A git reading its input from a FIFO nobody writes: it waits for ever.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(subprocess.TimeoutExpired):
        gitcli.read(["hash-object", "--stdin-paths"], str(tmp_path), input=b"fifo\n", timeout=0.5)
