"""Every command's real ``--json`` output matches its documented model (``sandbox schema``), in one
vocabulary: ``run``, ``call_id``, ``user_head`` vs ``run_head``, ``exit_code``, times with their zone."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sandbox.cli import COMMANDS, cli, outputs
from tests.conftest import git, sandbox_cmd, write

# The last test reads what the others checked: under pytest-xdist (make test) the whole module runs on
# one worker, in file order (tests/conftest.py, ONE_WORKER).
CHECKED: set[str] = set()


def check(name: str, data: Any) -> Any:
    outputs.check(name, data)
    CHECKED.add(name)
    return data


def cli_json(runner: CliRunner, name: str, *args: str, code: int = 0, stdin: str | None = None) -> Any:
    result = runner.invoke(cli, [*args, "--json"], input=stdin, catch_exceptions=False)
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return check(name, json.loads(result.stdout))


def real_json(name: str, *args: str, cwd: Path, code: int = 0) -> Any:
    proc = sandbox_cmd("--json", *args, cwd=cwd)  # before the subcommand: exec and run take words after --
    assert proc.returncode == code, (args, proc.stderr)
    return check(name, json.loads(proc.stdout))


def test_every_command_has_a_documented_json_output() -> None:
    documented = {name.split(" --")[0] for name in outputs.COMMANDS}
    top = {name.split()[0] for name in documented}
    # hook answers in the agent's hook protocol (hooks/README.md); mcp speaks MCP on its stdout; ui
    # serves a page until Ctrl-C (its --json line, url and port, is checked in tests/ui/test_ui.py).
    assert set(COMMANDS) - top == {"hook", "mcp", "ui"}


def test_every_commands_json_matches_its_schema(repo: Path, runner: CliRunner) -> None:
    c = ["-C", str(repo)]
    started = cli_json(runner, "start", *c, "start", "--label", "vocab")
    run_id = started["run"]
    assert started["user_head"] == git(repo, "rev-parse", "HEAD").strip()
    assert started["run_head"] == started["base"]
    assert set(started) >= {"user_head", "run_head"} and "head" not in started
    w = ["-C", started["worktree"]]

    entry = cli_json(runner, "write", *w, "write", "src/new.py", stdin="print('new')\n")
    assert entry["call_id"].startswith("call_")
    cli_json(runner, "checkpoint", *w, "checkpoint", "--label", "one")
    planned = cli_json(runner, "call plan", *w, "call", "plan", "--tool", "deploy", "--input", "{}")
    cli_json(runner, "approve", *w, "approve", planned["call_id"])
    denied = cli_json(runner, "call plan", *w, "call", "plan", "--tool", "rm", "--input", "{}")
    cli_json(runner, "deny", *w, "deny", "@", "--reason", "no")
    assert denied["status"] == "planned"
    comp = '{"argv": ["true"]}'
    begun = cli_json(runner, "call start", *w, "call", "start", "--tool", "gh", "--input", "{}", "--compensation", comp)
    cli_json(runner, "call finish", *w, "call", "finish", begun["call_id"], "--status", "succeeded")
    compensated = cli_json(runner, "compensate", *w, "compensate", begun["call_id"])
    assert compensated["exit_code"] == 0 and "returncode" not in compensated

    ran = real_json("exec", "exec", "--", "sh", "-c", "echo two > src/two.txt", cwd=Path(started["worktree"]))
    assert ran["exit_code"] == 0

    status = cli_json(runner, "status", *c, "status", run_id)
    assert status["user_head"] == started["user_head"] and status["run_head"] != started["base"]
    assert status["created_at"].endswith("Z") and "head" not in status
    listed = cli_json(runner, "list", *c, "list")
    assert listed[0]["run_head"] == status["run_head"] and listed[0]["created_at"] == status["created_at"]
    path = cli_json(runner, "path", *c, "path", "vocab")
    assert path["worktree"] == started["worktree"]
    entries = cli_json(runner, "log", *c, "log", run_id)
    assert all(e["started_at"] is None or e["started_at"].endswith("Z") for e in entries)
    one = cli_json(runner, "log --call", *c, "log", run_id, "--call", "1")
    assert one["call_id"] == entry["call_id"]
    shown = cli_json(runner, "log --call", *c, "log", run_id, "--call", ran["call_id"])
    assert set(shown["output"]) == {"output"} and shown["output"]["output"]["bytes"] == 0  # --json: one place
    made = cli_json(runner, "comment", *c, "comment", run_id, "src/two.txt:1", "Say", "three.")
    assert made["call_id"] == ran["call_id"] and made["line"] == 1
    assert cli_json(runner, "comments", *c, "comments", run_id)[0]["id"] == made["id"]
    diff = cli_json(runner, "diff", *c, "diff", run_id, "--call", "@")
    assert diff["call_id"] == ran["call_id"] and "call" not in diff
    cli_json(runner, "checkpoints", *c, "checkpoints", run_id)

    applied = cli_json(runner, "apply", *c, "apply", run_id)
    assert sorted(applied["applied"]) == ["src/new.py", "src/two.txt"]
    undone = cli_json(runner, "undo", *c, "undo", run_id)
    assert undone["restored"] and undone["applied"] == [] and undone["call_id"] is None  # the whole apply
    assert ran["call_id"] in undone["calls"]
    cli_json(runner, "redo", *c, "redo", run_id)
    one_call = cli_json(runner, "undo", *c, "undo", run_id, "--call", ran["call_id"])
    assert one_call["call_id"] == ran["call_id"] and one_call["restored"] == ["src/two.txt"]
    cli_json(runner, "repair", *c, "repair", run_id)

    cli_json(runner, "rollback --session", *w, "rollback", "--session", "--to", "one")
    cli_json(runner, "rollback --files", *w, "rollback", "--files", "--to", "one")
    rewound = cli_json(runner, "rewind", *w, "rewind", "--to", entry["call_id"])
    assert rewound["call_id"] == entry["call_id"] and rewound["session"] is None
    cli_json(runner, "call start", *w, "call", "start", "--tool", "slow", "--input", "{}")
    resumed = cli_json(runner, "resume", *c, "resume", run_id)
    assert resumed["run"] == run_id and "run_id" not in resumed
    uncertain = resumed["uncertain"][0]["call_id"]
    cli_json(runner, "call resolve", *w, "call", "resolve", uncertain, "--status", "failed", "--reason", "checked")

    installed = real_json("hooks install", "hooks", "install", "claude-code", run_id, cwd=repo)
    assert installed["settings"].endswith("settings.local.json") and installed["service_started"] is False
    served = real_json("serve", "serve", run_id, "--idle-exit", "30", cwd=repo)
    try:
        assert served["started"] is True
        again = real_json("serve", "serve", run_id, cwd=repo)
        assert again["started"] is False
    finally:
        os.kill(served["pid"], signal.SIGTERM)  # the service this test started

    agent = real_json("run", "run", "--new", "--", "sh", "-c", "echo hi > agent.txt", cwd=repo)
    assert agent["interrupted"] is None and agent["changed_paths"] == 1
    cli_json(runner, "completion", "completion", "bash")
    schema = cli_json(runner, "schema", "schema")
    assert set(schema) == {"formats", "commands"}
    conflicting = cli_json(runner, "conflicts", *c, "conflicts", run_id)
    assert conflicting["run"] == run_id
    exported = cli_json(runner, "branch", *c, "branch", run_id, "vocab-branch")
    # Every call of the run was rewound or rolled back above: the branch holds none of them.
    assert exported["ref"] == "refs/heads/vocab-branch" and exported["commits"] == []

    # Runs that travel and multiply.
    remote = repo.parent / "remote.git"
    git(repo.parent, "clone", "-q", "--bare", str(repo), str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    pushed = real_json("push", "push", run_id, "origin", cwd=repo)
    assert pushed["runs"][0]["run"] == run_id and pushed["runs"][0]["outcome"] == "pushed"
    fetched = real_json("fetch", "fetch", "origin", cwd=repo)
    assert fetched["runs"][0]["outcome"] == "up_to_date"
    many = cli_json(runner, "start --count", *c, "start", "--count", "2", "--label", "best")
    assert len(many["runs"]) == 2 and "head" not in many
    forked = cli_json(runner, "fork", *c, "fork", many["runs"][0]["run"])
    compared = cli_json(runner, "compare", *c, "compare", many["runs"][0]["run"], forked["run"])
    assert {r["run"] for r in compared["runs"]} == {many["runs"][0]["run"], forked["run"]}
    kept = cli_json(runner, "drop --all-but", *c, "drop", "--all-but", many["runs"][0]["run"])
    assert kept["kept"] == many["runs"][0]["run"] and kept["dropped"]

    assert cli_json(runner, "adopt", *c, "adopt", agent["run"])["adopted_events"] == 0  # made here: all signed
    cli_json(runner, "drop", *c, "drop", agent["run"], "--force")
    cli_json(runner, "gc", *c, "gc")
    doctor = cli_json(runner, "doctor", *c, "doctor", kept["kept"])
    assert doctor["run"] == kept["kept"]
    assert doctor["foreign_masked"] is None and doctor["foreign_refusal"] is None  # a run of this clone's own
    system = doctor["system"]  # default deny in the system directories: applies to root, under bubblewrap
    assert set(system) == {"applies", "why", "walked", "listed", "directories", "hidden", "shown"}


def test_demo_json(tmp_path: Path) -> None:
    check("demo", json.loads(sandbox_cmd("demo", "--json", cwd=tmp_path).stdout))


def test_the_check_above_covered_every_documented_output() -> None:
    # Runs after the tests above (pytest keeps file order): each documented output was checked for real.
    assert set(outputs.COMMANDS) - CHECKED == set()


def _free_form(node: Any, name: str, out: set[str]) -> None:
    """The properties under ``node`` whose schema says only "some JSON object" (or "anything")."""
    if isinstance(node, dict):
        any_object = node.get("type") == "object" and "properties" not in node
        if node == {} or (any_object and node.get("additionalProperties", True) is True):
            out.add(name)
        for key, value in node.items():
            _free_form(value, name if key in ("properties", "$defs", "anyOf", "items") else key, out)
    elif isinstance(node, list):
        for value in node:
            _free_form(value, name, out)


def test_nested_outputs_are_typed_but_foreign_json() -> None:
    """What a command prints is typed down to its leaves (issue 24); left free-form only: JSON the
    user or the agent's runtime gave (a compensation, a saved run state), a persisted report's event
    data, and schema's own JSON Schema documents."""
    foreign = {"compensation", "run_state", "session_rollback"}
    for name in outputs.COMMANDS:
        found: set[str] = set()
        _free_form(outputs.schema_of(name), "", found)
        assert found <= foreign | ({""} if name == "schema" else set()), (name, found - foreign)


