"""Recording calls: one commit per changing call, exact before/after per path, confined paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.agent.execute import execute
from sandbox.errors import PathRefusedError, StaleWriterError
from sandbox.models import CallStatus, EventKind
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.project import Project
from tests.conftest import git, user_state


@pytest.fixture
def run(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    return Run.start(project, workdir)


def blob(run: Run, data: bytes) -> str:
    import pygit2

    return str(pygit2.hash(data))


def test_write_helpers_make_one_commit_with_before_and_after(run: Run) -> None:
    base_head = run.head()
    with run.tool_call("edit", {"n": 1}) as call:
        call.write("README.md", "new readme\n")
        call.write("src/new.py", "x = 2\n", executable=True)
        call.delete("src/util.py")
        call.symlink("link", "README.md")
    entry = call.entry
    assert entry is not None and entry.status == CallStatus.succeeded
    files = {f.path: f for f in entry.files}
    assert set(files) == {"README.md", "src/new.py", "src/util.py", "link"}
    assert files["README.md"].before_hash == blob(run, b"hello\nuser edit\n")
    assert files["README.md"].after_hash == blob(run, b"new readme\n")
    assert files["src/new.py"].before_hash is None and files["src/new.py"].after_mode == objects.MODE_EXEC
    assert files["src/util.py"].after_hash is None and files["src/util.py"].before_mode == objects.MODE_FILE
    assert files["link"].after_mode == objects.MODE_LINK
    commit = run.repo[entry.commit]
    assert [str(p) for p in commit.parent_ids] == [base_head]
    assert f"Sandbox-Call: {entry.call_id}" in commit.message
    assert f"Sandbox-Run: {run.run_id}" in commit.message
    assert run.head() == entry.commit
    assert git(Path(run.project.common_dir), "rev-parse", f"refs/sandbox/{run.run_id}/head").strip() == entry.commit


def test_call_without_changes_makes_no_commit(run: Run) -> None:
    head = run.head()
    with run.tool_call("read_file", {"path": "README.md"}) as call:
        call.read("README.md")
        call.write("src/util.py", "X = 1\n")  # same content: no change
    assert call.entry is not None and call.entry.commit is None and call.entry.files == []
    assert run.head() == head


def test_exception_marks_failed_and_reraises_with_changes_kept(run: Run) -> None:
    with pytest.raises(RuntimeError, match="boom"), run.tool_call("flaky") as call:
        call.write("partial.txt", "half\n")
        raise RuntimeError("boom")
    entry = run.entries()[-1]
    assert entry.status == CallStatus.failed
    assert entry.error == "RuntimeError: boom"
    assert [f.path for f in entry.files] == ["partial.txt"]


def test_started_event_is_in_the_ledger_before_the_body_runs(run: Run) -> None:
    with run.tool_call("send_email", {"to": "x"}, idempotency="non_idempotent", replay="never") as call:
        entry = run.entry(call.call_id or "")
        assert entry.status == CallStatus.started
        assert entry.idempotency.value == "non_idempotent" and entry.replay_policy.value == "never"
        kinds = [e.kind for _, e in run.events()]
        assert kinds[-1] == EventKind.call_started


@pytest.mark.parametrize(
    "bad",
    ["../outside.txt", "/etc/passwd", ".git/config", "src/../../x", "a/.git/hooks/pre-commit", "x\0y", "a" * 300],
)
def test_paths_outside_the_worktree_are_refused(run: Run, bad: str) -> None:
    before = run.ledger_tip()
    with pytest.raises(PathRefusedError), run.tool_call("write_file") as call:
        call.write(bad, "nope")
    assert not os.path.exists("/tmp/outside.txt") or bad != "../outside.txt"
    assert run.ledger_tip() != before  # the call is recorded as failed...
    assert run.entries()[-1].status == CallStatus.failed
    assert run.entries()[-1].files == []  # ...with nothing written


def test_symlinked_parent_directory_is_never_written_through(run: Run, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, Path(run.worktree) / "escape")
    with pytest.raises(PathRefusedError), run.tool_call("write_file") as call:
        call.write("escape/pwned.txt", "x")
    assert list(outside.iterdir()) == []


def test_exec_captures_create_modify_delete_rename_chmod(run: Run) -> None:
    script = (
        "echo more >> README.md && rm src/util.py && mv notes.txt docs.txt && chmod +x src/app.py "
        "&& mkdir -p deep/er && echo new > deep/er/file.txt && echo ignored > x.log"
    )
    outcome = execute(run, ["sh", "-c", script])
    assert outcome.returncode == 0
    changed = {f.path: (f.before_hash is None, f.after_hash is None) for f in outcome.entry.files}
    assert set(changed) == {"README.md", "src/util.py", "notes.txt", "docs.txt", "src/app.py", "deep/er/file.txt"}
    assert changed["src/util.py"] == (False, True) and changed["deep/er/file.txt"] == (True, False)
    modes = {f.path: (f.before_mode, f.after_mode) for f in outcome.entry.files}
    assert modes["src/app.py"] == (objects.MODE_FILE, objects.MODE_EXEC)


def test_exec_failure_records_failed_and_passes_exit_code(run: Run) -> None:
    outcome = execute(run, ["sh", "-c", "echo partial > p.txt; exit 7"])
    assert outcome.returncode == 7
    assert outcome.entry.status == CallStatus.failed
    assert [f.path for f in outcome.entry.files] == ["p.txt"]


def test_agent_git_commit_and_reset_in_worktree_still_count(run: Run, repo: Path) -> None:
    before = user_state(repo)
    wt = Path(run.worktree)
    cmd = "echo c > committed.txt && git add -A && git -c user.name=a -c user.email=a@b commit -qm agent"
    execute(run, ["sh", "-c", cmd])
    assert "committed.txt" in run.changed_paths()
    execute(run, ["sh", "-c", "git reset -q --hard HEAD~1"])
    assert not (wt / "committed.txt").exists()
    assert "committed.txt" not in run.changed_paths()
    assert user_state(repo) == before


def test_file_directory_swaps(run: Run) -> None:
    execute(run, ["sh", "-c", "rm -r src && echo now-a-file > src"])
    paths = {f.path: f for f in run.entries()[-1].files}
    assert set(paths) == {"src", "src/app.py", "src/util.py"}
    execute(run, ["sh", "-c", "rm src && mkdir -p src/inner && echo x > src/inner/f"])
    assert {f.path for f in run.entries()[-1].files} == {"src", "src/inner/f"}


def test_finish_is_refused_after_the_run_was_resumed_elsewhere(run: Run) -> None:
    call_id = run.start_call("slow_tool")
    Path(run.worktree, "late.txt").write_text("late\n")
    state = run.state()
    run.record(EventKind.resumed, data={"epoch": state.epoch + 1})
    head = run.head()
    with pytest.raises(StaleWriterError):
        run.finish_call(call_id, "succeeded", paths=["late.txt"])
    assert run.head() == head


def test_small_inputs_and_results_are_inline_large_ones_are_blobs(run: Run) -> None:
    from sandbox.store import objects as objs

    small = {"path": "a.txt"}
    large = {"text": "x" * 10_000}
    with run.tool_call("small", small) as call:
        call.result = {"ok": True}
    entry = run.entry(call.call_id or "")
    assert entry.input == small and entry.input_ref is None and entry.result == {"ok": True}
    with run.tool_call("large", large) as call:
        call.result = large
    entry = run.entry(call.call_id or "")
    assert entry.input is None and entry.input_ref is not None and entry.result is None
    import json as _json

    assert _json.loads(objs.read_blob(run.repo, entry.input_ref)) == large
    assert entry.result_ref is not None and _json.loads(objs.read_blob(run.repo, entry.result_ref)) == large
