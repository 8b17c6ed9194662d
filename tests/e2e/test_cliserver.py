"""The tests' forked commands (tests/cliserver.py) answer as the exec'd script does.

Most of the suite's ``sandbox`` commands are forked from a process that imported the CLI already;
these tests hold that a forked command and an exec of the installed script give the same exit code,
stdout and stderr, read the same stdin, see the environment and working directory they were given
(libgit2's configuration search included), and that what differs is exec'd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

from tests import cliserver
from tests.merge.test_apply import start

SCRIPT = str(Path(sys.executable).parent / "sandbox")


def both(*args: str, cwd: Path, env: dict[str, str] | None = None, input: bytes | None = None) -> tuple:
    """(forked, exec'd) results of one command, each as (code, stdout, stderr)."""
    full = {**os.environ, **(env or {})}
    forked = cliserver.run(args, cwd, full, input, 60)
    execd = subprocess.run(
        [SCRIPT, *args], cwd=cwd, env=full, input=input, capture_output=True, timeout=60, check=False
    )
    return (forked.returncode, forked.stdout, forked.stderr), (execd.returncode, execd.stdout, execd.stderr)


def test_answers_refusals_and_help_are_the_scripts(repo: Path) -> None:
    started = subprocess.run([SCRIPT, "start", "--json"], cwd=repo, capture_output=True, check=True)
    assert started.returncode == 0
    for args in (
        ("list", "--json"),
        ("status",),
        ("diff",),
        ("log",),
        ("apply", "nosuchrun"),  # a refusal: one line, a non-zero exit
        ("--bogus-option",),  # click's usage error
        ("diff", "--help"),
    ):
        forked, execd = both(*args, cwd=repo)
        assert forked == execd, args
    assert both("apply", "nosuchrun", cwd=repo)[0][0] != 0


def test_stdin_cwd_and_environment_are_the_commands(repo: Path, tmp_path: Path) -> None:
    subprocess.run([SCRIPT, "start", "--label", "w"], cwd=repo, capture_output=True, check=True)
    sub = repo / "sub"
    sub.mkdir()
    forked = cliserver.run(("write", "w", "from-stdin.txt"), sub, dict(os.environ), b"given\n", 60)
    assert forked.returncode == 0, forked.stderr
    shown = subprocess.run([SCRIPT, "diff", "w"], cwd=repo, capture_output=True, check=True)
    assert b"+given" in shown.stdout
    # The environment is the command's: NO_COLOR and COLUMNS change click's help as for the script.
    forked, execd = both("--help", cwd=sub, env={"COLUMNS": "50"})
    assert forked == execd


def test_git_configuration_is_read_from_the_commands_home(repo: Path, tmp_path: Path) -> None:
    """libgit2 found its global configuration from the server's HOME at import; a forked command
    reads the one under its own HOME, as a fresh process does (``branch`` authors your uncommitted
    edit with the identity of your git configuration, read through libgit2)."""
    write_home = tmp_path / "other-home"
    write_home.mkdir()
    (write_home / ".gitconfig").write_text(
        "[init]\n\tdefaultBranch = main\n[safe]\n\tdirectory = *\n"
        "[user]\n\tname = Home Two\n\temail = two@example.com\n"
    )
    (repo / "README.md").write_text("my uncommitted line\n")
    run = start(repo)
    with run.tool_call("edit_file", {"path": "README.md"}) as call:
        call.write("README.md", "my uncommitted line\nagent line\n")
    env = {**os.environ, "HOME": str(write_home), "XDG_CONFIG_HOME": str(write_home / ".config")}
    made = cliserver.run(("branch", run.run_id, "agent/two"), repo, env, None, 60)
    assert made.returncode == 0, made.stderr
    authors = git(repo, "log", "--format=%an <%ae>", "main..agent/two").split("\n")
    assert "Home Two <two@example.com>" in authors


def test_what_differs_is_execd() -> None:
    assert cliserver.forkable(("list",), None)
    assert cliserver.forkable(("exec", "--", "true"), {"HOME": "/x"})
    assert not cliserver.forkable(("hook", "claude"), None)  # its start is what it is measured on
    assert not cliserver.forkable(("-C", "/somewhere", "hook", "claude"), None)
    assert cliserver.forkable(("run", "--", "claude"), None)  # a real process of its own: its tree is below it
    for name in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "LC_ALL", "LANG", "SANDBOX_SESSION"):
        assert not cliserver.forkable(("list",), {name: "x"}), name


def test_a_working_directory_that_is_gone_is_said_on_stderr(tmp_path: Path) -> None:
    """subprocess.run raises for a missing cwd; the forked child cannot, so it says why it exits 1."""
    done = cliserver.run(("list",), tmp_path / "gone", dict(os.environ), None, 60)
    assert done.returncode == 1 and b"FileNotFoundError" in done.stderr and b"gone" in done.stderr


SCRIPT_BODY = """
import atexit, os, signal, sys
atexit.register(lambda: print("atexit", flush=True))
print(sys.argv[1:], os.getcwd(), os.environ.get("PROBE"), sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
sys.stderr.write("to stderr\\n")
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(int(sys.argv[1]))
"""