def test_schema_names_one_command_or_format(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["schema", "call", "finish"], catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.stdout)["title"] == "LedgerEntry"
    result = runner.invoke(cli, ["schema", "stauts"], catch_exceptions=False)
    assert result.exit_code == 2 and "Did you mean 'status'" in result.stderr


def test_completion_completes_run_ids_labels_and_calls(repo: Path) -> None:
    """Through click's completion protocol, in a real process, as the shell calls it."""
    proc = sandbox_cmd("start", "--label", "try-env", "--json", cwd=repo)
    run = json.loads(proc.stdout)
    write(Path(run["worktree"]), "x.txt", "x\n")
    assert sandbox_cmd("exec", "--", "touch", "y.txt", cwd=Path(run["worktree"])).returncode == 0
    call_id = json.loads(sandbox_cmd("log", "--json", cwd=repo).stdout)[0]["call_id"]

    def complete(words: str, cword: int, shell: str = "bash", cwd: Path = repo) -> list[str]:
        env = {"_SANDBOX_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        done = sandbox_cmd(cwd=cwd, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.decode().splitlines()

    assert complete("sandbox status ", 2) == [f"plain,{run['run']}", "plain,try-env"]
    assert complete("sandbox status tr", 2) == ["plain,try-env"]
    assert complete("sandbox log --call ", 3) == [f"plain,{call_id}"]
    assert complete(f"sandbox approve {run['run']} ", 3) == [f"plain,{call_id}"]
    assert "plain,apply" in complete("sandbox ap", 1)
    assert complete("sandbox exec tr", 2) == ["plain,try-env"]  # exec's and run's [RUN] before '--'
    assert [w for w in complete("sandbox run -- tr", 3) if w] == []
    zsh = complete("sandbox log --call ", 3, shell="zsh")
    assert zsh[:3] == ["plain", call_id, "#1 run_command succeeded"]
    script = sandbox_cmd("completion", "bash", cwd=repo).stdout.decode()
    assert "_SANDBOX_COMPLETE=bash_complete" in script
