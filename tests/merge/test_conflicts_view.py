"""Conflicts explained: ``sandbox conflicts`` / ``diff --conflicts`` show base, agent and yours;
``apply --3way`` writes git's markers; labels are right everywhere (undo included)."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest
from click.testing import CliRunner

from sandbox.merge import mergeback
from sandbox.run.run import Run
from tests.conftest import git, sandbox_cmd, tree_digest, user_state, write
from tests.merge.test_apply import invoke, start

BASE = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n"
AGENT = BASE.replace("two", "two (agent)")
YOURS = BASE.replace("two", "two (yours)")
AGENT_APP = "print('agent')\n"


def conflicting(repo: Path) -> Run:
    write(repo, "src/app.py", BASE)
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("src/app.py", AGENT)
        call.write("src/new.py", "NEW = 1\n")
    write(repo, "src/app.py", YOURS)
    return run


def blob(text: str) -> str:
    return str(pygit2.hash(text.encode()))


def test_conflicts_shows_base_agent_and_yours_and_writes_nothing(repo: Path, runner: CliRunner) -> None:
    run = conflicting(repo)
    digest, state = tree_digest(repo), user_state(repo)
    code, out, _ = invoke(runner, repo, "conflicts", run.run_id)
    assert code == 0
    assert "CONFLICT src/app.py: your file differs from the version the agent started from" in out
    assert f"base   {blob(BASE)[:12]}" in out and f"agent  {blob(AGENT)[:12]}" in out
    assert f"yours  {blob(YOURS)[:12]}" in out
    block = out[out.index("<<<<<<< yours") :]
    assert block.index("two (yours)") < block.index("||||||| base") < block.index("\ntwo\n")
    assert block.index("\ntwo\n") < block.index("=======") < block.index("two (agent)") < block.index(">>>>>>> agent")
    assert "@@ your line 1 @@" in out and "src/new.py" not in out  # only the conflicting path
    code, same, _ = invoke(runner, repo, "diff", run.run_id, "--conflicts")
    assert code == 0 and same == out
    code, coloured, _ = invoke(runner, repo, "conflicts", run.run_id, "--color=always")
    assert code == 0 and "\x1b[" in coloured and "\x1b[" not in out
    code, out, _ = invoke(runner, repo, "conflicts", run.run_id, "--json")
    found = json.loads(out)["conflicts"]
    assert [c["path"] for c in found] == ["src/app.py"]
    assert (found[0]["base"]["oid"], found[0]["agent"]["oid"], found[0]["yours"]["oid"]) == (
        blob(BASE),
        blob(AGENT),
        blob(YOURS),
    )
    assert any("two (agent)" in line for r in found[0]["regions"] for line in r["lines"])
    assert tree_digest(repo) == digest and user_state(repo) == state


def test_apply_refusal_points_to_conflicts_with_labels_in_order(repo: Path, runner: CliRunner) -> None:
    run = conflicting(repo)
    code, out, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "nothing was written" in err.lower()
    assert f"base {blob(BASE)[:12]}  agent {blob(AGENT)[:12]}  yours {blob(YOURS)[:12]}" in out
    assert "sandbox conflicts" in out


def test_no_conflicts_says_so(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    code, out, _ = invoke(runner, repo, "conflicts", run.run_id)  # no calls yet
    assert code == 0 and "No conflicts" in out
    with run.tool_call("edit") as call:
        call.write("src/new.py", "NEW = 1\n")
    code, out, _ = invoke(runner, repo, "conflicts", run.run_id)
    assert code == 0 and "No conflicts" in out


@pytest.mark.parametrize("style", [None, "diff3"])
def test_apply_3way_writes_gits_markers_in_gits_conflict_style(
    repo: Path, runner: CliRunner, style: str | None
) -> None:
    if style:
        git(repo, "config", "merge.conflictStyle", style)
    run = conflicting(repo)
    code, _, _ = invoke(runner, repo, "apply", run.run_id, "--3way")
    assert code == 1  # markers need attention
    base = "||||||| base\ntwo\n" if style == "diff3" else ""
    assert (
        f"<<<<<<< yours\ntwo (yours)\n{base}=======\ntwo (agent)\n>>>>>>> agent\n" in (repo / "src/app.py").read_text()
    )


def test_undo_conflict_labels_base_as_the_original_and_agent_as_the_agents(repo: Path, runner: CliRunner) -> None:
    """The demo's undo conflict printed 'base <agent's> agent <original>': the labels swapped."""
    original = (repo / "src/app.py").read_text()
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("src/app.py", AGENT_APP)
    mergeback.apply(run)
    write(repo, "src/app.py", AGENT_APP + "# my own edit\n")
    code, out, _ = invoke(runner, repo, "undo", run.run_id, "--json")
    assert code == 1
    conflict = json.loads(out)["conflicts"][0]
    assert conflict["base"] == blob(original)
    assert conflict["agent"] == blob(AGENT_APP)
    assert conflict["user"] == blob(AGENT_APP + "# my own edit\n")
    code, out, _ = invoke(runner, repo, "undo", run.run_id)
    assert f"base {blob(original)[:12]}  agent {blob(AGENT_APP)[:12]}" in out


def test_the_demos_undo_conflict_names_base_and_agent_right(tmp_path: Path) -> None:
    original = "def greet(name):\n    return 'hello ' + name\n"  # src/app.py in sandbox.cli.demo
    agent = original.replace("hello ", "hi ")  # its scripted agent's sed
    proc = sandbox_cmd("demo", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout.decode()[-2000:]
    assert f"base {blob(original)[:12]}  agent {blob(agent)[:12]}  yours ".encode() in proc.stdout
