"""``sandbox list``, ``status [RUN]`` and ``log [RUN]`` written to a pipe without click (sandbox.cli.quick):
byte for byte what the click commands write, on runs of several shapes, in colour or not; and the click
command's answer wherever the fast read path does not fully understand what it reads (a cache that does
not verify, another format version, a ledger that moved), a terminal, or another form."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.cli.plain import style
from sandbox.run.run import Run
from sandbox.store import layout
from sandbox.store.project import Project
from tests.cli.test_quick import SAYS_CLICK, click_group, clicks
from tests.conftest import git

#: Prepended to a program that runs the console entry point with the rest of argv.
ENTRY = SAYS_CLICK + "sys.argv[0] = 'sandbox'; from sandbox.cli import main; main()"


def entry(args: list[str], cwd: Path | str, env: dict[str, str] | None = None) -> tuple[int, bytes, bool]:
    """The console entry point in a real process, standard output a pipe: exit code, stdout, click imported."""
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args], cwd=cwd, capture_output=True, check=False, timeout=120, env=env
    )
    return proc.returncode, proc.stdout, proc.stderr.endswith(b"click=True")


def reference(args: list[str], cwd: Path | str, env: dict[str, str] | None = None) -> tuple[int, bytes]:
    """What the click group itself writes for ``args`` to a pipe (the reference)."""
    proc = click_group(args, cwd, env)
    return proc.returncode, proc.stdout


def same_without_click(args: list[str], cwd: Path | str, env: dict[str, str] | None = None) -> bytes:
    code, out, imported = entry(args, cwd, env)
    assert (code, out) == reference(args, cwd, env), args
    assert not imported, f"{args}: click was imported"
    return out


def left_to_click(args: list[str], cwd: Path | str, env: dict[str, str] | None = None) -> bytes:
    code, out, imported = entry(args, cwd, env)
    assert (code, out) == reference(args, cwd, env), args
    assert imported, f"{args}: answered without click"
    return out


def start(repo: Path, label: str | None = None) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir, label=label)


def sealed(run: Run) -> Run:
    """The run as any command that opened it leaves it: its fold cache at the ledger's tip."""
    fresh = Run.open(Project(run.project.common_dir), run.run_id)
    fresh.load()
    fresh.seal_cache()
    return fresh


def busy(repo: Path) -> Run:
    """A run with calls of several shapes: a write, a failure with an error, a rename, a deletion,
    a call still started (in flight), a refused one."""
    run = start(repo, label="busy")
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    failed = run.start_call("Bash", {"command": "make test\nmore"})
    run.finish_call(failed, "failed", error="make: *** [test] Error 2\nsecond line")
    with run.tool_call("Bash", {"argv": ["git", "mv", "a.txt", "moved/a.txt"]}) as call:
        call.rename("a.txt", "moved/a.txt")
    with run.tool_call("Bash", {"command": "rm b.txt"}) as call:
        call.delete("b.txt")
    run.refuse_call("Bash", {"command": "curl example.com"}, "network is off")
    run.start_call("Bash", {"command": "sleep 100"})  # a crash left it started
    return sealed(run)


@pytest.fixture
def files(repo: Path) -> Path:
    for name in ("a.txt", "b.txt"):
        (repo / name).write_text(f"{name}\n" * 20)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")
    return repo


def test_no_runs(repo: Path) -> None:
    assert same_without_click(["list"], repo) == b"No runs. Start one with 'sandbox start'.\n"
    for args in (["status"], ["log"]):  # no run to show: the click command refuses, in its words
        left_to_click(args, repo)


def test_a_busy_run_is_clicks_to_the_byte(files: Path) -> None:
    run = busy(files)
    for args in (["list"], ["status"], ["status", run.run_id], ["log"], ["log", run.run_id], ["log", "busy"]):
        out = same_without_click(args, files)
        assert out
    log = same_without_click(["log"], files)
    assert b"R a.txt -> moved/a.txt" in log and b"error:" in log and b"D b.txt" in log
    status = same_without_click(["status"], files)
    assert b"in flight: #6" in status and b"(1 renamed)" in status
    inside = Path(run.worktree) / "src"  # the run we are in
    assert same_without_click(["status"], inside) == status


def test_uncertain_calls_and_several_runs(files: Path) -> None:
    from sandbox.recovery.resume import resume

    run = busy(files)
    resume(Run.open(Project(run.project.common_dir), run.run_id))
    sealed(run)
    status = same_without_click(["status", run.run_id], files)
    assert b"uncertain: #6" in status
    other = start(files, label="other")
    with other.tool_call("write_file", {"path": "new.txt"}) as call:
        call.write("new.txt", "new\n")
    sealed(other)
    listed = same_without_click(["list"], files)
    assert listed.count(b"\n") == 3
    for args in (["status", "other"], ["log", other.run_id[:6]], ["log", run.run_id]):
        same_without_click(args, files)
    left_to_click(["status"], files)  # several runs and none named: a line per run, from the full path


def test_in_colour_from_git_config_and_not_with_no_color(files: Path) -> None:
    run = busy(files)
    git(files, "config", "color.ui", "always")
    for args in (["list"], ["status", run.run_id], ["log", run.run_id]):
        out = same_without_click(args, files)
        assert b"\x1b[33m" in out
    env = {**os.environ, "NO_COLOR": "1"}
    git(files, "config", "color.ui", "auto")
    for args in (["list"], ["status", run.run_id], ["log", run.run_id]):
        assert b"\x1b[" not in same_without_click(args, files, env)


