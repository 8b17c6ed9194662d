"""Bad input to any command is one line on stderr and exit 1 or 2: never a traceback, never exit 3.

Every command and subcommand, every positional argument and every option that takes a value, is
given odd values (empty, blank, unknown names, out-of-range call names, reversed ranges, paths
outside the repository, newlines, a very long string, non-ASCII, an undecodable byte) through the
CLI's real entry point (``run_main``: the one place errors become a line and an exit code), in a
repository with a run that has calls. Commands that would start long-lived processes (``serve``,
``mcp``, ``run``, ``exec``, ``hook``) get the odd values only where their run goes, so none starts.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from sandbox.cli import cli
from sandbox.cli.edge import run_main
from tests.conftest import sandbox_cmd
from tests.run.test_names import start, write_calls

ODD = [
    "",
    " ",
    "-",
    "nope",
    "zzzzzzzz",
    "@~999",
    "999",
    "0",
    "-1",
    "5..2",
    "..",
    "../outside",
    "/etc/passwd",
    "a\nb",
    "x" * 5000,
    "é/ü",
    "bad\udcffbyte",  # what an undecodable byte in argv becomes
    ":(nonsense)",
]
#: Commands given odd values only in their RUN position (anything else could start a process).
RUN_ONLY = {"serve", "mcp", "run", "exec", "hook", "hooks install"}
#: demo builds its own repository and takes no value; ui serves until Ctrl-C (a run id prefix such as
#: "0" would start it): tests/ui/test_ui.py gives it bad input with a deadline.
SKIP = {"demo", "ui"}


def commands() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(cli)

    def walk(prefix: str, group: click.Group, gctx: click.Context) -> Iterator[tuple[str, click.Command]]:
        for name in group.list_commands(gctx):
            command = group.get_command(gctx, name)
            assert command is not None
            if isinstance(command, click.Group):
                yield from walk(f"{prefix}{name} ", command, click.Context(command, parent=gctx))
            else:
                yield f"{prefix}{name}", command

    yield from walk("", cli, ctx)


def invocations(run_id: str) -> Iterator[list[str]]:
    for name, command in commands():
        if name in SKIP:
            continue
        words = name.split()
        positionals = [p for p in command.params if isinstance(p, click.Argument)]
        takes_run = any(p.name in ("run_id", "run") for p in positionals)
        for value in ODD:
            if positionals:
                args = [*words, *([value] * max(1, sum(1 for p in positionals if p.required)))]
                if name in ("exec", "run"):
                    args = [*words, value, "--", "true"]
                yield args
        if name in RUN_ONLY:
            continue
        if takes_run and (len(positionals) > 1 or any(p.nargs == -1 for p in positionals)):
            for value in ODD:  # the run named well, what follows it odd
                yield [*words, run_id, value]
        for param in command.params:
            if not isinstance(param, click.Option) or param.is_flag or param.count:
                continue
            flag = max(param.opts, key=len)
            if flag in ("-C", "--json"):
                continue
            for value in ODD[:14]:
                yield [*words, *([run_id] if takes_run else []), flag, value]


def outcome(args: list[str]) -> tuple[int, str]:
    """Exit code and stderr of ``sandbox ARGS`` through the CLI's entry point, in this process, with
    stdin empty and stdout/stderr strict UTF-8 streams, as under a UTF-8 locale on a terminal."""
    saved = sys.argv, sys.stdin, sys.stdout, sys.stderr
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    code = 0
    with open(os.devnull, encoding="utf-8") as empty:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = ["sandbox", *args], empty, out, err
        try:
            run_main(cli)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        finally:
            sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
    err.flush()
    assert isinstance(err.buffer, io.BytesIO)
    return code, err.buffer.getvalue().decode("utf-8", "replace")


def test_no_odd_value_gives_a_traceback(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = start(repo, label="odd")
    write_calls(run, 3)
    monkeypatch.chdir(repo)  # given back at teardown: the worker's next tests run in a directory that exists
    seen = 0
    bad = []
    for args in invocations(run.run_id):
        seen += 1
        code, err = outcome(args)
        shown = [a[:40] for a in args]
        # A value that named a run (an earlier 'start --label' took it as a label) is told apart first, on a
        # line of its own: which run it acts on (id, label, origin). The refusal itself is still one line.
        said = "".join(line for line in err.splitlines(True) if not line.startswith("sandbox: acting on run "))
        if code == 3 or "Traceback" in err:
            bad.append(f"{shown}: exit {code}: {err.strip()[:300]}")
        elif code != 0 and said.count("\n") != 1:
            bad.append(f"{shown}: exit {code}, {err.count(chr(10))} lines: {err.strip()[:300]}")
        elif code not in (0, 1, 2):
            bad.append(f"{shown}: exit {code}: {err.strip()[:300]}")
    assert seen > 1000, seen
    assert not bad, "\n".join(bad)


NOT_UTF8 = b"caf\xe9-\xff.txt"


def test_a_name_that_is_not_utf8_is_shown_as_git_shows_it(repo: Path) -> None:
    """Under a UTF-8 locale Python's stdout is strict; a file name that is not UTF-8 (legal on Linux)
    must still be recorded, shown and applied: shown quoted with its bytes escaped, as git shows it."""
    run = start(repo, label="latin")
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    name = os.fsdecode(NOT_UTF8)
    quoted = b'"caf\\351-\\377.txt"'
    wrote = sandbox_cmd("write", run.run_id, name, cwd=repo, input=b"latin-1\n", env=strict)
    assert wrote.returncode == 0, wrote.stderr
    assert quoted in wrote.stdout
    for args in (["log", run.run_id], ["status", run.run_id], ["diff", run.run_id, "--stat"], ["apply", run.run_id]):
        shown = sandbox_cmd(*args, cwd=repo, env=strict)
        assert shown.returncode == 0 and b"Traceback" not in shown.stderr, (args, shown.stderr)
        if args[0] == "diff":  # git's own lines: the name as git prints it with diff's settings
            assert quoted in shown.stdout or NOT_UTF8 in shown.stdout, shown.stdout
        elif args[0] != "status":  # status counts paths, it does not list them
            assert quoted in shown.stdout, (args, shown.stdout)
    assert (repo / name).read_bytes() == b"latin-1\n"


def test_an_empty_run_name_is_refused_not_taken_for_the_only_run(repo: Path) -> None:
    """``sandbox drop "$RUN"`` with RUN unset names no run: it must not drop the repository's only run."""
    run = start(repo, label="only")
    write_calls(run, 1)
    sandbox_cmd("status", run.run_id, cwd=repo)  # seals the cache: status and log below take the fast path
    for args in (
        ["drop", "", "--force"],
        ["apply", ""],
        ["undo", " "],
        ["status", ""],
        ["log", ""],
        ["path", ""],
        ["run", "", "--", "true"],
        ["exec", " ", "--", "true"],
    ):
        done = sandbox_cmd(*args, cwd=repo)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.decode().count("\n") == 1 and "is empty" in done.stderr.decode(), done.stderr
    assert sandbox_cmd("path", cwd=repo).returncode == 0  # RUN left out still means the only run
    assert not (repo / "f0.txt").exists()  # nothing was applied
    assert [r["run"] for r in json.loads(sandbox_cmd("list", "--json", cwd=repo).stdout)] == [run.run_id]


def test_labels_that_cannot_name_a_run_are_refused(repo: Path) -> None:
    for label in ("", " ", "a\nb", "-x", "tab\there", "x" * 201, "c1\u009b", "bad\udcff"):
        made = sandbox_cmd("start", "--label", label, cwd=repo)
        assert made.returncode == 2, (label, made.stderr)
        assert made.stderr.decode().count("\n") == 1 and "label must be one line" in made.stderr.decode()
    assert json.loads(sandbox_cmd("list", "--json", cwd=repo).stdout) == []
    assert sandbox_cmd("start", "--label", "fix tests (2) é", cwd=repo).returncode == 0