def test_a_script_runs_forked_as_python_runs_it(tmp_path: Path) -> None:
    """cliserver.script: argv, working directory, environment, sys.path[0], exit code, atexit and death by
    SIGKILL (an armed fault point) as ``python script`` gives them."""
    path = tmp_path / "probe.py"
    path.write_text(SCRIPT_BODY)
    env = {**os.environ, "PROBE": "given"}
    for arg in ("0", "3", "kill"):
        forked = cliserver.script(str(path), arg, cwd=tmp_path, env=env, timeout=60)
        execd = subprocess.run(
            [sys.executable, str(path), arg], cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
        )
        assert (forked.returncode, forked.stdout, forked.stderr) == (execd.returncode, execd.stdout, execd.stderr)
    assert forked.returncode == -9


def test_the_stand_in_forwards_streams_signals_and_the_exit(repo: Path) -> None:
    """cliserver.stdio_command (the MCP clients' ``sandbox mcp``): the stand-in's streams are the command's,
    its exit is the command's, and a SIGTERM it gets reaches the command (which dies of it, as does the
    stand-in)."""
    command, argv = cliserver.stdio_command("write", "--help")
    assert argv[:3] == ["-I", "-S", cliserver.SHIM]
    standin = subprocess.run([command, *argv], cwd=repo, capture_output=True, timeout=60, check=False)
    execd = subprocess.run([SCRIPT, "write", "--help"], cwd=repo, capture_output=True, timeout=60, check=False)
    assert (standin.returncode, standin.stdout, standin.stderr) == (execd.returncode, execd.stdout, execd.stderr)
    command, argv = cliserver.stdio_command("mcp", "--new")
    proc = subprocess.Popen([command, *argv], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        proc.stdin.write(  # type: ignore[union-attr]
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
        )
        proc.stdin.flush()  # type: ignore[union-attr]
        assert b'"id":1' in proc.stdout.readline()  # type: ignore[union-attr]  # the forked server answers
        proc.terminate()
        assert proc.wait(timeout=30) == -15
    finally:
        proc.kill()
        proc.wait()
    assert cliserver.stdio_command("hook", "claude")[0] == SCRIPT  # exec'd, as cliserver.sandbox would


def test_a_popen_is_the_commands_own_process(repo: Path, tmp_path: Path) -> None:
    """cliserver.popen (commands a test watches and kills): its pid is the forked command's own (a SIGKILL
    sent to it kills the command, which is a child of no shell), its streams and exit are the command's,
    and ``communicate`` reads them whole."""
    proc = cliserver.popen("write", "--help", cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert isinstance(proc, cliserver.Forked)
    execd = subprocess.run([SCRIPT, "write", "--help"], cwd=repo, capture_output=True, timeout=60, check=False)
    assert proc.communicate(timeout=60) == (execd.stdout, execd.stderr) and proc.returncode == execd.returncode
    script = tmp_path / "sleeper.py"
    script.write_text("import os, sys, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    sleeper = cliserver.popen(cwd=tmp_path, stdout=subprocess.PIPE, script=str(script), start_new_session=True)
    assert sleeper.stdout is not None
    assert int(sleeper.stdout.readline()) == sleeper.pid  # the command itself, not a stand-in
    assert os.getsid(sleeper.pid) == sleeper.pid  # start_new_session, as Popen's
    assert sleeper.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.1)
    sleeper.kill()
    assert sleeper.wait(timeout=60) == -9 and sleeper.poll() == -9
    sleeper.kill()  # no signal once it is gone (as Popen: its pid may be another process's by now)


def test_communicate_reads_both_streams_side_by_side(tmp_path: Path) -> None:
    """A command that fills its stderr pipe while its stdout is still open is read to its end, as Popen's
    communicate reads it (one stream read after the other would wait on it for ever)."""
    script = tmp_path / "loud.py"
    script.write_text("import sys\nsys.stderr.write('e' * 300_000)\nsys.stderr.flush()\nprint('o' * 300_000)\n")
    proc = cliserver.popen(cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, script=str(script), text=True)
    out, err = proc.communicate(timeout=60)
    assert (out, err, proc.returncode) == ("o" * 300_000 + "\n", "e" * 300_000, 0)
    assert proc.communicate(timeout=5) == ("", "")  # read to their ends already


def test_a_shell_runs_the_stand_in_for_sandbox(repo: Path, tmp_path: Path) -> None:
    """cliserver.stand_in: an executable a shell script of a test calls in place of the ``sandbox`` script."""
    exe = cliserver.stand_in(tmp_path)
    done = subprocess.run(
        ["sh", "-c", '"$0" -C "$1" write --help; echo "exit $?"', exe, str(repo)], capture_output=True, timeout=60
    )
    execd = subprocess.run([SCRIPT, "write", "--help"], cwd=repo, capture_output=True, timeout=60, check=False)
    assert done.stdout == execd.stdout + b"exit 0\n" and done.stderr == execd.stderr
