"""``sandbox --help`` and ``sandbox path`` answered without click (sandbox.cli.quick): byte for byte what
the click group prints, in every form the quick path takes, and the click group's answer in the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.cli.quick import HELP_HEAD, help_text
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import on_pty, sandbox_cmd

#: Prepended to ``python -c``: the process says on stderr whether click was imported when it exits.
SAYS_CLICK = "import atexit, sys; atexit.register(lambda: sys.stderr.write('click=%s' % ('click' in sys.modules))); "


def click_group(
    args: list[str], cwd: Path | str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The click group itself run on ``args`` in a real process, its output to pipes (the reference)."""
    program = (
        "import sys; sys.argv[0] = 'sandbox'; from sandbox.cli.app import cli; from sandbox.cli.edge import run_main"
    )
    return subprocess.run(
        [sys.executable, "-c", program + "; run_main(cli)", *args],
        cwd=cwd,
        capture_output=True,
        check=False,
        timeout=120,
        env=env,
    )


def clicks(args: list[str], cwd: Path, columns: int | None = None) -> bytes:
    """What the click group itself prints for ``args`` in a real process (the reference; click's test
    runner forces its own width), ``columns`` wide (else as for a pipe)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = click_group(args, cwd, {**env, "COLUMNS": str(columns)} if columns else env)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def entry(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[bytes, bool]:
    """A real process through the console entry point: its stdout, and whether it imported click."""
    program = SAYS_CLICK + "sys.argv[0] = 'sandbox'; from sandbox.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", program, *args], cwd=cwd, capture_output=True, check=False, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout, proc.stderr.endswith(b"click=True")


@pytest.fixture
def started(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    run.seal_cache()  # as any command that opened the run leaves it: the fast read path finds it
    return run


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_clicks_to_the_byte_without_click(flag: str, repo: Path) -> None:
    out, imported = entry([flag], repo)
    assert not imported
    assert out == clicks([flag], repo)
    text = help_text()
    assert text is not None and out == text.encode()
    assert out.startswith(HELP_HEAD.encode())


@pytest.mark.parametrize("columns", [80, 120])
def test_help_on_a_wide_terminal_is_clicks(columns: int, repo: Path) -> None:
    code, out = on_pty("--help", cwd=repo, columns=columns, env={"COLUMNS": None})
    assert code == 0
    assert out == clicks(["--help"], repo, columns=columns).replace(b"\n", b"\r\n")


def test_help_on_a_narrow_terminal_is_left_to_click(repo: Path) -> None:
    # click wraps to the terminal below 80 columns: the quick path's text is 78 wide, so click answers.
    code, out = on_pty("--help", cwd=repo, columns=60, env={"COLUMNS": None})
    assert code == 0
    assert out == clicks(["--help"], repo, columns=60).replace(b"\n", b"\r\n")
    assert out != (help_text() or "").encode().replace(b"\n", b"\r\n")
    narrow, imported = entry(["--help"], repo, env={**os.environ, "COLUMNS": "60"})
    assert imported and narrow == clicks(["--help"], repo, columns=60)


def test_help_with_more_arguments_is_left_to_click(repo: Path) -> None:
    out, imported = entry(["--no-color", "--help"], repo)
    assert imported and out == clicks(["--no-color", "--help"], repo)


@pytest.mark.parametrize("named", [False, True])
def test_path_is_clicks_to_the_byte_without_click(named: bool, repo: Path, started: Run) -> None:
    args = ["path", started.run_id] if named else ["path"]
    out, imported = entry(args, repo)
    assert not imported
    assert out == clicks(args, repo) == started.worktree.encode() + b"\n"
    inside, imported = entry(["path"], Path(started.worktree) / "src")  # the run we are in
    assert not imported and inside == out


def test_path_of_a_missing_worktree_is_left_to_click(repo: Path, started: Run) -> None:
    shutil.rmtree(started.worktree)  # the full path decides what to do about it (make it, for a fetched run)
    out, imported = entry(["path", started.run_id], repo)
    assert imported and out == clicks(["path", started.run_id], repo) == started.worktree.encode() + b"\n"


def test_path_forms_it_does_not_know_are_left_to_click(repo: Path, started: Run) -> None:
    for args in (["path", started.run_id, "--json"], ["-C", str(repo), "path"], ["path", started.run_id[:4]]):
        out, imported = entry(args, repo)
        assert out == clicks(args, repo)
        assert imported == (args[-1] == "--json" or args[0] == "-C"), args


def test_an_unknown_run_is_clicks_refusal(repo: Path, started: Run) -> None:
    proc = sandbox_cmd("path", "nosuchrun", cwd=repo)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.startswith(b"sandbox: ")


def test_an_output_that_fails_is_the_click_edges_error(repo: Path, started: Run, tmp_path: Path) -> None:
    # A full disk: the quick path writes nothing more and the group's edge reports it (exit 3, a crash log).
    exe = Path(sys.executable).parent / "sandbox"
    for args in (["--help"], ["path", started.run_id]):
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(
                [str(exe), *args],
                cwd=repo,
                stdout=full,
                stderr=subprocess.PIPE,
                env={**os.environ, "TMPDIR": str(tmp_path)},
            )
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr.startswith(b"sandbox: unexpected error: OSError: [Errno 28] No space left on device")
        assert b"Traceback" not in proc.stderr


def test_shell_completion_is_left_to_click(repo: Path, started: Run) -> None:
    # The shell calls sandbox with _SANDBOX_COMPLETE (and the words in COMP_WORDS): click answers.
    env = {**os.environ, "_SANDBOX_COMPLETE": "bash_complete", "COMP_WORDS": "sandbox pa", "COMP_CWORD": "1"}
    for args in (["--help"], ["path"]):
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "sandbox"), *args], cwd=repo, env=env, capture_output=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == b"plain,path\n"
