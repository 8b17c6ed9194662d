"""One way to name things: runs by id, prefix, label or the worktree we are in; calls by id, prefix,
ledger number or ``@~N``; "did you mean" for unknown names and commands."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import UnknownCallError, UnknownRunError
from sandbox.run.names import did_you_mean, find_call, resolve_call, resolve_run
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd


def start(repo: Path, label: str | None = None) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir, label=label)


def write_calls(run: Run, count: int) -> list[str]:
    ids = []
    for i in range(count):
        with run.tool_call("write_file", {"path": f"f{i}.txt"}, idempotency="idempotent", replay="auto") as call:
            call.write(f"f{i}.txt", f"{i}\n")
        assert call.entry is not None
        ids.append(call.entry.call_id)
    return ids


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


# -- the resolver ----------------------------------------------------------------------------------


def test_call_names_relative_sequence_id_and_prefix(repo: Path) -> None:
    run = start(repo)
    ids = write_calls(run, 4)
    entries = run.entries()
    assert [e.seq for e in entries] == [1, 2, 3, 4]
    assert resolve_call(run, "@").call_id == ids[-1]
    assert resolve_call(run, "@~").call_id == ids[-2]
    assert resolve_call(run, "@~1").call_id == ids[-2]
    assert resolve_call(run, "@~3").call_id == ids[0]
    assert resolve_call(run, "@~0").call_id == ids[-1]
    assert resolve_call(run, "2").call_id == ids[1]
    assert resolve_call(run, "#3").call_id == ids[2]
    assert resolve_call(run, ids[2]).call_id == ids[2]
    assert resolve_call(run, ids[2][:12]).call_id == ids[2]  # call_ + 7 hex: unique among 4
    # Without the call_ prefix. Ids are random hex: eight digits alone would be a call number (#N),
    # as documented, so the name is taken from an id whose eight have a letter (1 in ~40 runs failed).
    named = next(i for i in ids if not i[5:13].isdigit())
    assert resolve_call(run, named[5:13]).call_id == named
    with pytest.raises(UnknownCallError, match=r"has 4 call\(s\), so '@~4' names none; the first is @~3"):
        resolve_call(run, "@~4")
    with pytest.raises(UnknownCallError, match=r"no call #9: its calls are #1 to #4"):
        resolve_call(run, "9")
    with pytest.raises(UnknownCallError, match="is ambiguous"):
        resolve_call(run, "call_")
    with pytest.raises(UnknownCallError, match=f"Did you mean '{ids[1]}'"):
        resolve_call(run, ids[1][:-1] + ("0" if ids[1][-1] != "0" else "1") + "x")


def test_digits_are_a_sequence_number_unless_a_whole_id(repo: Path) -> None:
    run = start(repo)
    with pytest.raises(UnknownCallError, match="has no calls yet"):
        resolve_call(run, "@")
    write_calls(run, 1)
    odd = run.start_call("tool", {}, call_id="7")
    run.finish_call(odd, "succeeded")
    assert resolve_call(run, "7").call_id == "7"  # the whole id
    assert resolve_call(run, "2").call_id == "7"  # its sequence number
    with pytest.raises(UnknownCallError, match="no call #3"):
        find_call(run.entries(), "3", run.run_id)


def test_run_names_id_prefix_label_and_ambiguity(repo: Path) -> None:
    a = start(repo, label="try-env")
    b = start(repo, label="fix-tests")
    project = a.project
    assert resolve_run(project, a.run_id) == a.run_id
    assert resolve_run(project, "try-env") == a.run_id
    assert resolve_run(project, "fix-tests") == b.run_id
    common = 0
    while a.run_id[common] == b.run_id[common]:
        common += 1
    assert resolve_run(project, a.run_id[: common + 1]) == a.run_id
    with pytest.raises(UnknownRunError, match="Did you mean 'try-env'"):
        resolve_run(project, "tyr-env")
    with pytest.raises(UnknownRunError, match="2 runs; name one"):
        resolve_run(project, None)
    assert resolve_run(project, None, cwd_run=b.run_id) == b.run_id
    c = start(repo, label="try-env")
    with pytest.raises(UnknownRunError, match="2 runs are labelled 'try-env'"):
        resolve_run(project, "try-env")
    assert resolve_run(project, c.run_id) == c.run_id


def test_a_label_that_could_be_another_runs_id_prefix_is_refused(repo: Path) -> None:
    """Issue 33: such a label shadowed a run's id (tests/run/test_label_shadow.py: refused as ambiguous
    when one arrives from elsewhere)."""
    from sandbox.errors import UsageError

    a = start(repo)
    with pytest.raises(UsageError, match="must not look like a run id"):
        start(repo, label=a.run_id[:3])
    assert resolve_run(a.project, a.run_id[:3]) == a.run_id


def test_did_you_mean_lists_close_names_only() -> None:
    assert did_you_mean("aply", ["apply", "log", "diff"]) == " Did you mean 'apply'?"
    assert did_you_mean("zzz", ["apply", "log"]) == ""
    assert did_you_mean("stat", ["status", "start", "state"]).count("'") == 6


# -- through the CLI ---------------------------------------------------------------------------------


def test_unknown_command_suggests_the_close_one(repo: Path) -> None:
    proc = sandbox_cmd("aply", cwd=repo)
    assert proc.returncode == 2
    expected = "sandbox: No such command 'aply'. Did you mean 'apply'? (see 'sandbox --help')"
    assert proc.stderr.decode().strip() == expected
    proc = sandbox_cmd("call", "finsh", cwd=repo)
    assert proc.returncode == 2 and "Did you mean 'finish'?" in proc.stderr.decode()


def test_unknown_run_is_one_line_with_candidates(repo: Path, runner: CliRunner) -> None:
    start(repo, label="try-env")
    start(repo, label="other")
    code, _out, err = invoke(runner, "-C", str(repo), "status", "tyr-env")
    assert code == 2
    assert err.count("\n") == 1 and "No run 'tyr-env' in this repository. Did you mean 'try-env'?" in err
    code, out, _err = invoke(runner, "-C", str(repo), "status", "try-env", "--json")
    assert code == 0 and json.loads(out)["label"] == "try-env"


def test_every_run_command_works_without_run_inside_the_worktree(repo: Path, runner: CliRunner) -> None:
    """write, checkpoint, approve, deny, rollback, compensate, call ...: RUN left out in a subdirectory."""
    run = start(repo, label="here")
    start(repo, label="elsewhere")  # two runs: only the worktree can tell which one is meant
    sub = Path(run.worktree) / "src"
    here = ["-C", str(sub)]
    code, out, err = invoke(runner, *here, "write", "new.txt")
    assert code == 0, err
    assert (Path(run.worktree) / "new.txt").exists()
    code, out, err = invoke(runner, *here, "checkpoint", "--label", "one")
    assert code == 0, err
    code, out, err = invoke(runner, *here, "call", "plan", "--tool", "deploy", "--input", "{}")
    assert code == 0, err
    planned = out.strip()
    code, out, err = invoke(runner, *here, "approve", "@", "--json")
    assert code == 0, err
    assert json.loads(out)["call_id"] == planned
    code, out, err = invoke(runner, *here, "call", "plan", "--tool", "delete", "--input", "{}")
    code, out, err = invoke(runner, *here, "deny", "3", "--reason", "no")
    assert code == 0, err
    assert "denied: no" in out
    code, out, err = invoke(runner, *here, "call", "start", "--tool", "t", "--input", "{}")
    assert code == 0, err
    code, out, err = invoke(runner, *here, "call", "finish", "@", "--status", "succeeded")
    assert code == 0, err
    code, out, err = invoke(runner, *here, "compensate", "@")
    assert code != 0 and "compensation" in err.lower()
    code, out, err = invoke(runner, *here, "rollback", "--files", "--to", "one")
    assert code == 0, err
    code, out, err = invoke(runner, *here, "repair")
    assert code == 0, err
    assert run.run_id in out


def test_call_names_on_log_diff_and_apply(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    ids = write_calls(run, 3)
    code, out, err = invoke(runner, "-C", run.worktree, "log", "--call", "@~1", "--json")
    assert code == 0, err
    assert json.loads(out)["call_id"] == ids[1]
    code, out, err = invoke(runner, "-C", run.worktree, "diff", "--call", "#1", "--json")
    assert code == 0, err
    assert [f["path"] for f in json.loads(out)["files"]] == ["f0.txt"]
    code, out, err = invoke(runner, "-C", str(repo), "apply", run.run_id, "--call", "2", "--json")
    assert code == 0, err
    assert (repo / "f1.txt").exists() and not (repo / "f0.txt").exists()
    code, out, err = invoke(runner, "-C", str(repo), "log", run.run_id, "--call", "call_nope")
    assert code == 2 and "has no call 'call_nope'" in err


# -- the same flags everywhere -----------------------------------------------------------------------


def _all_commands() -> list[tuple[str, click.Command]]:
    from sandbox.cli.app import cli as group

    out: list[tuple[str, click.Command]] = []
    ctx = click.Context(group)

    def walk(prefix: str, g: click.Group, gctx: click.Context) -> None:
        for name in g.list_commands(gctx):
            command = g.get_command(gctx, name)
            assert command is not None
            out.append((f"{prefix}{name}", command))
            if isinstance(command, click.Group):
                walk(f"{prefix}{name} ", command, click.Context(command, parent=gctx))

    walk("", group, ctx)
    return out


def test_every_command_takes_dash_c_and_json() -> None:
    commands = _all_commands()
    assert len(commands) > 30
    for name, command in commands:
        opts = {o for p in command.params for o in getattr(p, "opts", ())}
        assert {"-C", "--json"} <= opts, name


def test_dash_c_and_json_before_or_after_the_subcommand(repo: Path, runner: CliRunner) -> None:
    run = start(repo, label="flags")
    write_calls(run, 1)
    outside = repo.parent
    for args in (
        ["-C", str(repo), "log", "--json"],
        ["log", "-C", str(repo), "--json"],
        ["--json", "-C", str(repo), "log"],
        ["log", "--json", "-C", str(repo)],
        ["-C", str(outside), "log", "-C", repo.name, "--json"],  # a later -C is relative to the earlier
        ["-C", str(repo), "call", "finish", "-C", "src", "--help"],
    ):
        code, out, err = invoke(runner, *args)
        assert code == 0, (args, err)
        if "--help" not in args:
            assert json.loads(out)[0]["tool_name"] == "write_file", args
    code, out, err = invoke(runner, "--json", "-C", str(repo), "path")
    assert code == 0, err
    assert json.loads(out) == {"run": run.run_id, "worktree": run.worktree, "git_dir": run.git_dir}
    code, out, err = invoke(runner, "-C", str(repo), "start", "-C", "src", "--json")
    assert code == 0, err
    assert json.loads(out)["label"] is None


def test_a_group_label_names_its_runs(repo: Path, runner: CliRunner) -> None:
    """'start --count 3 --label try' labels try-1..try-3: 'try' alone says which runs, and how to compare."""
    result = runner.invoke(cli, ["-C", str(repo), "start", "--count", "3", "--label", "try"], catch_exceptions=False)
    assert result.exit_code == 0
    result = runner.invoke(cli, ["-C", str(repo), "diff", "try"])
    assert result.exit_code == 2
    assert "try-1, try-2, try-3" in result.output and "sandbox compare try-1 try-2 try-3" in result.output
