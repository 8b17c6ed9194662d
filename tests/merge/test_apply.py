"""sandbox apply: merge-back into the user's tree, all or nothing, never over a user edit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.errors import PathRefusedError, UnknownCallError
from sandbox.merge import mergeback, planning
from sandbox.models import ApplyJournal, EventKind, FileChange
from sandbox.run.run import Run
from sandbox.store import journal, objects
from sandbox.store.project import Project
from tests.conftest import commit_all, git, tree_digest, user_state, write

BINARY = bytes(range(256)) * 4


def start(root: Path) -> Run:
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir)


def agent_changes(run: Run) -> tuple[str, str]:
    """Two calls: a mixed bag of changes, then a second edit of README.md."""
    with run.tool_call("edit") as call:
        call.write("README.md", "hello\nuser edit\nagent line\n")
        call.write("src/new.py", "NEW = 1\n")
        call.delete("src/util.py")
        call.chmod("src/app.py", True)
        call.symlink("link", "README.md")
        call.write("data.bin", BINARY)
        first = call.call_id
    with run.tool_call("edit2") as call:
        call.write("README.md", "hello\nuser edit\nagent line\nsecond\n")
        second = call.call_id
    assert first and second
    return first, second


def invoke(runner: CliRunner, root: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_apply_whole_run_writes_every_kind_of_change(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    before = user_state(repo)
    code, out, err = invoke(runner, repo, "apply", run.run_id, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert sorted(report["applied"]) == ["README.md", "data.bin", "link", "src/app.py", "src/new.py", "src/util.py"]
    assert report["conflicts"] == [] and report["skipped"] == []
    assert (repo / "README.md").read_text() == "hello\nuser edit\nagent line\nsecond\n"
    assert (repo / "src/new.py").read_text() == "NEW = 1\n"
    assert not (repo / "src/util.py").exists()
    assert os.stat(repo / "src/app.py").st_mode & 0o111
    assert os.readlink(repo / "link") == "README.md"
    assert (repo / "data.bin").read_bytes() == BINARY
    assert (repo / "notes.txt").read_text() == "untracked notes\n"
    assert (repo / "debug.log").read_text() == "ignored\n"
    assert user_state(repo) == before
    assert run.unapplied_calls() == []
    assert not os.path.exists(journal.journal_path(run.project, str(repo)))


def test_apply_twice_is_a_no_op(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    assert invoke(runner, repo, "apply", run.run_id)[0] == 0
    digest, events = tree_digest(repo), len(run.events())
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["applied"] == [] and len(report["skipped"]) == 6
    assert tree_digest(repo) == digest
    assert len(run.events()) == events


def test_conflict_writes_nothing_and_exits_1(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    write(repo, "README.md", "the user rewrote it\n")
    digest, before = tree_digest(repo), user_state(repo)
    code, out, err = invoke(runner, repo, "apply", run.run_id, "--json")
    assert code == 1
    assert "nothing was written" in err and err.count("\n") == 1
    report = json.loads(out)
    (conflict,) = report["conflicts"]
    assert conflict["path"] == "README.md"
    base = objects.lookup(run.repo, objects.commit_tree(run.repo, run.base), "README.md")
    assert base is not None and conflict["base"] == base.oid
    assert conflict["user"] == git(repo, "hash-object", "README.md").strip()
    assert conflict["agent"] and conflict["reason"] and conflict["hint"]
    assert tree_digest(repo) == digest and user_state(repo) == before
    code, out, _ = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "README.md" in out and "what to do" in out


def test_user_made_the_same_change_is_skipped(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/util.py", "X = 2\n")
        call.write("other.txt", "o\n")
    write(repo, "src/util.py", "X = 2\n")
    report = mergeback.apply(run)
    assert report.applied == ["other.txt"] and report.skipped == ["src/util.py"]
    assert report.reasons["src/util.py"] == "already applied"


def test_partial_apply_by_call_then_the_rest(repo: Path) -> None:
    run = start(repo)
    first, second = agent_changes(run)
    report = mergeback.apply(run, calls=[first[:9]])
    assert "README.md" in report.applied
    assert (repo / "README.md").read_text() == "hello\nuser edit\nagent line\n"
    assert [e.call_id for e in run.unapplied_calls()] == [second]
    report = mergeback.apply(run)
    assert report.applied == ["README.md"] and report.conflicts == []
    assert (repo / "README.md").read_text().endswith("second\n")
    assert run.unapplied_calls() == []


def test_partial_apply_by_path_then_the_rest_keeps_later_user_edits(repo: Path) -> None:
    run = start(repo)
    agent_changes(run)
    report = mergeback.apply(run, paths=["src"])
    assert sorted(report.applied) == ["src/app.py", "src/new.py", "src/util.py"]
    assert not (repo / "link").exists()
    write(repo, "src/new.py", "NEW = 'mine'\n")  # the user edits what was applied
    report = mergeback.apply(run)
    assert sorted(report.applied) == ["README.md", "data.bin", "link"]
    assert "src/new.py" in report.skipped
    assert (repo / "src/new.py").read_text() == "NEW = 'mine'\n"


def test_dry_run_writes_nothing(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    digest, events = tree_digest(repo), len(run.events())
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--dry-run")
    assert code == 0 and "Would write 6 path(s)" in out
    assert tree_digest(repo) == digest and len(run.events()) == events


def test_rename_and_file_directory_swaps(tmp_path: Path) -> None:
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "r", {"a/x.txt": "x\n", "f": "file\n", "keep.txt": "k\n"})
    run = start(root)
    with run.tool_call("swap") as call:
        call.rename("a/x.txt", "b/y.txt")  # a/ becomes empty and disappears
        call.delete("f")
        call.write("f/inner.txt", "now a dir\n")
        call.write("a", "now a file\n")
    before = tree_digest(root)
    mergeback.apply(run)
    assert (root / "b/y.txt").read_text() == "x\n"
    assert (root / "a").read_text() == "now a file\n"
    assert (root / "f/inner.txt").read_text() == "now a dir\n"
    undo_all(run)
    assert tree_digest(root) == before


def undo_all(run: Run) -> None:
    from sandbox.merge.undo import NothingToUndoError, undo

    while True:
        try:
            undo(run)
        except NothingToUndoError:
            return


def test_directory_with_untracked_files_blocks_a_file(tmp_path: Path) -> None:
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "r", {"d/x": "x\n"})
    run = start(root)
    with run.tool_call("w") as call:
        call.delete("d")
        call.write("d", "file now\n")
    write(root, "d/untracked.txt", "mine\n")
    with pytest.raises(mergeback.ApplyConflict) as info:
        mergeback.apply(run)
    assert info.value.report.conflicts[0].path == "d"
    assert (root / "d/x").read_text() == "x\n" and (root / "d/untracked.txt").exists()


def test_moved_head_needs_the_flag(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/new.py", "n\n")
    write(repo, "other.txt", "o\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-q", "-m", "user commit")
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "--allow-moved-head" in err and not (repo / "src/new.py").exists()
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--allow-moved-head")
    assert code == 0 and "HEAD moved" in out and (repo / "src/new.py").exists()


@pytest.mark.parametrize("marker", ["rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD", "BISECT_LOG"])
def test_refuses_during_a_rebase_or_merge(repo: Path, runner: CliRunner, marker: str) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/new.py", "n\n")
    path = repo / ".git" / marker
    if marker.endswith("-merge"):
        path.mkdir()
    else:
        path.write_text("x\n")
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "in progress" in err and err.count("\n") == 1
    assert not (repo / "src/new.py").exists()


def test_real_rebase_in_progress_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "r", {"f": "1\n"})
    git(root, "checkout", "-q", "-b", "side")
    write(root, "f", "side\n")
    commit_all(root, "side")
    git(root, "checkout", "-q", "main")
    write(root, "f", "main\n")
    commit_all(root, "main")
    git(root, "rebase", "side", check=False)  # stops on the conflict
    assert (root / ".git/rebase-merge").exists() or (root / ".git/rebase-apply").exists()
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("w") as call:
        call.write("g", "g\n")
    code, _, err = invoke(runner, root, "apply", run.run_id)
    assert code == 1 and "rebase" in err and not (root / "g").exists()


def test_read_only_file_is_refused_before_anything_is_written(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    agent_changes(run)
    (repo / "src/util.py").chmod(0o444)
    digest = tree_digest(repo)
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "Read-only" in err and "src/util.py" in err
    assert tree_digest(repo) == digest


def test_read_only_directory_is_refused(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/new.py", "n\n")
        call.write("top.txt", "t\n")
    (repo / "src").chmod(0o555)
    try:
        with pytest.raises(mergeback.ReadOnlyTargetError):
            mergeback.apply(run)
        assert not (repo / "top.txt").exists()
    finally:
        (repo / "src").chmod(0o755)


def craft_call(run: Run, changes: dict[str, tuple[objects.Entry | None, objects.Entry | None]]) -> str:
    """Record a call whose commit holds arbitrary paths (what a tampered run could contain)."""
    call_id = run.start_call("crafted")
    head = run.head()
    tree = objects.edit_tree(run.repo, objects.commit_tree(run.repo, head), {p: a for p, (_b, a) in changes.items()})
    sig = objects.signature()
    commit = str(run.repo.create_commit(None, sig, sig, "crafted", tree, [head]))
    files = [
        FileChange(
            path=p,
            before_hash=b.oid if b else None,
            after_hash=a.oid if a else None,
            before_mode=b.mode if b else None,
            after_mode=a.mode if a else None,
        )
        for p, (b, a) in changes.items()
    ]
    event = run.new_event(EventKind.call_succeeded, call_id, commit=commit, parent_commit=head, files=files)
    run.record_event(event, keep=[commit])
    return call_id


def test_symlinked_parent_directory_is_never_written_through(repo: Path, tmp_path: Path, runner: CliRunner) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run = start(repo)
    blob = objects.Entry(objects.MODE_FILE, objects.write_blob(run.repo, b"evil\n"))
    craft_call(run, {"lnk/payload": (None, blob), "fine.txt": (None, blob)})
    os.symlink(str(outside), repo / "lnk")
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "symlink" in err
    assert list(outside.iterdir()) == [] and not (repo / "fine.txt").exists()


@pytest.mark.parametrize("bad", [".git/hooks/post-checkout", "a/../../escape", "/etc/evil", "sub/.GIT/config"])
def test_paths_into_git_or_outside_are_refused(repo: Path, bad: str) -> None:
    run = start(repo)
    blob = objects.Entry(objects.MODE_FILE, objects.write_blob(run.repo, b"evil\n"))
    call_id = run.start_call("crafted")
    files = [FileChange(path=bad, before_hash=None, after_hash=blob.oid, before_mode=None, after_mode=blob.mode)]
    head = run.head()
    run.record(EventKind.call_succeeded, call_id, commit=head, parent_commit=head, files=files)
    # What is applied comes from the call's commit, never from the file list its event claims: the
    # lying event adds no path (its commit changed nothing).
    with pytest.raises((PathRefusedError, planning.NothingToApplyError)):
        mergeback.apply(run)
    assert not (repo / ".git/hooks/post-checkout").exists()


def test_three_way_writes_markers_for_text_and_refuses_binary(repo: Path, runner: CliRunner) -> None:
    write(repo, "src/util.py", "".join(f"line {i}\n" for i in range(20)))
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("src/util.py", "line 0 agent\n" + "".join(f"line {i}\n" for i in range(1, 20)))
        call.write("src/app.py", "print('agent')\n")
    write(repo, "src/util.py", "".join(f"line {i}\n" for i in range(19)) + "line 19 user\n")
    write(repo, "src/app.py", "print('user')\n")
    code, out, _ = invoke(runner, repo, "apply", run.run_id, "--3way", "--json")
    report = json.loads(out)
    assert code == 1 and report["attention"] == ["src/app.py"]
    assert report["merged"] == ["src/app.py", "src/util.py"]
    merged = (repo / "src/util.py").read_text()
    assert merged.startswith("line 0 agent\n") and merged.endswith("line 19 user\n")
    assert "<<<<<<< yours" in (repo / "src/app.py").read_text()
    run2 = start(repo)
    with run2.tool_call("w") as call:
        call.write("data.bin", BINARY)
    write(repo, "data.bin", BINARY[::-1])
    with pytest.raises(mergeback.ApplyConflict):
        mergeback.apply(run2, three_way=True)
    assert (repo / "data.bin").read_bytes() == BINARY[::-1]


def test_unknown_call_nothing_to_apply_and_unknown_run(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "no recorded file changes" in err
    with run.tool_call("w") as call:
        call.write("n.txt", "n\n")
    code, _, err = invoke(runner, repo, "apply", run.run_id, "--call", "call_nope")
    assert code == 2 and "no call" in err and err.count("\n") == 1
    with pytest.raises(UnknownCallError):
        mergeback.apply(run, calls=["zzz"])
    code, _, err = invoke(runner, repo, "apply", "nosuchrun")
    assert code == 2 and err.count("\n") == 1
    assert not (repo / "n.txt").exists()


def test_pending_journal_blocks_other_applies(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    with run.tool_call("w") as call:
        call.write("n.txt", "n\n")
    event = run.new_event(EventKind.apply_finished, data={})
    pending = ApplyJournal(op="apply", run_id=run.run_id, target="user", target_dir=str(repo), event=event)
    journal.save(run.project, pending)
    code, _, err = invoke(runner, repo, "apply", run.run_id)
    assert code == 1 and "--continue" in err and "sandbox undo" in err
    code, out, _ = invoke(runner, repo, "apply", "--continue")
    assert code == 0
    assert invoke(runner, repo, "apply", run.run_id)[0] == 0


def test_four_processes_applying_to_one_tree_are_serialised(repo: Path) -> None:
    runs = []
    for i in range(4):
        run = start(repo)
        with run.tool_call("w") as call:
            call.write(f"own{i}.txt", f"{i}\n")
            call.write("shared.txt", f"run {i}\n")  # only the first apply can take this one
        runs.append(run)
    exe = Path(sys.executable).parent / "sandbox"
    procs = [
        subprocess.Popen([str(exe), "-C", str(repo), "apply", r.run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for r in runs
    ]
    codes = [p.wait(timeout=120) for p in procs]
    assert sorted(codes) == [0, 1, 1, 1]
    winner = codes.index(0)
    assert (repo / "shared.txt").read_text() == f"run {winner}\n"
    for i in range(4):
        assert (repo / f"own{i}.txt").exists() == (i == winner)  # all or nothing per run
