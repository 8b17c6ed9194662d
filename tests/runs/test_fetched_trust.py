"""A run from someone else is data, not instructions (issue 25).

A run travels through a shared remote, and whoever controls the remote writes its record. Here:
every command acts on the repository it runs in (never on a directory the record names); a fetched
ledger is checked against its commits before anything uses it; a plan is checked whole before the
journal, so a malformed one never half-applies; ``approve``/``deny`` are refused inside a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import NoWorkingTreeError, Project
from tests import ledger_forge as forge
from tests.conftest import git, make_repo, sandbox_cmd, tree_digest


def sb(where: Path, *args: str, code: int = 0, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(cli, ["-C", str(where), *args], catch_exceptions=False, env=env)
    assert result.exit_code == code, result.output
    return result.output


def shared(tmp_path: Path, separate: bool = True) -> tuple[Path, Path, Path]:
    """Clone A with a remote, and clone B of it (with its git dir apart from its tree: ``b.git``)."""
    a = make_repo(tmp_path / "a", {"README.md": "hello\n", "Makefile": "all:\n\ttrue\n", "src/app.py": "x = 1\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "-u", "origin", "main")
    b = tmp_path / "b"
    extra = [f"--separate-git-dir={tmp_path / 'b.git'}"] if separate else []
    git(tmp_path, "clone", "-q", *extra, str(bare), str(b))
    return a, b, bare


def made_in_a(a: Path, *commands: str) -> str:
    run_id: str = json.loads(sb(a, "start", "--json"))["run"]
    for command in commands:
        sb(a, "exec", run_id, "--", "sh", "-c", command)
    sb(a, "push", run_id)
    return run_id


# -- 1. every command acts on the repository it runs in ---------------------------------------------


def test_a_run_fetched_into_a_separate_git_dir_clone_is_applied_to_that_clone_only(tmp_path: Path) -> None:
    a, b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    before_a = tree_digest(a)
    sb(b, "fetch", "origin", run_id)
    out = sb(b, "apply", run_id, "--allow-moved-head")
    assert "Applied 1 path" in out
    assert (b / "README.md").read_text() == "hello\nagent\n"
    assert tree_digest(a) == before_a and (a / "README.md").read_text() == "hello\n"


def test_a_forged_record_naming_another_repository_or_the_git_dir_changes_nothing_there(tmp_path: Path) -> None:
    a, b, bare = shared(tmp_path)
    other = make_repo(tmp_path / "other", {"README.md": "hello\n"})
    hook = "mkdir -p hooks && printf '#!/bin/sh\\necho owned\\n' > hooks/post-checkout"
    run_id = made_in_a(a, hook, "echo x >> README.md")
    gitdir = tmp_path / "b.git"
    for target in (other, gitdir, b / ".git", a):

        def point(_i: int, event: dict[str, Any], where: Path = target) -> dict[str, Any]:
            if event["kind"] == "run_started":
                event["run"]["user_workdir"] = str(where)
            return event

        forge.rewrite(bare, run_id, point)
        shutil.rmtree(gitdir / "sandbox", ignore_errors=True)
        for ref in git(b, "for-each-ref", "--format=%(refname)", "refs/sandbox").split():
            git(b, "update-ref", "-d", ref)
        sb(b, "fetch", "origin", run_id)
        state = {p: tree_digest(p) for p in (other, a, b)}
        hooks = sorted(os.listdir(gitdir / "hooks"))
        # Inside the run's worktree (no tree of the user's around) the record is not taken either.
        project = Project(str(gitdir))
        with pytest.raises(NoWorkingTreeError):
            _ = Run.open(project, run_id).user_workdir
        # From B's tree, B's tree is the target whatever the record says.
        sb(b, "apply", run_id, "--allow-moved-head", "--dry-run")
        assert {p: tree_digest(p) for p in (other, a, b)} == state
        assert sorted(os.listdir(gitdir / "hooks")) == hooks and not (gitdir / "hooks" / "post-checkout").exists()


def test_commands_inside_the_runs_worktree_take_the_tree_noted_here_not_the_record(tmp_path: Path) -> None:
    a, b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    sb(b, "fetch", "origin", run_id)
    worktree = Path(sb(b, "path", run_id).strip().splitlines()[-1])
    assert worktree.is_dir()
    proc = sandbox_cmd("apply", "--allow-moved-head", cwd=worktree)
    assert proc.returncode == 0, proc.stderr
    assert (b / "README.md").read_text() == "hello\nagent\n" and (a / "README.md").read_text() == "hello\n"


def test_a_bare_repository_or_a_tree_of_another_repository_is_refused_in_one_line(tmp_path: Path) -> None:
    a, _b, bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> README.md")
    other = make_repo(tmp_path / "other", {"README.md": "hello\n"})
    for env in ({"GIT_DIR": str(bare)}, {"GIT_DIR": str(a / ".git"), "GIT_WORK_TREE": str(other)}):
        proc = sandbox_cmd("apply", run_id, cwd=other, env=env)
        assert proc.returncode != 0
        lines = proc.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr.decode(), proc.stderr
    assert (other / "README.md").read_text() == "hello\n" and (a / "README.md").read_text() == "hello\n"
    # GIT_DIR naming the repository of the tree it runs in is that repository.
    proc = sandbox_cmd("apply", run_id, cwd=a, env={"GIT_DIR": str(a / ".git")})
    assert proc.returncode == 0, proc.stderr
    assert (a / "README.md").read_text() == "hello\nagent\n"


def test_a_linked_worktree_of_the_users_is_the_target_when_the_command_runs_there(tmp_path: Path) -> None:
    a, _b, _bare = shared(tmp_path)
    run_id = made_in_a(a, "echo agent >> src/app.py")
    linked = tmp_path / "linked"
    git(a, "worktree", "add", "-q", str(linked), "-b", "side")
    sb(linked, "apply", run_id)
    assert (linked / "src/app.py").read_text() == "x = 1\nagent\n"
    assert (a / "src/app.py").read_text() == "x = 1\n"


# -- 5. approve and deny are the user's ---------------------------------------------------------------


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("command", ["approve", "deny"])
def test_approve_and_deny_inside_a_sandbox_are_refused_in_one_line(repo: Path, command: str) -> None:
    run_id: str = json.loads(sb(repo, "start", "--json"))["run"]
    sb(repo, "call", "plan", run_id, "--tool", "deploy", "--call-id", "c_plan")
    exe = Path(sys.executable).parent / "sandbox"
    script = f"{exe} {command} {run_id} c_plan 2> err.txt; echo $? > code.txt"
    proc = sandbox_cmd("run", run_id, "--hooks", "none", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    worktree = Path(sb(repo, "path", run_id).strip().splitlines()[-1])
    err = (worktree / "err.txt").read_text()
    assert (worktree / "code.txt").read_text().strip() == "1", err
    assert len(err.strip().splitlines()) == 1 and "refused inside a sandbox" in err, err
    entry = json.loads(sb(repo, "log", run_id, "--json"))
    planned = [e for e in entry if e["call_id"] == "c_plan"][0]
    assert planned["status"] == "planned" and planned["approval"] is None
    # Outside any sandbox the variable alone changes nothing: the user's own shell may answer.
    proc = sandbox_cmd(command, run_id, "c_plan", cwd=repo, env={"SANDBOX_CONFINED": "1"})
    assert proc.returncode == 0, proc.stderr


# -- 2. a fetched ledger is checked against its commits ----------------------------------------------


def _call_event(events: list[tuple[str, dict[str, Any]]]) -> int:
    """Index of the last event that recorded files."""
    return max(i for i, (_oid, e) in enumerate(events) if e["kind"] == "call_succeeded" and e["files"])


def _entry(bare: Path, commit: str, path: str) -> tuple[int, str]:
    import pygit2

    repo = pygit2.Repository(str(bare))
    obj = repo[commit]
    assert isinstance(obj, pygit2.Commit)
    entry = obj.tree[path]
    return int(entry.filemode), str(entry.id)


def _one_line_refusal(out: str) -> str:
    lines = [line for line in out.strip().splitlines() if line.startswith("sandbox:")]
    assert len(lines) == 1 and "Traceback" not in out, out
    return lines[0]


def test_a_forged_call_that_adds_a_path_its_commit_does_not_change_is_refused_at_fetch(tmp_path: Path) -> None:
    a, b, bare = shared(tmp_path, separate=False)
    run_id = made_in_a(a, "echo agent >> README.md")
    evil = forge.blob(bare, b"evil: ; rm -rf /\n")
    found = forge.events(bare, run_id)
    target = _call_event(found)
    base = found[0][1]["run"]["base"]
    make_mode, make_blob = _entry(bare, base, "Makefile")

    def lie(i: int, event: dict[str, Any]) -> dict[str, Any]:
        if i == target:
            extra = dict(event["files"][0], path="Makefile", before_hash=make_blob, after_hash=evil)
            extra.update(before_mode=make_mode, after_mode=make_mode)
            event["files"].append(extra)
        return event

    # The evil blob travels with the ledger (a commit holding it is another parent of the event).
    carrier = forge.commit_with(bare, base, {"carrier": (0o100644, evil)})
    forge.rewrite(bare, run_id, lie, extra_parents=lambda i: [carrier] if i == target else [])
    result = CliRunner().invoke(cli, ["-C", str(b), "fetch", "origin", run_id], catch_exceptions=False)
    assert result.exit_code == 1
    line = _one_line_refusal(result.output)
    assert f"Event {target + 1} of run {run_id}" in line and "change to 'Makefile' that its commit does not" in line
    assert git(b, "for-each-ref", "refs/sandbox") == ""
    # The same ledger taken with plain git: apply checks it before deciding anything.
    git(b, "fetch", "-q", "origin", "+refs/sandbox/*:refs/sandbox/*")
    before = tree_digest(b)
    result = CliRunner().invoke(cli, ["-C", str(b), "apply", run_id], catch_exceptions=False)
    assert result.exit_code == 1 and "'Makefile'" in _one_line_refusal(result.output)
    assert tree_digest(b) == before and (b / "Makefile").read_text() == "all:\n\ttrue\n"


def test_a_forged_blob_id_differing_from_the_commit_is_refused_and_the_previous_state_kept(tmp_path: Path) -> None:
    a, b, bare = shared(tmp_path, separate=False)
    run_id = made_in_a(a, "echo one >> README.md")
    sb(b, "fetch", "origin", run_id)
    tip_before = git(b, "rev-parse", f"refs/sandbox/{run_id}/ledger").strip()
    sb(a, "exec", run_id, "--", "sh", "-c", "echo two >> src/app.py")
    sb(a, "push", run_id)
    other = forge.blob(bare, b"x = 'not what diff shows'\n")
    found = forge.events(bare, run_id)
    target = _call_event(found)

    def lie(i: int, event: dict[str, Any]) -> dict[str, Any]:
        if i == target:
            event["files"][0]["after_hash"] = other
        return event

    forge.rewrite(bare, run_id, lie)
    result = CliRunner().invoke(cli, ["-C", str(b), "fetch", "origin", run_id], catch_exceptions=False)
    assert result.exit_code == 1
    assert "was refused" in _one_line_refusal(result.output) and "kept as it was" in result.output
    assert git(b, "rev-parse", f"refs/sandbox/{run_id}/ledger").strip() == tip_before
    sb(b, "apply", run_id)
    assert (b / "README.md").read_text() == "hello\none\n" and (b / "src/app.py").read_text() == "x = 1\n"


def _forge_call(
    bare: Path, run_id: str, changes: dict[str, tuple[int, str] | None], files: list[dict[str, Any]]
) -> None:
    """Append to the run a call whose commit makes ``changes`` on the head and whose event lists ``files``."""
    found = forge.events(bare, run_id)
    target = _call_event(found)
    head = found[target][1]["commit"]
    commit = forge.commit_with(bare, head, changes) if changes else head
    template = found[target][1]["files"][0]

    def add(i: int, event: dict[str, Any]) -> dict[str, Any]:
        if i == target:
            event["files"] = [dict(template, **f) for f in files]
            event["commit"] = commit
        return event

    forge.rewrite(bare, run_id, add)


MALFORMED = {
    "gitlink": lambda blob, tree, commit: (
        {"sub": (0o160000, commit)},
        [dict(path="sub", after_mode=0o160000, after_hash=commit)],
    ),
    "tree_mode": lambda blob, tree, commit: ({}, [dict(path="dir", after_mode=0o040000, after_hash=tree)]),
    "missing_blob": lambda blob, tree, commit: ({}, [dict(path="new.txt", after_mode=0o100644, after_hash="ab" * 20)]),
    "dotgit_space": lambda blob, tree, commit: (
        {".git /hooks/post-checkout": (0o100755, blob)},
        [dict(path=".git /hooks/post-checkout", after_mode=0o100755, after_hash=blob)],
    ),
    "dotgit_zwnj": lambda blob, tree, commit: (
        {".g\u200cit/hooks/post-checkout": (0o100755, blob)},
        [dict(path=".g\u200cit/hooks/post-checkout", after_mode=0o100755, after_hash=blob)],
    ),
    "dotgit_ntfs_short": lambda blob, tree, commit: (
        {"GIT~1/config": (0o100644, blob)},
        [dict(path="GIT~1/config", after_mode=0o100644, after_hash=blob)],
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_entries_are_refused_in_one_line_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    a, b, bare = shared(tmp_path, separate=False)
    run_id = made_in_a(a, "echo agent >> README.md")
    blob = forge.blob(bare, b"#!/bin/sh\necho owned\n")
    found = forge.events(bare, run_id)
    base = found[0][1]["run"]["base"]
    import pygit2

    tree = str(pygit2.Repository(str(bare))[base].tree_id)  # type: ignore[union-attr]
    changes, files = MALFORMED[case](blob, tree, base)
    for f in files:
        f.setdefault("before_mode", None)
        f.setdefault("before_hash", None)
    _forge_call(bare, run_id, changes, files)
    result = CliRunner().invoke(cli, ["-C", str(b), "fetch", "origin", run_id], catch_exceptions=False)
    assert result.exit_code == 1
    _one_line_refusal(result.output)
    git(b, "fetch", "-q", "origin", "+refs/sandbox/*:refs/sandbox/*")
    before = tree_digest(b)
    hooks = sorted(os.listdir(b / ".git" / "hooks"))
    result = CliRunner().invoke(cli, ["-C", str(b), "apply", run_id], catch_exceptions=False)
    assert result.exit_code == 1
    _one_line_refusal(result.output)
    assert tree_digest(b) == before and sorted(os.listdir(b / ".git" / "hooks")) == hooks
    assert not any(name.startswith((".git ", ".g\u200c", "GIT~1")) for name in os.listdir(b))


# -- 3. plans validated whole before the journal -----------------------------------------------------


def test_a_symlink_and_a_path_below_it_in_one_apply_is_refused_before_anything_is_written(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    run_id: str = json.loads(sb(repo, "start", "--json"))["run"]
    sb(repo, "exec", run_id, "--call-id", "c_link", "--", "ln", "-s", str(outside), "lnk")
    sb(repo, "exec", run_id, "--call-id", "c_rm", "--", "rm", "lnk")
    sb(repo, "exec", run_id, "--call-id", "c_below", "--", "sh", "-c", "mkdir lnk && echo evil > lnk/payload")
    before = tree_digest(repo)
    result = CliRunner().invoke(
        cli, ["-C", str(repo), "apply", run_id, "--call", "c_link", "--call", "c_below"], catch_exceptions=False
    )
    assert result.exit_code == 1, result.output
    assert "lnk" in _one_line_refusal(result.output)
    assert tree_digest(repo) == before and not (repo / "lnk").exists() and list(outside.iterdir()) == []


def _journal_entry(path: str, mode: int | None, oid: str | None) -> Any:
    from sandbox.models import JournalEntry

    return JournalEntry(path=path, before_mode=None, before_oid=None, after_mode=mode, after_oid=oid)


def test_the_plan_check_refuses_each_malformed_entry_naming_it(repo: Path) -> None:
    import pygit2

    from sandbox.merge.validate import PlanRefusedError, check

    r = pygit2.Repository(str(repo))
    blob = str(r.create_blob(b"data\n"))
    tree = str(r.head.peel(pygit2.Commit).tree_id)
    commit = str(r.head.target)
    fine = _journal_entry("fine.txt", 0o100644, blob)
    cases = {
        "gitlink": [_journal_entry("sub", 0o160000, commit)],
        "tree": [_journal_entry("dir", 0o040000, tree)],
        "missing": [_journal_entry("gone.txt", 0o100644, "ab" * 20)],
        "not a blob": [_journal_entry("t.txt", 0o100644, tree)],
        "dotgit space": [_journal_entry(".git /hooks/post-checkout", 0o100755, blob)],
        "dotgit zwnj": [_journal_entry(".g\u200cit/hooks/post-checkout", 0o100755, blob)],
        "dotgit ntfs": [_journal_entry("a/GIT~1/config", 0o100644, blob)],
        "dotgit stream": [_journal_entry(".git::$INDEX_ALLOCATION/config", 0o100644, blob)],
        "climbs": [_journal_entry("a/../../x", 0o100644, blob)],
        "link then below": [_journal_entry("lnk", 0o120000, blob), _journal_entry("lnk/payload", 0o100644, blob)],
        "file then below": [_journal_entry("f", 0o100644, blob), _journal_entry("f/payload", 0o100644, blob)],
        "twice": [_journal_entry("x", 0o100644, blob), _journal_entry("x", 0o100755, blob)],
        "gitmodules link": [_journal_entry(".gitmodules", 0o120000, blob)],
    }
    for name, entries in cases.items():
        with pytest.raises(PlanRefusedError) as info:
            check(r, [fine, *entries])
        assert "nothing was written" in str(info.value) and "\n" not in str(info.value), name
    # What a real tree needs passes: a directory becoming a file (removals run first), a deletion below it.
    check(r, [fine, _journal_entry("d", 0o100644, blob), _journal_entry("d/old", None, None)])


def test_gits_path_rules_with_the_ntfs_and_hfs_foldings() -> None:
    from sandbox.store.gitpath import refusal

    bad = [".git", ".GIT/x", ".git /x", ".git./x", ".git . ./x", "git~1/x", "GIT~1", ".git::$INDEX_ALLOCATION"]
    bad += [".g\u200cit/x", "\ufeff.git", ".gi\u200dt", "a\\.git/x", "../x", "/x", "a//b", "a/./b", "x/", ""]
    for path in bad:
        assert refusal(path) is not None, path
    good = [
        ".gitignore",
        ".github/workflows/ci.yml",
        "git~2",
        ".git-blame-ignore-revs",
        "a/b.git/c",
        "...",
        "g\u200cit",
    ]
    for path in good:
        assert refusal(path) is None, path
    assert refusal(".gitmodules", 0o120000) is not None and refusal(".gitmodules", 0o100644) is None


def test_the_verified_tip_is_kept_and_a_ledger_moved_past_it_is_checked_again(tmp_path: Path) -> None:
    from sandbox.run.verify import CACHE_FILE

    a, b, bare = shared(tmp_path, separate=False)
    run_id = made_in_a(a, "echo one >> README.md")
    sb(b, "fetch", "origin", run_id)
    cache = b / ".git" / "sandbox" / "runs" / run_id / CACHE_FILE
    tip = git(b, "rev-parse", f"refs/sandbox/{run_id}/ledger").strip()
    assert cache.read_text().splitlines()[0] == tip
    # The remote's ledger grows by a forged call; plain git moves the ref here past the checks of fetch.
    sb(a, "exec", run_id, "--", "sh", "-c", "echo two >> src/app.py")
    sb(a, "push", run_id)
    found = forge.events(bare, run_id)
    target = _call_event(found)
    evil = forge.blob(bare, b"evil\n")

    def lie(i: int, event: dict[str, Any]) -> dict[str, Any]:
        if i == target:
            event["files"][0]["after_hash"] = evil
        return event

    forge.rewrite(bare, run_id, lie)
    git(b, "fetch", "-q", "origin", "+refs/sandbox/*:refs/sandbox/*")
    before = tree_digest(b)
    result = CliRunner().invoke(cli, ["-C", str(b), "apply", run_id], catch_exceptions=False)
    assert result.exit_code == 1
    assert "Event" in _one_line_refusal(result.output), result.output
    assert tree_digest(b) == before
    assert cache.read_text().splitlines()[0] == tip  # what was verified stays what it was
