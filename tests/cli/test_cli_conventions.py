"""git's command-line conventions where a user relies on them (issue #21, items 4, 6, 11 and 12)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import make_repo, sandbox_cmd, wait_until


def _run_with_two_paths(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "r", {"src/a.py": "a\n", "tests/t.py": "t\n"})
    assert sandbox_cmd("start", cwd=repo).returncode == 0
    script = "echo b >> src/a.py; echo u >> tests/t.py"
    proc = sandbox_cmd("exec", "--isolate", "off", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    return repo


def test_pathspecs_without_run_are_paths_not_a_run_name(tmp_path: Path) -> None:
    repo = _run_with_two_paths(tmp_path)
    for args in (("--", "src/*.py"), (":!tests",), ("src",), ("--", "src")):
        proc = sandbox_cmd("diff", "--stat", *args, cwd=repo)
        assert proc.returncode == 0, (args, proc.stderr.decode())
        out = proc.stdout.decode()
        assert "src/a.py" in out and "tests/t.py" not in out, (args, out)
    dry = sandbox_cmd("apply", "--dry-run", "--json", "--", "tests", cwd=repo)
    assert dry.returncode == 0, dry.stderr.decode()
    assert "src/a.py" not in dry.stdout.decode() and "tests/t.py" in dry.stdout.decode()
    # A name that is neither a run nor a path is still an unknown run, in one line.
    bad = sandbox_cmd("diff", "nosuchrun", cwd=repo)
    assert bad.returncode == 2 and "No run 'nosuchrun'" in bad.stderr.decode()


def test_status_json_counts_disk_like_list(tmp_path: Path) -> None:
    repo = _run_with_two_paths(tmp_path)
    listed = json.loads(sandbox_cmd("list", "--json", cwd=repo).stdout)[0]["disk_bytes"]
    status = json.loads(sandbox_cmd("status", "--json", cwd=repo).stdout)["disk_bytes"]
    assert listed > 0 and status > 0
    assert abs(listed - status) <= 64 * 1024  # the ledger cache may be sealed in between
    assert "disk:" in sandbox_cmd("status", cwd=repo).stdout.decode()


def test_color_before_the_command_name(tmp_path: Path) -> None:
    repo = _run_with_two_paths(tmp_path)
    for args in (("--color", "diff"), ("--color=always", "diff"), ("diff", "--color")):
        proc = sandbox_cmd(*args, cwd=repo)
        assert proc.returncode == 0, (args, proc.stderr.decode())
        assert b"\x1b[" in proc.stdout, args
    never = sandbox_cmd("--color=never", "diff", cwd=repo, env={"GIT_CONFIG_PARAMETERS": "'color.ui'='always'"})
    assert b"\x1b[" not in never.stdout
    assert b"\x1b[" not in sandbox_cmd("--no-color", "diff", cwd=repo).stdout


def test_exec_says_when_it_starts_a_host_and_serve_stop_stops_it(tmp_path: Path) -> None:
    from sandbox.agent import wire

    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    assert sandbox_cmd("start", cwd=repo).returncode == 0
    env = {"SANDBOX_HOOK_AUTOSTART": "1"}
    try:
        first = sandbox_cmd("exec", "--isolate", "off", "--", "true", cwd=repo, env=env)
        assert first.returncode == 0
        assert "started this repository's host in the background" in first.stderr.decode()
        assert "sandbox serve --stop" in first.stderr.decode()
        common = str(repo / ".git")
        wait_until(lambda: wire.host_alive(common), timeout=60)
        second = sandbox_cmd("exec", "--isolate", "off", "--", "true", cwd=repo, env=env)
        assert "started this repository's host" not in second.stderr.decode()  # said once, when it starts
    finally:
        stopped = sandbox_cmd("serve", "--stop", cwd=repo)
    assert stopped.returncode == 0, stopped.stderr.decode()
    assert not wire.host_alive(str(repo / ".git"))
    again = sandbox_cmd("serve", "--stop", "--json", cwd=repo)
    assert again.returncode == 0 and json.loads(again.stdout)["stopped"] is False
    assert os.path.isdir(repo)


def test_help_never_cuts_a_description_mid_sentence(tmp_path: Path) -> None:
    proc = sandbox_cmd("--help", cwd=tmp_path, env={"COLUMNS": "80"})
    assert proc.returncode == 0
    commands = proc.stdout.decode().split("Commands:", 1)[1]
    assert not [line for line in commands.splitlines() if line.rstrip().endswith("...")]
    assert "where your files still\n" in commands or "where your files still equal" in commands


def test_partial_applies_do_not_list_earlier_paths_again(tmp_path: Path) -> None:
    """After 'apply --call 1', applying call 2 says the earlier paths are there in one line, not one each."""
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
    assert sandbox_cmd("start", cwd=repo).returncode == 0
    first = "echo 1 >> a.txt; echo 1 >> b.txt; echo 1 >> c.txt"
    assert sandbox_cmd("exec", "--isolate", "off", "--", "sh", "-c", first, cwd=repo).returncode == 0
    assert sandbox_cmd("exec", "--isolate", "off", "--", "sh", "-c", "echo 2 > d.txt", cwd=repo).returncode == 0
    assert sandbox_cmd("apply", "--call", "1", cwd=repo).returncode == 0
    second = sandbox_cmd("apply", cwd=repo)
    assert second.returncode == 0, second.stderr.decode()
    out = second.stdout.decode()
    assert "d.txt" in out
    assert "skipped" not in out and out.count("a.txt") <= 1
    assert "3 path(s) already applied in your tree" in out


def test_the_help_lists_each_command_by_the_first_sentence_of_its_own_help() -> None:
    """``sandbox --help`` prints the registered summaries (importing no command): each is its command's."""
    import click

    from sandbox.cli.app import cli
    from sandbox.cli.commands import COMMANDS, SUMMARIES
    from sandbox.cli.group import _first_sentence

    ctx = click.Context(cli)
    shown = {}
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        if not command.hidden:
            shown[name] = command.short_help or _first_sentence(command.help or "")
    assert shown == SUMMARIES
