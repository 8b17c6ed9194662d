"""Checkpoints: content-addressed, kept with the run, pruned by retention, damage detected."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox import faults
from sandbox.cli import cli
from sandbox.run.beforewrite import BEFORE_WRITE_LOG, before_writes
from sandbox.run.checkpoint import (
    CheckpointNotFoundError,
    CheckpointStore,
    checkpoint_id,
    checkpoints_ref,
)
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import git, loose_path, sandbox_cmd


def start(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def reopen(run: Run) -> Run:
    """A fresh Run (and pygit2 repository) so no object cache hides damage on disk."""
    return Run.open(Project(run.project.common_dir), run.run_id)


def loose_object(repo: Path, oid: str) -> Path:
    path = loose_path(repo, oid)
    assert path.exists(), f"{oid} is not a loose object"
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return path


def test_save_is_content_addressed_and_complete(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"path": "new.txt"}, step_id="s1") as call:
        call.write("new.txt", "new\n")
    ckpt = run.checkpoint(
        "after-s1",
        step_id="s1",
        messages=[{"role": "user", "content": "hi"}],
        run_state={"next": 2, "plan": ["a", "b"]},
        budget={"steps": {"limit": 10, "used": 1}, "tokens": {"used": 1200}},
        trace={"spans": [1, 2]},
    )
    assert ckpt.name == "ckpt_001" and ckpt.id.startswith("ckpt_") and len(ckpt.id) == 17
    assert checkpoint_id(ckpt) == ckpt.id
    state = run.state()
    assert ckpt.tool_ledger.tip is not None and ckpt.tool_ledger.count == state.count - 1  # its own event follows
    assert ckpt.file_snapshot.commit == run.head() and ckpt.file_snapshot.base == run.base
    assert [f.path for f in ckpt.file_snapshot.files] == ["new.txt"]
    assert ckpt.budget is not None and ckpt.budget.steps.remaining == 9
    store = CheckpointStore(run)
    assert store.messages(ckpt) == [{"role": "user", "content": "hi"}]
    entries = store.ledger_entries(ckpt)
    assert [e.tool_name for e in entries] == ["write_file"] and entries[0].files[0].path == "new.txt"
    latest, problems = store.load_latest()
    assert latest is not None and latest.checkpoint == ckpt and problems == []
    # the checkpoint event is evidence in the ledger; the ref holds the checkpoint itself
    assert state.data.checkpoint[-1]["id"] == ckpt.id
    assert git(repo, "rev-parse", checkpoints_ref(run.run_id)).strip()
    second = run.checkpoint("again", messages=[1])
    assert second.name == "ckpt_002" and second.id != ckpt.id


def test_find_by_id_prefix_name_label_and_unknown(repo: Path) -> None:
    run = start(repo)
    a = run.checkpoint("first")
    b = run.checkpoint("second")
    store = CheckpointStore(run)
    assert store.find(a.id).checkpoint == a
    assert store.find(b.id[:10]).checkpoint == b
    assert store.find("ckpt_002").checkpoint == b
    assert store.find("first").checkpoint == a
    with pytest.raises(CheckpointNotFoundError):
        store.find("nope")


def test_retention_prunes_without_breaking_kept_ones(repo: Path) -> None:
    git(repo, "config", "sandbox.checkpointRetention", "3")
    run = start(repo)
    made = [run.checkpoint(f"c{i}", messages=[f"message {i}"]) for i in range(5)]
    listing = CheckpointStore(run).list(deep=True)
    assert [c.name for c in listing.checkpoints] == ["ckpt_003", "ckpt_004", "ckpt_005"]
    assert listing.problems == []
    pruned_blob = made[0].messages_ref
    assert pruned_blob is not None
    reachable = git(repo, "rev-list", "--objects", "--all")
    assert pruned_blob not in reachable, "a pruned checkpoint must not be kept alive (by the ledger or history)"
    git(repo, "gc", "-q", "--prune=now")
    fresh = CheckpointStore(reopen(run))
    listing = fresh.list(deep=True)
    assert [c.checkpoint.id for c in listing.checkpoints] == [c.id for c in made[2:]]
    assert fresh.messages(made[4]) == ["message 4"]
    nxt = reopen(run).checkpoint("after-gc")
    assert nxt.name == "ckpt_006"


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_damaged_newest_checkpoint_is_reported_and_previous_used(repo: Path, damage: str) -> None:
    run = start(repo)
    good = run.checkpoint("good", messages=["one"])
    run.checkpoint("bad", messages=["two"])
    stored = CheckpointStore(run).list().checkpoints[-1]
    assert stored.blob is not None
    path = loose_object(repo, stored.blob)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:10] + b"\x00garbage" + data[18:])
    store = CheckpointStore(reopen(run))
    latest, problems = store.load_latest()
    assert latest is not None and latest.checkpoint.id == good.id
    assert len(problems) == 1 and "ckpt_002" in problems[0] and "damaged" in problems[0]
    result = CliRunner().invoke(cli, ["-C", str(repo), "checkpoints", run.run_id], catch_exceptions=False)
    assert result.exit_code == 1 and "ckpt_001" in result.output and "ckpt_002" not in result.stdout
    assert "damaged" in result.stderr


def test_damaged_messages_blob_is_caught_by_the_deep_check(repo: Path) -> None:
    run = start(repo)
    good = run.checkpoint("good", messages=["one"])
    bad = run.checkpoint("bad", messages=["a distinct history"])
    assert bad.messages_ref is not None
    path = loose_object(repo, bad.messages_ref)
    path.write_bytes(path.read_bytes()[:-3])
    store = CheckpointStore(reopen(run))
    assert len(store.list().checkpoints) == 2  # the light listing does not read messages
    latest, problems = store.load_latest()
    assert latest is not None and latest.checkpoint.id == good.id and "ckpt_002" in problems[0]


def test_missing_ref_is_recovered_from_ledger_evidence(repo: Path) -> None:
    run = start(repo)
    a = run.checkpoint("a", messages=["a"])
    b = run.checkpoint("b", messages=["b"])
    git(repo, "update-ref", "-d", checkpoints_ref(run.run_id))
    store = CheckpointStore(reopen(run))
    listing = store.list()
    assert listing.recovered and [c.checkpoint.id for c in listing.checkpoints] == [a.id, b.id]
    assert "missing" in listing.problems[0]
    assert store.repair(listing)
    again = CheckpointStore(reopen(run)).list()
    assert not again.recovered and again.problems == [] and len(again.checkpoints) == 2
    assert reopen(run).checkpoint("c").name == "ckpt_003"


def test_damaged_store_commit_falls_back_to_evidence(repo: Path) -> None:
    run = start(repo)
    a = run.checkpoint("a", messages=["a"])
    tip = git(repo, "rev-parse", checkpoints_ref(run.run_id)).strip()
    path = loose_object(repo, tip)
    path.write_bytes(b"garbage")
    listing = CheckpointStore(reopen(run)).list()
    assert listing.recovered and [c.checkpoint.id for c in listing.checkpoints] == [a.id]
    assert "damaged" in listing.problems[0]


def test_automatic_checkpoints_are_ledger_events(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"p": 1}) as call:
        call.write("x.txt", "x")
    autos = CheckpointStore(run).auto()
    labels = [a.checkpoint.label for a in autos]
    assert labels[0] == "run_started" and labels[-1].startswith("call_succeeded")
    assert autos[-1].checkpoint.file_snapshot.commit == run.head()
    assert autos[0].checkpoint.file_snapshot.commit == run.base
    assert CheckpointStore(run).find(autos[0].name).checkpoint.kind == "auto"
    result = CliRunner().invoke(cli, ["-C", str(repo), "checkpoints", run.run_id, "--auto", "--json"])
    assert result.exit_code == 0
    assert len(json.loads(result.output)["checkpoints"]) == len(autos)


def test_capture_before_write_is_a_hint_per_path(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("write_file", {"p": 1}) as call:
        call.write("a.txt", "a")
        call.write("dir/b.txt", "b")
    assert list(before_writes(run)) == [(os.getpid(), "a.txt"), (os.getpid(), "dir/b.txt")]
    CheckpointStore(run).capture_before_write("c.txt")
    with open(os.path.join(run.dir, BEFORE_WRITE_LOG), "a") as fh:
        fh.write('[1, "torn')  # a crash mid-line is skipped
    assert [p for _pid, p in before_writes(run)] == ["a.txt", "dir/b.txt", "c.txt"]


def test_cli_checkpoint_and_list(repo: Path, tmp_path: Path, runner: CliRunner) -> None:
    run = start(repo)
    (tmp_path / "m.json").write_text('[{"role": "user", "content": "go"}]')
    (tmp_path / "s.json").write_text('{"next": 3}')
    (tmp_path / "b.json").write_text('{"steps": {"limit": 5, "used": 2}}')
    args = ["-C", str(repo), "checkpoint", run.run_id, "--label", "L", "--step", "s3"]
    args += ["--messages", str(tmp_path / "m.json"), "--state", str(tmp_path / "s.json")]
    result = runner.invoke(cli, [*args, "--budget", str(tmp_path / "b.json"), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["name"] == "ckpt_001" and data["run_state"] == {"next": 3} and data["step_id"] == "s3"
    assert data["budget"]["steps"]["remaining"] == 3
    result = runner.invoke(cli, ["-C", str(repo), "checkpoint", run.run_id, "--label", "plain"])
    assert result.exit_code == 0 and result.output.startswith("Saved checkpoint ckpt_002 (plain) of run ")
    # A label is optional: the checkpoint is numbered anyway.
    result = runner.invoke(cli, ["-C", str(repo), "checkpoint", run.run_id], catch_exceptions=False)
    assert result.exit_code == 0 and result.output.startswith("Saved checkpoint ckpt_003 of run ")
    result = runner.invoke(cli, ["-C", str(repo), "checkpoints", run.run_id, "--json"])
    listed = json.loads(result.output)
    assert [c["label"] for c in listed["checkpoints"]] == ["L", "plain", None] and listed["problems"] == []
    result = runner.invoke(cli, ["-C", str(repo), "checkpoints", run.run_id])
    assert "ckpt_001" in result.output and "step s3" in result.output
    # One name per checkpoint (the id is in --json) and the time with its zone.
    row = next(line for line in result.output.splitlines() if line.startswith("ckpt_001"))
    assert "ckpt_" not in row[len("ckpt_001") :] and re.search(r"\d\d:\d\d:\d\d [+-]\d{4}", row)


@pytest.mark.parametrize(
    "content, option",
    [("{not json", "--messages"), ("[1,", "--state"), ("[1, 2]", "--budget"), ('{"steps": 5}', "--budget")],
)
def test_cli_checkpoint_malformed_input_is_one_line(repo: Path, tmp_path: Path, content: str, option: str) -> None:
    run = start(repo)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = sandbox_cmd("checkpoint", run.run_id, "--label", "x", option, str(bad), cwd=repo)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in proc.stderr
    assert CheckpointStore(reopen(run)).list().checkpoints == []


def test_cli_checkpoint_missing_file_and_unknown_run(repo: Path, tmp_path: Path, runner: CliRunner) -> None:
    run = start(repo)
    result = runner.invoke(cli, ["-C", str(repo), "checkpoint", run.run_id, "--label", "x", "--state", "/nonexistent"])
    assert result.exit_code == 2 and "nonexistent" in result.stderr
    result = runner.invoke(cli, ["-C", str(repo), "checkpoints", "zzzz"])
    assert result.exit_code == 2


def test_fault_points_are_registered() -> None:
    import sandbox.recovery.actions  # noqa: F401
    import sandbox.recovery.resume  # noqa: F401

    for name in ("checkpoint.save.before", "checkpoint.save.after_ref", "resume.after_fence", "resume.after_drift"):
        assert name in faults.POINTS


@pytest.mark.parametrize(
    "point",
    [
        "checkpoint.save.before",
        "checkpoint.save.after_blobs",
        "checkpoint.save.after_commit",
        "checkpoint.save.after_ref",
        "checkpoint.save.after_ledger",
    ],
)
def test_crash_during_save_keeps_the_store_consistent(repo: Path, point: str) -> None:
    run = start(repo)
    first = run.checkpoint("first", messages=["m"])
    proc = sandbox_cmd("checkpoint", run.run_id, "--label", "second", cwd=repo, env={"SANDBOX_FAULT": point})
    assert proc.returncode == -9
    store = CheckpointStore(reopen(run))
    listing = store.list(deep=True)
    assert listing.problems == []
    names = [c.checkpoint.label for c in listing.checkpoints]
    committed = point in ("checkpoint.save.after_ref", "checkpoint.save.after_ledger")
    assert names == (["first", "second"] if committed else ["first"])
    assert listing.checkpoints[0].checkpoint == first
    third = reopen(run).checkpoint("third")
    assert third.seq == (3 if committed else 2)


def test_non_utf8_file_names_round_trip(repo: Path) -> None:
    run = start(repo)
    name = os.fsdecode(b"caf\xe9.txt")
    with run.tool_call("write_file", {"p": 1}) as call:
        call.write(name, "bytes\n")
    ckpt = run.checkpoint("odd names", messages=[name])
    assert [f.path for f in ckpt.file_snapshot.files] == [name]
    store = CheckpointStore(reopen(run))
    latest, problems = store.load_latest()
    assert problems == [] and latest is not None and latest.checkpoint == ckpt
    assert store.messages(ckpt) == [name]
