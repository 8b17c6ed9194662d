"""git's conventions for output: pager and colour as git decides them, renames, progress on start.

Where the behaviour depends on a terminal, the real ``sandbox`` script runs on a pseudo-terminal
(``os.openpty``), and the pager is a shell command that records what it was given.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli.output import colorbool, pager_command, want_color
from sandbox.run.run import Run
from tests.conftest import git, on_pty, sandbox_cmd, write
from tests.merge.test_apply import invoke, start

ESC = b"\x1b["


def recording_pager(tmp_path: Path, name: str = "paged") -> tuple[str, Path, Path]:
    """A pager command (run by the shell, as git runs it) that saves its input and its LESS."""
    text, env = tmp_path / f"{name}.txt", tmp_path / f"{name}.env"
    return f'cat > {shlex.quote(str(text))}; echo "LESS=$LESS" > {shlex.quote(str(env))}', text, env


@pytest.fixture
def changed(repo: Path) -> Run:
    run = start(repo)
    with run.tool_call("edit", {"argv": ["sed", "-i", "s/app/APP/", "src/app.py"]}) as call:
        call.write("src/app.py", "print('APP')\n")
    return run


def no_pager_env() -> dict[str, str]:
    return {"GIT_PAGER": "", "PAGER": ""}


# -- the decisions, as git makes them -------------------------------------------------------------


def test_color_settings_read_as_git_reads_them() -> None:
    assert [colorbool(v) for v in ("always", "never", "auto", "true", "false", "", "bogus", None)] == [
        "always",
        "never",
        "auto",
        "auto",  # git: a truth value means auto
        "never",
        "auto",
        None,
        None,
    ]
    tty = {"TERM": "xterm"}
    assert want_color(None, {}, "diff", tty, stdout_tty=True, paging=False)
    assert not want_color(None, {}, "diff", tty, stdout_tty=False, paging=False)
    assert not want_color(None, {}, "diff", {"TERM": "dumb"}, stdout_tty=True, paging=False)
    assert not want_color(None, {}, "diff", {**tty, "NO_COLOR": "1"}, stdout_tty=True, paging=False)
    assert want_color(None, {}, "diff", {**tty, "NO_COLOR": ""}, stdout_tty=True, paging=False)  # empty: unset
    assert want_color("always", {}, "diff", {**tty, "NO_COLOR": "1"}, stdout_tty=False, paging=False)
    assert want_color(None, {"color.diff": "always"}, "diff", {"NO_COLOR": "1"}, stdout_tty=False, paging=False)
    assert not want_color(None, {"color.ui": "never"}, "diff", tty, stdout_tty=True, paging=False)
    assert want_color(None, {"color.ui": "never", "color.diff": "auto"}, "diff", tty, stdout_tty=True, paging=False)
    assert not want_color(None, {"color.status": "never"}, "status", tty, stdout_tty=True, paging=False)
    assert not want_color(None, {"color.pager": "false"}, "diff", tty, stdout_tty=True, paging=True)
    under_git = {**tty, "GIT_PAGER_IN_USE": "true"}  # run by git into its own pager: a pipe, but coloured
    assert want_color(None, {}, "diff", under_git, stdout_tty=False, paging=False)
    assert not want_color(None, {"color.pager": "false"}, "diff", under_git, stdout_tty=False, paging=False)


def test_pager_chosen_as_git_chooses_it() -> None:
    config = {"core.pager": "more"}
    assert pager_command({"GIT_PAGER": "most", "PAGER": "pg"}, config, True) == "most"
    assert pager_command({"PAGER": "pg"}, config, True) == "more"
    assert pager_command({"PAGER": "pg"}, {}, True) == "pg"
    assert pager_command({}, {}, True) == "less"
    assert pager_command({"GIT_PAGER": "cat"}, config, True) is None
    assert pager_command({"GIT_PAGER": ""}, config, True) is None
    assert pager_command({"GIT_PAGER": "most"}, config, False) is None  # never on a pipe


# -- the pager, on a real terminal ----------------------------------------------------------------


def test_diff_on_a_terminal_is_paged_with_less_frx_and_coloured(changed: Run, repo: Path, tmp_path: Path) -> None:
    pager, text, env = recording_pager(tmp_path)
    code, screen = on_pty("diff", changed.run_id, cwd=repo, env={"PAGER": pager, "GIT_PAGER": None})
    assert code == 0, screen
    paged = text.read_bytes()
    assert b"diff --git" in paged and b"APP" in paged
    assert ESC in paged  # colour was decided before the pager started, on the terminal
    assert env.read_text().strip() == "LESS=FRX"
    assert b"diff --git" not in screen


def test_git_pager_then_core_pager_then_pager(changed: Run, repo: Path, tmp_path: Path) -> None:
    first, first_text, _ = recording_pager(tmp_path, "git_pager")
    second, second_text, _ = recording_pager(tmp_path, "core_pager")
    third, third_text, third_env = recording_pager(tmp_path, "pager")
    git(repo, "config", "core.pager", second)
    env: dict[str, str | None] = {"GIT_PAGER": first, "PAGER": third, "LESS": "-R"}
    on_pty("log", changed.run_id, cwd=repo, env=env)
    assert b"CALL" in first_text.read_bytes() and not second_text.exists() and not third_text.exists()
    env["GIT_PAGER"] = None
    on_pty("log", changed.run_id, cwd=repo, env=env)
    assert b"CALL" in second_text.read_bytes() and not third_text.exists()
    git(repo, "config", "--unset", "core.pager")
    on_pty("list", cwd=repo, env=env)
    assert changed.run_id.encode() in third_text.read_bytes()
    assert third_env.read_text().strip() == "LESS=-R"  # the user's LESS is kept


def test_no_pager_top_level_and_per_command_and_never_on_a_pipe(changed: Run, repo: Path, tmp_path: Path) -> None:
    pager, text, _ = recording_pager(tmp_path)
    env = {"GIT_PAGER": pager}
    for args in (
        ["--no-pager", "diff", changed.run_id],
        ["-P", "log", changed.run_id],
        ["diff", changed.run_id, "--no-pager"],
    ):
        code, screen = on_pty(*args, cwd=repo, env=env)
        assert code == 0 and not text.exists()
        assert b"APP" in screen or b"CALL" in screen
    piped = sandbox_cmd("diff", changed.run_id, cwd=repo, env=env)
    assert piped.returncode == 0 and b"diff --git" in piped.stdout and ESC not in piped.stdout
    assert not text.exists()


def test_status_is_not_paged_unless_paginate(changed: Run, repo: Path, tmp_path: Path) -> None:
    pager, text, _ = recording_pager(tmp_path)
    code, screen = on_pty("status", changed.run_id, cwd=repo, env={"GIT_PAGER": pager})
    assert code == 0 and b"Run " in screen and not text.exists()
    code, _ = on_pty("--paginate", "status", changed.run_id, cwd=repo, env={"GIT_PAGER": pager})
    assert code == 0 and b"Run " in text.read_bytes()


def test_pager_that_quits_early_is_not_a_failure(repo: Path, tmp_path: Path) -> None:
    run = start(repo)
    with run.tool_call("big") as call:
        call.write("big.txt", "".join(f"line {i}\n" for i in range(200000)))
    code, screen = on_pty("diff", run.run_id, cwd=repo, env={"GIT_PAGER": "head -n 1"})
    assert code == 0, screen
    assert b"Traceback" not in screen and b"rror" not in screen


# -- colour -------------------------------------------------------------------------------------


def test_colour_on_a_terminal_follows_no_color_config_and_flags(changed: Run, repo: Path) -> None:
    args = ("diff", changed.run_id)
    assert ESC in on_pty(*args, cwd=repo, env=no_pager_env())[1]
    assert ESC not in on_pty(*args, cwd=repo, env={**no_pager_env(), "NO_COLOR": "1"})[1]
    assert ESC in on_pty(*args, "--color=always", cwd=repo, env={**no_pager_env(), "NO_COLOR": "1"})[1]
    assert ESC not in on_pty(*args, cwd=repo, env={**no_pager_env(), "TERM": "dumb"})[1]
    git(repo, "config", "color.ui", "never")
    assert ESC not in on_pty(*args, cwd=repo, env=no_pager_env())[1]
    assert ESC not in on_pty("log", changed.run_id, cwd=repo, env=no_pager_env())[1]
    assert ESC not in on_pty("status", changed.run_id, cwd=repo, env=no_pager_env())[1]
    git(repo, "config", "color.diff", "auto")  # the command's own slot wins over color.ui
    assert ESC in on_pty(*args, cwd=repo, env=no_pager_env())[1]


def test_colour_on_a_pipe_only_when_asked(changed: Run, repo: Path, runner: CliRunner) -> None:
    for command in (["diff", changed.run_id], ["log", changed.run_id], ["status", changed.run_id], ["list"]):
        code, out, _ = invoke(runner, repo, *command)
        assert code == 0 and "\x1b[" not in out, command
        code, out, _ = invoke(runner, repo, *command, "--color=always")
        assert code == 0 and "\x1b[" in out, command
        code, out, _ = invoke(runner, repo, *command, "--color", "--no-color")
        assert code == 0 and "\x1b[" not in out, command
    code, out, _ = invoke(runner, repo, "log", "--color", changed.run_id)  # bare --color: always, as in git
    assert code == 0 and "\x1b[" in out
    git(repo, "config", "color.ui", "always")
    code, out, _ = invoke(runner, repo, "log", changed.run_id)
    assert "\x1b[" in out


# -- renames ------------------------------------------------------------------------------------


def test_diff_detects_renames_unless_no_renames(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("mv") as call:
        call.rename("src/util.py", "src/helpers.py")
    code, out, _ = invoke(runner, repo, "diff", run.run_id)
    assert code == 0 and "rename from src/util.py" in out and "rename to src/helpers.py" in out
    code, out, _ = invoke(runner, repo, "diff", run.run_id, "--no-renames")
    assert code == 0 and "rename" not in out and "deleted file mode" in out and "new file mode" in out


# -- progress -----------------------------------------------------------------------------------


def test_start_shows_gits_progress_on_a_terminal_only(repo: Path) -> None:
    for i in range(300):
        write(repo, f"many/f{i}.txt", f"{i}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "many")
    env = {"GIT_PROGRESS_DELAY": "0"}  # git shows its meter after 2 s; at once here
    code, screen = on_pty("start", cwd=repo, env=env)
    assert code == 0, screen
    assert b"Taking a snapshot of your working tree" in screen and b"Updating files" in screen
    assert b"Started run" in screen
    code, screen = on_pty("start", "--json", cwd=repo, env=env)
    assert code == 0 and b"Updating files" not in screen and b"snapshot" not in screen
    piped = sandbox_cmd("start", cwd=repo, env=env)
    assert piped.returncode == 0 and piped.stderr == b""
    forced = sandbox_cmd("start", "--progress", cwd=repo, env=env)
    assert forced.returncode == 0 and b"Updating files" in forced.stderr


def test_apply_and_gc_show_progress_on_a_terminal_only_after_the_delay(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("many") as call:
        for i in range(50):
            call.write(f"gen/f{i}.txt", f"{i}\n")
    code, screen = on_pty("apply", run.run_id, "--dry-run", cwd=repo)
    assert code == 0 and b"Checking your files" not in screen  # under a second: silent, as git is
    piped = sandbox_cmd("apply", run.run_id, "--dry-run", cwd=repo, env={"GIT_PROGRESS_DELAY": "0"})
    assert piped.returncode == 0 and piped.stderr == b""
    code, screen = on_pty("apply", run.run_id, cwd=repo, env={"GIT_PROGRESS_DELAY": "0"})
    assert code == 0, screen
    assert b"Checking your files" in screen and b"Writing files: 50/50" in screen
    assert b"Applied 50 path(s)" in screen
    code, screen = on_pty("gc", cwd=repo, env={"GIT_PROGRESS_DELAY": "0"})
    assert code == 0 and b"Removing leftover temp files" in screen
    assert sandbox_cmd("gc", cwd=repo, env={"GIT_PROGRESS_DELAY": "0"}).stderr == b""


def test_apply_and_undo_say_which_paths_they_deleted(repo: Path) -> None:
    """'Applied' or 'Restored' a path that is now absent says so: the agent deleted it, or undo took
    back a file the call had created."""
    run = start(repo)
    with run.tool_call("Bash", {"command": "rm README.md; echo n > new.txt"}) as call:
        call.delete("README.md")
        call.write("new.txt", "n\n")
    applied = sandbox_cmd("apply", run.run_id, cwd=repo)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.decode().splitlines() == [
        "Applied 2 path(s) in your tree:",
        "  README.md  (deleted)",
        "  new.txt",
    ]
    undone = sandbox_cmd("undo", run.run_id, cwd=repo)
    assert undone.returncode == 0, undone.stderr
    assert sorted(undone.stdout.decode().splitlines()[2:]) == ["  README.md", "  new.txt  (removed)"]
    assert (repo / "README.md").exists() and not (repo / "new.txt").exists()