def test_style_is_clicks() -> None:
    import click

    for fg in (None, "red", "green", "yellow", "magenta", "cyan"):
        for bold in (None, False, True):
            for dim in (None, False, True):
                assert style("x y", fg=fg, bold=bold, dim=dim) == click.style("x y", fg=fg, bold=bold, dim=dim)


def left_to_click_each_time(args: list[str], cwd: Path, damage: Callable[[], None]) -> bytes:
    """As :func:`left_to_click`, with the run's cache damaged before each process (the full path rebuilds it)."""
    damage()
    code, out, imported = entry(args, cwd)
    assert imported, f"{args}: answered without click"
    damage()
    assert (code, out) == reference(args, cwd), args
    return out


def cache_of(run: Run) -> Path:
    return Path(layout.run_dir(run.project.common_dir, run.run_id)) / "ledger-cache.json"


def test_a_cache_that_does_not_verify_is_left_to_the_full_path(files: Path) -> None:
    run = busy(files)
    cache = cache_of(run)
    good = json.loads(cache.read_text())
    state = json.loads(good["state"])
    first = state["order"][0]
    assert state["calls"][first]["status"] == "succeeded"
    state["calls"][first]["status"] = "failed"  # a forged status, its MAC left as it was

    def forge() -> None:
        cache.write_text(json.dumps({**good, "state": json.dumps(state)}))

    for args in (["list"], ["status", run.run_id], ["log", run.run_id]):
        out = left_to_click_each_time(args, files, forge)
        if args[0] == "log":  # the ledger's word for the first call, not the forged one
            assert b"succeeded" in out.split(b"\n")[2], out


def test_another_format_version_is_left_to_the_full_path(files: Path) -> None:
    run = busy(files)
    cache = cache_of(run)
    good = json.loads(cache.read_text())
    for args in (["list"], ["status", run.run_id], ["log", run.run_id]):
        left_to_click_each_time(args, files, lambda: cache.write_text(json.dumps({**good, "version": 99})))


def test_a_ledger_that_moved_is_left_to_the_full_path(files: Path) -> None:
    run = busy(files)
    Run.open(Project(run.project.common_dir), run.run_id).note({"moved": True})  # the cache is now behind
    code, out, imported = entry(["log", run.run_id], files)
    assert code == 0 and imported  # (the full path seals the cache again as it ends)
    assert same_without_click(["log", run.run_id], files) == out


def on_terminal(program: str, args: list[str], cwd: Path, env: dict[str, str], columns: int) -> tuple[bytes, bytes]:
    """``python -c program args`` with standard output on a new terminal ``columns`` wide (standard
    error a pipe): what it wrote on the terminal, and on standard error."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", program, *args], cwd=cwd, env=env, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
    err = proc.stderr.read() if proc.stderr else b""
    assert proc.wait(timeout=120) == 0, err
    return out, err


CLICK = "import sys; sys.argv[0] = 'sandbox'; from sandbox.cli.app import cli; from sandbox.cli.edge import run_main; "


@pytest.mark.parametrize("columns", [60, 120])
def test_on_a_terminal_is_clicks_to_the_byte(files: Path, columns: int) -> None:
    # status is not paged: answered without click, in colour (auto). list and log with no pager
    # (PAGER=cat): answered without click, log's lines fitted to the terminal's width.
    run = busy(files)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "GIT_PAGER")}
    env.update(TERM="xterm", PAGER="cat")
    for args in (["status"], ["status", run.run_id], ["list"], ["log"], ["log", run.run_id]):
        quick, err = on_terminal(ENTRY, args, files, env, columns)
        assert err.endswith(b"click=False"), (args, err)
        assert quick == on_terminal(CLICK + "run_main(cli)", args, files, env, columns)[0], args
        assert b"\x1b[33m" in quick
    fitted = on_terminal(ENTRY, ["log"], files, env, columns)[0].decode()
    assert ("…\r\n" in fitted) == (columns == 60)  # the command lines, cut to the terminal's width


def test_where_a_pager_would_start_click_does_it(files: Path) -> None:
    busy(files)
    env = {k: v for k, v in os.environ.items() if k not in ("PAGER", "GIT_PAGER")}
    env.update(TERM="xterm", GIT_PAGER="cat -v")  # a pager that ends by itself
    for args in (["list"], ["log"]):
        _out, err = on_terminal(ENTRY, args, files, env, 100)
        assert err.endswith(b"click=True"), args


def test_other_forms_are_left_to_click(files: Path) -> None:
    busy(files)
    for args in (["list", "--json"], ["status", "--json"], ["log", "--call", "@"], ["-C", str(files), "list"]):
        left_to_click(args, files)


def test_clicks_reference_is_the_installed_commands(files: Path) -> None:
    run = busy(files)
    assert clicks(["status", run.run_id], files) == reference(["status", run.run_id], files)[1]


def test_a_colour_code_in_a_path_is_left_to_click(files: Path, tmp_path: Path) -> None:
    # status prints the worktree's path as it is; click takes out what looks like a colour code when it
    # does not colour, so the quick path leaves such an output to click.
    data = tmp_path / "data\x1b[31mred"
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    started = subprocess.run(
        [sys.executable, "-c", ENTRY, "start"], cwd=files, env=env, capture_output=True, check=False, timeout=120
    )
    assert started.returncode == 0, started.stderr
    out = left_to_click(["status"], files, env)
    assert b"/datared/" in out and b"\x1b" not in out  # (click took the code out)
