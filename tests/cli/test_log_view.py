"""``sandbox log`` a person can read: quoted commands, first lines, local times with the zone,
durations, a header, ``-p``, ``--call`` in full, ``-- PATH`` filters; times with the zone in
``list`` and ``status`` too."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from sandbox.run.run import Run
from tests.conftest import on_pty, sandbox_cmd
from tests.merge.test_apply import invoke, start

SED = ["sed", "-i", "s/a/b/; 1i x", "f"]
LONG = "x" * 300


def calls(run: Run) -> None:
    with run.tool_call("run_command", {"argv": SED}) as call:
        call.write("src/app.py", "print('b')\n")
    with run.tool_call("Bash", {"command": "echo one\necho two\necho three"}) as call:
        call.write("src/util.py", "X = 2\n")
    with run.tool_call("run_command", {"argv": ["echo", LONG]}) as call:
        call.failed_with = "exit code 1\nTraceback (most recent call last):\n  the whole story\nValueError: bad"


def test_log_quotes_commands_marks_multi_line_inputs_and_does_not_cut_on_a_pipe(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    calls(run)
    code, out, _ = invoke(runner, repo, "log", run.run_id)
    assert code == 0
    lines = out.splitlines()
    assert re.match(r"\s*#\s+CALL\s+STATUS\s+TOOL\s+COMMIT$", lines[0])
    assert re.match(r"\s+STARTED\s+TOOK\s+COMMAND$", lines[1])
    assert shlex.join(SED) in out  # sed -i 's/a/b/; 1i x' f: one command, as typed
    assert "echo one …(+2 lines)" in out and "echo two" not in out
    assert f"echo {LONG}" in out  # whole on a pipe
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\s+\d+\.\d\ds", out)  # time with zone, duration


def test_log_fits_the_terminal(repo: Path) -> None:
    run = start(repo)
    calls(run)
    code, screen = on_pty("log", run.run_id, cwd=repo, env={"GIT_PAGER": "", "NO_COLOR": "1"}, columns=80)
    assert code == 0, screen
    text = screen.decode()
    assert LONG not in text and "…" in text
    for line in text.splitlines():
        assert len(line) <= 80 or "--call" in line, line  # an error line keeps the way to its full text


def test_log_through_a_pager_hands_it_whole_commands(repo: Path, tmp_path: Path) -> None:
    """The pager decides how long lines show (git's way): log cuts nothing it pipes into one."""
    run = start(repo)
    calls(run)
    seen = tmp_path / "paged.txt"
    code, _screen = on_pty("log", run.run_id, cwd=repo, env={"GIT_PAGER": f"cat > {seen}", "NO_COLOR": "1"}, columns=80)
    assert code == 0
    assert f"echo {LONG}" in seen.read_text()


def test_times_are_local_with_the_zone_in_log_list_and_status(repo: Path) -> None:
    run = start(repo)
    calls(run)
    env = {"TZ": "Asia/Kolkata"}
    for args in (["log", run.run_id], ["list"], ["status", run.run_id], ["log", run.run_id, "--call", "1"]):
        if args[-1] == "1":
            args = ["log", run.run_id, "--call", run.entries()[0].call_id]
        proc = sandbox_cmd(*args, cwd=repo, env=env)
        assert proc.returncode == 0, proc.stderr
        assert re.search(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0530", proc.stdout), (args, proc.stdout)


def test_log_patch_call_prefix_and_path_filter(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    calls(run)
    first, second, third = run.entries()
    code, out, _ = invoke(runner, repo, "log", run.run_id, "-p")
    assert code == 0 and out.count("diff --git") == 2 and "+print('b')" in out and "+X = 2" in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--call", third.call_id[:9])
    assert code == 0 and f"call:    {third.call_id}" in out
    assert "  the whole story" in out and "ValueError: bad" in out and f"echo {LONG}" in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--call", str(third.seq))  # a ledger number too
    assert code == 0 and f"call:    {third.call_id}" in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--call", first.call_id, "-p")
    assert code == 0 and "+print('b')" in out and "took:" in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--", "src/util.py")
    assert code == 0 and second.call_id in out and first.call_id not in out and third.call_id not in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--", "src")
    assert first.call_id in out and second.call_id in out and third.call_id not in out
    code, out, _ = invoke(runner, repo, "log", run.run_id, "--", "nothing/here")
    assert code == 0 and "No call changed those paths." in out
    proc = sandbox_cmd("log", run.run_id, "--", "util.py", cwd=repo / "src")  # relative to where you are
    assert proc.returncode == 0 and second.call_id.encode() in proc.stdout and first.call_id.encode() not in proc.stdout
    inside = sandbox_cmd("log", "--", "util.py", cwd=Path(run.worktree) / "src")  # RUN: the worktree's own
    assert inside.returncode == 0 and second.call_id.encode() in inside.stdout
    assert first.call_id.encode() not in inside.stdout
