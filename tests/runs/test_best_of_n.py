"""Best-of-N: N runs from one snapshot, forks, compare (with a recorded check), apply the winner and
drop the rest."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from tests.conftest import git, sandbox_cmd, tree_digest, user_state


def sb(runner: CliRunner, where: Path, *args: str, code: int = 0) -> str:
    result = runner.invoke(cli, ["-C", str(where), *args], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def test_start_count_makes_n_runs_from_one_snapshot(repo: Path, runner: CliRunner) -> None:
    before, state = tree_digest(repo), user_state(repo)
    started = json.loads(sb(runner, repo, "start", "--count", "3", "--label", "try", "--json"))
    runs = started["runs"]
    assert len(runs) == 3 and len({r["run"] for r in runs}) == 3
    assert [r["label"] for r in runs] == ["try-1", "try-2", "try-3"]
    bases = {git(repo, "rev-parse", f"refs/sandbox/{r['run']}/base").strip() for r in runs}
    assert bases == {started["base"]}  # one snapshot commit
    for r in runs:
        wt = Path(r["worktree"])
        assert (wt / "README.md").read_text() == "hello\nuser edit\n"  # the uncommitted edit
        assert (wt / "notes.txt").read_text() == "untracked notes\n"
        assert not (wt / "debug.log").exists()
    # Snapshot commits: exactly one was made (the others' refs name the same commit).
    snapshots = git(repo, "log", "--all", "--format=%H %s", "--grep=sandbox snapshot")
    assert len(snapshots.splitlines()) == 1
    assert tree_digest(repo) == before and user_state(repo) == state
    listing = {r["run"]: r for r in json.loads(sb(runner, repo, "list", "--json"))}
    assert set(listing) == {r["run"] for r in runs}


def test_compare_check_apply_the_winner_and_drop_the_rest(repo: Path, runner: CliRunner) -> None:
    runs = [r["run"] for r in json.loads(sb(runner, repo, "start", "--count", "3", "--json"))["runs"]]
    a, b, c = runs
    sb(runner, repo, "exec", a, "--", "sh", "-c", "printf 'X = 2\\n' > src/util.py")
    sb(runner, repo, "exec", b, "--", "sh", "-c", "printf 'X = 3\\n' > src/util.py; echo b > b.txt")
    sb(runner, repo, "exec", c, "--", "sh", "-c", "printf 'X = 2\\n' > src/util.py; exit 4", code=4)
    out = json.loads(sb(runner, repo, "compare", a, "--check", "grep -q 'X = 2' src/util.py", "--json"))
    rows = {r["run"]: r for r in out["runs"]}
    assert set(rows) == set(runs) and out["same_base"]
    assert rows[a]["files_changed"] == 1 and rows[a]["lines_added"] == 1 and rows[a]["lines_removed"] == 1
    assert rows[b]["files_changed"] == 2 and rows[c]["failed_calls"] == 1
    assert [rows[r]["check"]["exit_code"] for r in (a, b, c)] == [0, 1, 0]
    # The check is a call of each run.
    log_b = json.loads(sb(runner, repo, "log", b, "--json"))
    assert log_b[-1]["tool_name"] == "check" and log_b[-1]["status"] == "failed"
    disagree = {d["path"]: d["states"] for d in out["disagree"]}
    assert set(disagree) == {"src/util.py", "b.txt"}
    assert disagree["src/util.py"][a] == disagree["src/util.py"][c] != disagree["src/util.py"][b]
    assert disagree["b.txt"][a] == "unchanged"
    text = sb(runner, repo, "compare", a, b, c)
    assert "2 differ" in text and "src/util.py" in text
    sb(runner, repo, "apply", a)
    assert (repo / "src" / "util.py").read_text() == "X = 2\n"
    # b and c hold changes not applied: as 'drop' does, '--all-but' refuses them without --force.
    refused = runner.invoke(cli, ["-C", str(repo), "drop", "--all-but", a])
    assert refused.exit_code == 1 and "nothing was dropped" in refused.output
    assert len(json.loads(sb(runner, repo, "list", "--json"))) == 3
    dropped = json.loads(sb(runner, repo, "drop", "--all-but", a, "--force", "--json"))
    assert sorted(d["run"] for d in dropped["dropped"]) == sorted([b, c])
    assert [r["run"] for r in json.loads(sb(runner, repo, "list", "--json"))] == [a]


def test_fork_at_a_call_and_at_a_checkpoint(repo: Path, runner: CliRunner) -> None:
    run_id = json.loads(sb(runner, repo, "start", "--json"))["run"]
    sb(runner, repo, "exec", run_id, "--", "sh", "-c", "echo one > one.txt")
    first = json.loads(sb(runner, repo, "log", run_id, "--json"))[0]["call_id"]
    sb(runner, repo, "checkpoint", run_id, "--label", "after-one")
    sb(runner, repo, "exec", run_id, "--", "sh", "-c", "echo two > two.txt; rm src/app.py")
    head_fork = json.loads(sb(runner, repo, "fork", run_id, "--json"))
    wt = Path(head_fork["worktree"])
    assert (wt / "two.txt").exists() and not (wt / "src/app.py").exists()
    at_call = json.loads(sb(runner, repo, "fork", run_id, "--at", first, "--label", "early", "--json"))
    wt = Path(at_call["worktree"])
    assert (wt / "one.txt").exists() and not (wt / "two.txt").exists() and (wt / "src/app.py").exists()
    assert at_call["forked_from"] == f"{run_id}@{first}" and at_call["label"] == "early"
    by_number = json.loads(sb(runner, repo, "fork", run_id, "--at", "#1", "--json"))  # names as in sandbox log
    assert by_number["forked_from"] == f"{run_id}@{first}"
    sb(runner, repo, "drop", by_number["run"], "--force")
    at_ckpt = json.loads(sb(runner, repo, "fork", run_id, "--at", "after-one", "--json"))
    assert (Path(at_ckpt["worktree"]) / "one.txt").exists()
    assert not (Path(at_ckpt["worktree"]) / "two.txt").exists()
    # The fork's first call holds the source's changes: its diff and apply cover them.
    calls = json.loads(sb(runner, repo, "log", at_call["run"], "--json"))
    assert [c["tool_name"] for c in calls] == ["fork"] and [f["path"] for f in calls[0]["files"]] == ["one.txt"]
    sb(runner, repo, "exec", at_call["run"], "--", "sh", "-c", "echo three > three.txt")
    sb(runner, repo, "apply", at_call["run"])
    assert (repo / "one.txt").read_text() == "one\n" and (repo / "three.txt").exists()
    assert not (repo / "two.txt").exists()
    # The source is unchanged; all four runs are one group.
    assert len(json.loads(sb(runner, repo, "log", run_id, "--json"))) == 2
    out = json.loads(sb(runner, repo, "compare", run_id, "--json"))
    assert {r["run"] for r in out["runs"]} == {run_id, head_fork["run"], at_call["run"], at_ckpt["run"]}
    result = runner.invoke(cli, ["-C", str(repo), "fork", run_id, "--at", "nothing-like-it"])
    assert result.exit_code == 2 and "has no call or checkpoint" in result.output


def test_start_count_through_the_real_cli(repo: Path) -> None:
    proc = sandbox_cmd("start", "--count", "2", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert all(Path(r["worktree"], "README.md").exists() for r in runs)
    proc = sandbox_cmd("compare", runs[0]["run"], cwd=repo)
    assert proc.returncode == 0 and b"0 differ" in proc.stdout, proc.stderr


def test_compare_check_output_comes_after_the_table_not_inside_it(repo: Path) -> None:
    runs = [r["run"] for r in json.loads(sandbox_cmd("start", "--count", "2", "--json", cwd=repo).stdout)["runs"]]
    proc = sandbox_cmd(
        "compare", *runs, "--isolate", "off", "--check", "echo line-one; echo boom >&2; exit 3", cwd=repo
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert out.splitlines()[0].startswith("RUN ")  # the table first
    table_end = out.index("differ:")
    assert "line-one" not in out[:table_end] and "boom" not in out[:table_end]
    assert "exited 3; its last 2 of 2 output line(s):" in out[table_end:]
    assert "  line-one" in out and "  boom" in out
