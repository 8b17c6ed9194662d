"""``sandbox exec`` through the run's host without click (sandbox.cli.quickexec): the same call recorded,
the same line said and the same exit code as the click command, in every form the quick path takes; the
click command in the others, and whenever no host serves the run."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.cli.quickexec import parse
from sandbox.run.run import Run
from tests.cli.test_quick import SAYS_CLICK
from tests.conftest import sandbox_cmd, wait_until
from tests.hook_fixtures import reopen, start_run


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["exec", "--", "true"], (None, None, {}, ["true"])),
        (["exec", "r1", "--", "sh", "-c", "x"], (None, "r1", {}, ["sh", "-c", "x"])),
        (["-C", ".", "exec", "r1", "--", "true"], (".", "r1", {}, ["true"])),
        (
            ["exec", "--isolate", "off", "r1", "--call-id", "c1", "--network", "on", "--", "true", "--json"],
            (None, "r1", {"--isolate": "off", "--call-id": "c1", "--network": "on"}, ["true", "--json"]),
        ),
    ],
)
def test_the_forms_served(argv: list[str], parsed: object) -> None:
    assert parse(argv) == parsed


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "true"],  # no '--': the click command says how to write it
        ["exec", "--"],  # no command
        ["exec", "a", "b", "--", "true"],  # two words before '--'
        ["exec", " ", "--", "true"],  # "$RUN" unset: the click command refuses it
        ["exec", "--json", "--", "true"],
        ["--json", "exec", "--", "true"],
        ["exec", "--tool", "x", "--", "true"],
        ["exec", "--step", "s", "--", "true"],
        ["exec", "--isolate", "maybe", "--", "true"],
        ["exec", "--isolate", "on", "--isolate", "off", "--", "true"],
        ["exec", "--call-id", "--", "true"],
        ["exec", "--call-id=c1", "--", "true"],
        ["-C", "no/such/dir", "exec", "--", "true"],
        ["-C", "a", "-C", "b", "exec", "--", "true"],
        ["list"],
    ],
)
def test_every_other_form_is_left_to_click(argv: list[str]) -> None:
    assert parse(argv) is None


@pytest.fixture
def hosted(repo: Path) -> Iterator[Run]:
    """A run of ``repo`` with the repository's host up and answering."""
    run = start_run(repo)
    assert sandbox_cmd("serve", run.run_id, cwd=repo).returncode == 0
    wait_until(lambda: wire.Client(run.project.common_dir).ping())
    yield run
    host.stop_host(run.project.common_dir)


def exec_proc(repo: Path, *args: str) -> tuple[int, str, bool]:
    """``sandbox exec ARGS`` through the console entry point: exit code, stderr, whether click was imported."""
    program = SAYS_CLICK + "sys.argv[0] = 'sandbox'; from sandbox.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", program, "exec", *args], cwd=repo, capture_output=True, check=False, timeout=120
    )
    err = proc.stderr.decode()
    return proc.returncode, err.removesuffix("click=True").removesuffix("click=False"), err.endswith("click=True")


@pytest.mark.parametrize(
    ("command", "code", "status"),
    [
        ("echo made > made_{p}.txt; rm src/{p}.py", 0, "succeeded"),
        ("echo x > x_{p}.txt; exit 3", 3, "failed"),
    ],
)
def test_the_quick_and_the_click_exec_record_and_say_the_same(
    repo: Path, hosted: Run, command: str, code: int, status: str
) -> None:
    said = {}
    for path, p, extra in (("quick", "app", []), ("click", "util", ["--tool", "run_command"])):  # click's form
        cid = f"call_{path}"
        argv = ["sh", "-c", command.format(p=p)]
        done = exec_proc(repo, hosted.run_id, "--call-id", cid, *extra, "--", *argv)
        assert done[0] == code and done[2] == (path == "click"), done
        said[path] = done[1].replace(cid, "CALL")
        entry = reopen(hosted).entry(cid)
        assert entry.status.value == status and entry.result["exit_code"] == code
        assert entry.input["argv"] == argv and entry.tool_name == "run_command"
        changed = [f"made_{p}.txt", f"src/{p}.py"] if code == 0 else [f"x_{p}.txt"]
        assert sorted(f.path for f in entry.files) == changed
    assert said["quick"] == said["click"]
    assert re.fullmatch(rf"sandbox: CALL {status} \(exit {code}\), \d file\(s\) changed\n", said["quick"])
    log = Path(wire.host_dir(hosted.project.common_dir), wire.LOG).read_text()
    assert "start run_command call_quick via socket: ok" in log


def test_a_command_that_cannot_start_and_a_denied_call_are_said_alike(repo: Path, hosted: Run) -> None:
    for cid in ("call_denied_q", "call_denied_c"):
        hosted.plan_call("run_command", {"argv": ["touch", "denied.txt"]}, call_id=cid)
        hosted.deny(cid, reason="not today")
    said = {}
    for path, extra in (("quick", []), ("click", ["--tool", "run_command"])):
        code, err, clicked = exec_proc(repo, hosted.run_id, *extra, "--", "no-such-program-here")
        assert code == 127 and clicked == (path == "click")
        said[path] = re.sub(r"call_[0-9a-f]+", "CALL", err)
        cid = f"call_denied_{path[0]}"
        code, err, _ = exec_proc(repo, hosted.run_id, "--call-id", cid, *extra, "--", "touch", "denied.txt")
        assert code == 1 and "not today" in err and len(err.strip().splitlines()) == 1
        said[path + " denied"] = err.replace(cid, "CALL")
    assert (
        said["quick"]
        == said["click"]
        == ("sandbox: no-such-program-here: command not found; recorded as CALL (failed, exit 127).\n")
    )
    assert said["quick denied"] == said["click denied"]
    assert not (Path(hosted.worktree) / "denied.txt").exists()


def test_without_a_host_the_click_command_records_it(repo: Path) -> None:
    run = start_run(repo)
    code, err, clicked = exec_proc(repo, run.run_id, "--call-id", "call_alone", "--", "sh", "-c", "echo a > a.txt")
    assert code == 0 and clicked, err
    assert [f.path for f in reopen(run).entry("call_alone").files] == ["a.txt"]


@pytest.mark.parametrize("isolate", ["on", "off"])
def test_the_command_starts_once_its_start_is_recorded(repo: Path, hosted: Run, isolate: str) -> None:
    """The host makes the start durable while the command is made ready: the command sees it recorded."""
    common = hosted.project.common_dir
    ref = f"refs/sandbox/{hosted.run_id}/ledger"
    seen = f"git --git-dir={common} log -1 --format=%s {ref} > seen.txt"
    for path, extra in (("quick", []), ("click", ["--tool", "run_command"])):
        cid = f"call_seen_{path}_{isolate}"
        code, err, _ = exec_proc(
            repo, hosted.run_id, "--isolate", isolate, "--call-id", cid, *extra, "--", "sh", "-c", seen
        )
        assert code == 0, err
        assert (Path(hosted.worktree) / "seen.txt").read_text().startswith(f"sandbox-event call_started {cid} ")
