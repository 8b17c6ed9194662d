"""``sandbox branch RUN NAME``: the run as a branch of per-call commits on your HEAD at start,
without touching HEAD, the index, the working tree or any other ref."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox.merge import mergeback
from sandbox.merge.undo import undo
from sandbox.run.run import Run
from tests.conftest import commit_all, git, sandbox_cmd, tree_digest, user_state, write
from tests.merge.test_apply import invoke, start


def other_refs(repo: Path, but: str) -> str:
    listing = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return "\n".join(line for line in listing.splitlines() if not line.startswith(but + " "))


def three_calls(run: Run) -> list[str]:
    with run.tool_call("run_command", {"argv": ["sed", "-i", "s/app/APP/", "src/app.py"]}) as call:
        call.write("src/app.py", "print('APP')\n")
    with run.tool_call("write_file", {"path": "src/new.py"}) as call:
        call.write("src/new.py", "NEW = 1\n")
    with run.tool_call("Bash", {"command": "rm src/util.py\necho done"}) as call:
        call.delete("src/util.py")
    with run.tool_call("read_file", {"path": "README.md"}):
        pass  # changes nothing: no commit
    return [e.call_id for e in run.entries()]


def test_branch_has_one_commit_per_changing_call_and_touches_nothing_else(repo: Path, runner: CliRunner) -> None:
    head = git(repo, "rev-parse", "HEAD").strip()
    run = start(repo)
    ids = three_calls(run)
    digest, state = tree_digest(repo), user_state(repo)
    refs = other_refs(repo, "refs/heads/agent/work")
    head_file, index = (repo / ".git/HEAD").read_bytes(), (repo / ".git/index").read_bytes()
    code, out, err = invoke(runner, repo, "branch", run.run_id, "agent/work", "--json")
    assert code == 0, err
    made = json.loads(out)
    assert made["calls"] == ids[:3] and len(made["commits"]) == 3 and made["base"] == head
    assert made["snapshot_differs"] is True  # the user's uncommitted README edit is not on it
    # Nothing of the user's moved: HEAD, index, files, every other ref.
    after = user_state(repo)
    assert tree_digest(repo) == digest
    assert {k: after[k] for k in ("index", "HEAD", "stash")} == {k: state[k] for k in ("index", "HEAD", "stash")}
    assert (repo / ".git/HEAD").read_bytes() == head_file and (repo / ".git/index").read_bytes() == index
    assert other_refs(repo, "refs/heads/agent/work") == refs
    # An ordinary branch: parents chain back to HEAD at start, authored by the agent, with trailers.
    assert git(repo, "rev-list", "--reverse", f"{head}..agent/work").split() == made["commits"]
    assert git(repo, "log", "-1", "--format=%an <%ae>", "agent/work").strip() == "sandbox agent <sandbox@localhost>"
    subjects = git(repo, "log", "--format=%s", f"{head}..agent/work").splitlines()
    assert subjects == ["Bash: rm src/util.py …", "write_file: src/new.py", "run_command: sed -i s/app/APP/ src/app.py"]
    body = git(repo, "log", "-1", "--format=%B", "agent/work")
    assert f"Sandbox-Call: {ids[2]}" in body and f"Sandbox-Run: {run.run_id}" in body and "echo done" in body
    assert git(repo, "show", "agent/work:src/app.py") == "print('APP')\n"
    assert git(repo, "show", "agent/work:README.md") == "hello\n"  # HEAD's, not the uncommitted edit
    assert "src/util.py" not in git(repo, "ls-tree", "-r", "--name-only", "agent/work")
    assert git(repo, "fsck", "--connectivity-only", "--no-dangling").strip() == ""


def test_branch_refuses_to_overwrite_without_force_and_never_a_checked_out_one(repo: Path, runner: CliRunner) -> None:
    run = start(repo)
    three_calls(run)
    git(repo, "branch", "taken")
    taken = git(repo, "rev-parse", "taken").strip()
    code, _, err = invoke(runner, repo, "branch", run.run_id, "taken")
    assert code == 1 and "already exists" in err and "--force" in err
    assert git(repo, "rev-parse", "taken").strip() == taken
    code, out, err = invoke(runner, repo, "branch", run.run_id, "taken", "--force")
    assert code == 0 and "Replaced branch taken" in out
    assert git(repo, "rev-parse", "taken").strip() != taken
    state = user_state(repo)
    code, _, err = invoke(runner, repo, "branch", run.run_id, "main", "--force")
    assert code == 1 and "checked out" in err and user_state(repo) == state
    code, _, err = invoke(runner, repo, "branch", run.run_id, "bad..name")
    assert code == 2 and "not a valid branch name" in err
    code, out, err = invoke(runner, Path(run.worktree), "branch", "from-inside")  # RUN: the worktree's
    assert code == 0 and "Created branch from-inside" in out, err
    assert git(repo, "rev-parse", "from-inside") == git(repo, "rev-parse", "taken")


def test_branch_skips_undone_calls_and_outlives_drop_and_gc(repo: Path) -> None:
    write(repo, "README.md", "hello\n")
    commit_all(repo, "clean")
    run = start(repo)
    three_calls(run)
    undo(run, in_run=True, force=True)  # the newest change (the delete) taken back out in the run
    proc = sandbox_cmd("branch", run.run_id, "kept", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert b"2 commit(s)" in proc.stdout and b"note:" not in proc.stdout  # nothing uncommitted at start
    mergeback.apply(run)
    undo(run)  # now in your tree: the run keeps the change, and so does the branch (as diff does)
    proc = sandbox_cmd("branch", run.run_id, "kept", "--force", cwd=repo)
    assert proc.returncode == 0 and b"2 commit(s)" in proc.stdout, proc.stdout
    tip = git(repo, "rev-parse", "kept").strip()
    assert sandbox_cmd("drop", run.run_id, "--force", cwd=repo).returncode == 0
    assert sandbox_cmd("gc", cwd=repo).returncode == 0
    git(repo, "gc", "-q", "--prune=now")
    assert git(repo, "rev-parse", "kept").strip() == tip
    assert git(repo, "show", "kept:src/new.py") == "NEW = 1\n"
    assert git(repo, "fsck", "--connectivity-only", "--no-dangling").strip() == ""


def test_your_uncommitted_edit_in_a_file_the_agent_changed_is_your_commit_not_the_agents(repo: Path) -> None:
    """The agent's version of a file was made from yours: your part comes first, authored by you."""
    git(repo, "config", "user.name", "Ada User")
    git(repo, "config", "user.email", "ada@example.com")
    head = git(repo, "rev-parse", "HEAD").strip()
    write(repo, "src/app.py", "print('app')\n# my uncommitted line\n")
    run = start(repo)
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('app')\n# my uncommitted line\n# agent line\n")
    proc = sandbox_cmd("branch", run.run_id, "agent/mine", cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    commits = git(repo, "rev-list", "--reverse", f"{head}..agent/mine").split()
    assert len(commits) == 2
    first = git(repo, "show", "-s", "--format=%an <%ae>|%s", commits[0]).strip()
    assert first.startswith("Ada User <ada@example.com>|Your uncommitted changes to 1 file(s)")
    assert "# my uncommitted line" in git(repo, "show", commits[0], "--", "src/app.py")
    agent = git(repo, "show", "--format=%an|%s", commits[1], "--", "src/app.py")
    assert agent.startswith("sandbox agent|edit_file: src/app.py")
    # The agent's commit adds only the agent's line.
    added = [line for line in agent.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+# agent line"]


def test_a_multi_line_command_is_named_by_its_first_line_in_the_subject(repo: Path) -> None:
    run = start(repo)
    script = "import pathlib\npathlib.Path('src/app.py').write_text('x')\n"
    with run.tool_call("run_command", {"argv": ["python3", "-c", script]}) as call:
        call.write("src/app.py", "x")
    assert sandbox_cmd("branch", run.run_id, "agent/multi", cwd=repo).returncode == 0
    subject = git(repo, "log", "-1", "--format=%s", "agent/multi").strip()
    assert subject == "run_command: python3 -c 'import pathlib …'"
