"""Runs that travel: a run made in clone A, moved to clone B through a bare remote (``sandbox push`` /
``sandbox fetch``, or plain git), acts on B only; A is never touched. Two machines writing the same
run are refused, never merged; a resume on B fences writers on A once their refs meet."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli, outputs
from sandbox.store import layout
from tests.conftest import git, sandbox_cmd, tree_digest, two_clones, user_state


def sb(runner: CliRunner, where: Path, *args: str, code: int = 0) -> str:
    result = runner.invoke(cli, ["-C", str(where), *args], catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def homes_of(repo: Path) -> Path:
    """Where the CLI puts the homes of ``repo``'s runs (the tests' HOME is a temporary directory)."""
    root = layout.user_data_root(os.environ, os.path.expanduser("~"))
    return Path(layout.homes_dir(root, str((repo / ".git").resolve())))


def digest_dir(root: Path) -> str:
    """A hash of everything below ``root`` (names, modes, bytes, link targets), .git included.

    A run's ``rules`` directory is left out: each process that records makes its mirror of the run's
    rule files there and removes it when done (sandbox.store.rulemirror); the commands here run in this
    test's process, whose earlier run objects are collected at any time."""
    h = hashlib.sha256()
    if not root.exists():
        return "absent"
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        parts = Path(dirpath).relative_to(root).parts
        if any(parts[i] == "runs" and parts[i + 2] == "rules" for i in range(len(parts) - 2)):
            continue
        dirnames.sort()
        if Path(dirpath).parent.name == "runs":
            dirnames[:] = [d for d in dirnames if d != "rules"]
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            h.update(f"{os.path.relpath(full, root)}\0{st.st_mode}\0".encode())
            if os.path.islink(full):
                h.update(os.readlink(full).encode())
            elif os.path.isfile(full):
                with open(full, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def everything_of(repo: Path) -> dict[str, object]:
    """A's whole footprint: working tree, every ref (sandbox refs too), config, the sandbox's
    files in .git, the runs' homes (worktrees and own git dirs)."""
    return {
        "tree": tree_digest(repo),
        "user": user_state(repo),
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "config": (repo / ".git" / "config").read_bytes(),
        "sandbox_state": digest_dir(repo / ".git" / "sandbox"),
        "homes": digest_dir(homes_of(repo)),
    }


def test_a_run_pushed_from_a_and_fetched_into_b_acts_on_b_only(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--label", "travel", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo from-the-agent > made.txt")
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo changed >> src/app.py")
    sb(runner, a, "checkpoint", run_id, "--label", "after two calls")
    pushed = json.loads(sb(runner, a, "push", run_id, "--json"))
    assert pushed["remote"] == "origin" and pushed["runs"][0]["outcome"] == "pushed"
    assert "up to date" in sb(runner, a, "push", run_id)
    remote_refs = git(bare, "for-each-ref", "--format=%(refname)", f"refs/sandbox/{run_id}/")
    names = ("base", "checkpoints", "git/HEAD", f"git/refs/heads/sandbox/{run_id}", "head", "ledger")
    assert sorted(remote_refs.split()) == [f"refs/sandbox/{run_id}/{n}" for n in names]
    before = everything_of(a)

    # B: fetch lists what arrived; list shows where it came from.
    fetched = sb(runner, b, "fetch")
    assert f"New run {run_id} (travel)" in fetched
    assert "up to date" in sb(runner, b, "fetch", "origin", run_id[:4])
    listing = json.loads(sb(runner, b, "list", "--json"))
    assert listing[0]["run"] == run_id and listing[0]["fetched_from"]["remote"] == "origin"
    outputs.check("list", listing)  # where it came from, as the typed schema says
    # Commands that need no worktree work without one, and make none.
    status = json.loads(sb(runner, b, "status", run_id, "--json"))
    assert status["worktree"] is None and not status["worktree_exists"]
    assert len(json.loads(sb(runner, b, "log", run_id, "--json"))) == 2
    assert "from-the-agent" in sb(runner, b, "diff", run_id)
    assert not homes_of(b).exists()
    sb(runner, b, "apply", run_id)
    assert (b / "made.txt").read_text() == "from-the-agent\n"
    assert (b / "src" / "app.py").read_text() == "print('app')\nchanged\n"
    sb(runner, b, "undo", run_id, "--call", "2")  # the last change: src/app.py
    assert (b / "src" / "app.py").read_text() == "print('app')\n" and (b / "made.txt").exists()
    assert not homes_of(b).exists()
    # exec needs a worktree: made from the run's head, in B's homes, one line saying so.
    result = runner.invoke(cli, ["-C", str(b), "exec", run_id, "--", "sh", "-c", "echo b > b.txt"])
    assert result.exit_code == 0, result.output
    assert "had no worktree in this repository; made one at its head" in result.output
    wt = Path(sb(runner, b, "path", run_id).strip())
    assert wt.is_relative_to(homes_of(b)) and (wt / "made.txt").read_text() == "from-the-agent\n"
    assert (wt / "b.txt").exists()
    report = json.loads(sb(runner, b, "resume", run_id, "--json"))
    assert report["checkpoint"]["label"] == "after two calls" and report["note"]
    assert len(json.loads(sb(runner, b, "log", run_id, "--json"))) == 3
    # From a subdirectory of B's tree, exec runs in the same subdirectory of the worktree (B's tree
    # is the run's user tree here, not the A path its record names).
    sb(runner, b / "src", "exec", run_id, "--", "sh", "-c", "pwd > where.txt")
    assert (wt / "src" / "where.txt").read_text().strip() == str(wt / "src")
    # Every other command in B: still nothing of A's.
    proc = sandbox_cmd("run", run_id, "--", "sh", "-c", "echo ran > ran.txt", cwd=b)
    assert proc.returncode == 0, proc.stderr
    assert (wt / "ran.txt").exists() and not (a / "ran.txt").exists()
    sb(runner, b, "hooks", "install", "claude-code", run_id)
    sb(runner, b, "checkpoint", run_id, "--label", "in b")
    sb(runner, b, "checkpoints", run_id)
    sb(runner, b, "list")
    sb(runner, b, "status", run_id)
    fork = json.loads(sb(runner, b, "fork", run_id, "--json"))
    assert Path(fork["worktree"]).is_relative_to(homes_of(b))
    compared = json.loads(sb(runner, b, "compare", run_id, fork["run"], "--check", "test -f b.txt", "--json"))
    assert [r["check"]["exit_code"] for r in compared["runs"]] == [0, 0]
    sb(runner, b, "drop", "--all-but", run_id, "--force")
    sb(runner, b, "gc")
    assert everything_of(a) == before

    # Back to A: B's call arrives, A's ledger moves forward; A's worktree is A's own.
    assert "Pushed run" in sb(runner, b, "push", run_id)
    assert f"Run {run_id} (travel): " in sb(runner, a, "fetch")
    b_calls = [c["call_id"] for c in json.loads(sb(runner, b, "log", run_id, "--json"))]
    assert [c["call_id"] for c in json.loads(sb(runner, a, "log", run_id, "--json"))] == b_calls


def test_plain_git_moves_a_run_too(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo x > x.txt")
    git(a, "push", "-q", "origin", "refs/sandbox/*:refs/sandbox/*")
    git(b, "fetch", "-q", "origin", "refs/sandbox/*:refs/sandbox/*")
    before = everything_of(a)
    sb(runner, b, "apply", run_id)
    assert (b / "x.txt").exists() and everything_of(a) == before
    sb(runner, b, "resume", run_id)
    wt = Path(sb(runner, b, "path", run_id).strip())
    assert (wt / "x.txt").read_text() == "x\n" and not wt.is_relative_to(a)
    assert everything_of(a) == before


def test_two_machines_recording_into_one_run_are_refused_never_merged(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    sb(runner, b, "exec", run_id, "--", "sh", "-c", "echo b > b.txt")
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo a > a.txt")
    sb(runner, b, "push", run_id)
    a_ledger = git(a, "rev-parse", f"refs/sandbox/{run_id}/ledger")
    remote_ledger = git(bare, "rev-parse", f"refs/sandbox/{run_id}/ledger")
    # A's push would lose B's event: refused, with what to do.
    result = runner.invoke(cli, ["-C", str(a), "push", run_id])
    assert result.exit_code == 1
    assert "has events of run" in result.output and "sandbox fetch origin" in result.output
    # A's fetch would lose A's event: refused, nothing merged; both ledgers unchanged.
    result = runner.invoke(cli, ["-C", str(a), "fetch", "--json"])
    assert result.exit_code == 1
    assert "has diverged" in result.output and "nothing was merged" in result.output
    assert git(a, "rev-parse", f"refs/sandbox/{run_id}/ledger") == a_ledger
    assert git(bare, "rev-parse", f"refs/sandbox/{run_id}/ledger") == remote_ledger
    # Even plain git without '+' refuses the ledger (the documented refspec).
    proc = subprocess.run(
        ["git", "push", "origin", f"refs/sandbox/{run_id}/ledger:refs/sandbox/{run_id}/ledger"],
        cwd=a,
        capture_output=True,
        check=False,
    )
    assert proc.returncode != 0 and b"non-fast-forward" in proc.stderr + proc.stdout


def test_a_resume_on_b_fences_a_writer_on_a_once_their_refs_meet(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    call_id = sb(runner, a, "call", "start", run_id, "--tool", "write_file").strip()
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    sb(runner, b, "resume", run_id)  # B takes the run over: the epoch moves, the call is uncertain
    sb(runner, b, "push", run_id)
    sb(runner, a, "fetch")  # A had recorded nothing since: its ledger moves forward to B's
    result = runner.invoke(cli, ["-C", str(a), "call", "finish", run_id, call_id, "--status", "succeeded"])
    assert result.exit_code != 0 and "was resumed after call" in result.output
    entry = json.loads(sb(runner, a, "log", run_id, "--call", call_id, "--json"))
    assert entry["status"] == "uncertain"


def test_a_command_killed_while_making_the_worktree_is_completed_by_the_next(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo x > x.txt")
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    for point in ("materialize.after_marker", "worktree.create.after_init", "materialize.after_place"):
        proc = sandbox_cmd("path", run_id, cwd=b, env={"SANDBOX_FAULT": point})
        assert proc.returncode == -9, (point, proc.stderr)
        if point == "materialize.after_place":
            gc = json.loads(sb(runner, b, "gc", "--json"))
            assert gc["worktrees"], gc
    proc = sandbox_cmd("path", run_id, cwd=b)
    assert proc.returncode == 0, proc.stderr
    wt = Path(proc.stdout.decode().strip())
    assert (wt / "x.txt").read_text() == "x\n"
    assert sorted(p.name for p in homes_of(b).iterdir()) == [run_id]
    sb(runner, b, "exec", run_id, "--", "true")


def test_an_apply_in_one_clone_is_not_taken_for_an_apply_in_another(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo agent > agent.txt")
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    sb(runner, b, "apply", run_id)
    assert json.loads(sb(runner, b, "log", run_id, "--json"))[0]["applied"]
    sb(runner, b, "push", run_id)
    sb(runner, a, "fetch")
    # A's tree never got the change: A's ledger fold says so, and A's apply writes it into A.
    assert not json.loads(sb(runner, a, "log", run_id, "--json"))[0]["applied"]
    result = runner.invoke(cli, ["-C", str(a), "drop", run_id])
    assert result.exit_code == 1 and "not applied to your tree" in result.output
    sb(runner, a, "apply", run_id)
    assert (a / "agent.txt").read_text() == "agent\n"
    assert json.loads(sb(runner, a, "log", run_id, "--json"))[0]["applied"]
    sb(runner, a, "undo", run_id)  # in A's tree, from A's own record
    assert not (a / "agent.txt").exists() and (b / "agent.txt").exists()


def test_the_agents_own_git_travels_with_the_run(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    script = (
        "echo one > one.txt && git add one.txt && git commit -q -m 'agent: one' && git tag v1 && "
        "git branch feature && echo wip > wip.txt"
    )
    sb(runner, a, "exec", run_id, "--", "sh", "-c", script)
    a_wt = Path(sb(runner, a, "path", run_id).strip())
    agent_head = git(a_wt, "rev-parse", "HEAD").strip()
    sb(runner, a, "push", run_id, "--with-agent-refs")
    names = git(bare, "for-each-ref", "--format=%(refname)", f"refs/sandbox/{run_id}/git/").split()
    prefix = f"refs/sandbox/{run_id}/git/"
    assert {n[len(prefix) :] for n in names} == {
        "HEAD",
        f"refs/heads/sandbox/{run_id}",
        "refs/heads/feature",
        "refs/tags/v1",
    }
    sb(runner, b, "fetch")
    wt = Path(sb(runner, b, "path", run_id).strip().splitlines()[-1])
    assert git(wt, "rev-parse", "HEAD").strip() == agent_head
    assert git(wt, "log", "-1", "--format=%s").strip() == "agent: one"
    assert git(wt, "rev-parse", "feature").strip() == agent_head and git(wt, "rev-parse", "v1").strip()
    assert git(wt, "status", "--porcelain").strip() == "?? wip.txt"  # as the agent left it in A
    status = json.loads(sb(runner, b, "status", run_id, "--json"))
    assert status["agent_git"]["commit_count"] == 1
    # The agent deletes its branch in B; the next push removes it from the remote too.
    sb(runner, b, "exec", run_id, "--", "git", "branch", "-D", "feature")
    sb(runner, b, "push", run_id, "--with-agent-refs")
    assert f"{prefix}refs/heads/feature" not in git(bare, "for-each-ref", "--format=%(refname)")
    # Plain gc in the user's repository keeps the agent's commit the run's refs name (git fsck clean).
    git(b, "gc", "-q", "--prune=now")
    git(b, "fsck", "--strict", "--no-dangling")
    assert git(wt, "cat-file", "-t", agent_head).strip() == "commit"


def test_what_the_agent_made_in_its_own_git_stays_unless_asked(tmp_path: Path) -> None:
    """A secret the agent committed on a tag (then removed from the files: 'diff' shows nothing) does not
    leave with a plain push; the refs left out are named, and --with-agent-refs sends them."""
    runner = CliRunner()
    a, _b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    script = "echo s3cr3t > key.txt && git add key.txt && git commit -q -m k && git tag leak && git rm -q key.txt"
    sb(runner, a, "exec", run_id, "--", "sh", "-c", script)
    assert "s3cr3t" not in sb(runner, a, "diff", run_id)
    out = sb(runner, a, "push", run_id)
    assert f"Left out what the agent made in its own git (HEAD, heads/sandbox/{run_id}, tags/leak)" in out, out
    prefix = f"refs/sandbox/{run_id}/git/"
    names = git(bare, "for-each-ref", "--format=%(refname)", prefix).split()
    assert names == [], names  # the run's branch and HEAD moved with the agent's commit: both are its
    secret = git(Path(sb(runner, a, "path", run_id).strip()), "rev-parse", "leak").strip()
    listed = subprocess.run(["git", "cat-file", "-e", secret], cwd=bare, capture_output=True, check=False)
    assert listed.returncode != 0  # the commit holding the secret is not on the remote
    pushed = json.loads(sb(runner, a, "push", run_id, "--json"))["runs"][0]
    assert pushed["outcome"] == "up_to_date" and "git/refs/tags/leak" in pushed["left_out"]
    sb(runner, a, "push", run_id, "--with-agent-refs")
    assert f"{prefix}refs/tags/leak" in git(bare, "for-each-ref", "--format=%(refname)", prefix).split()


def test_an_untouched_agent_git_travels_whole_without_a_word(tmp_path: Path) -> None:
    runner = CliRunner()
    a, _b, bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo x > x.txt")
    out = sb(runner, a, "push", run_id)
    assert "Left out" not in out, out
    prefix = f"refs/sandbox/{run_id}/git/"
    names = {n[len(prefix) :] for n in git(bare, "for-each-ref", "--format=%(refname)", prefix).split()}
    assert names == {"HEAD", f"refs/heads/sandbox/{run_id}"}


def test_a_fetch_does_not_paper_over_a_damaged_ledger(tmp_path: Path) -> None:
    runner = CliRunner()
    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo x > x.txt")
    sb(runner, a, "push", run_id)
    sb(runner, b, "fetch")
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo y > y.txt")
    sb(runner, a, "push", run_id)
    ref = f"refs/sandbox/{run_id}/ledger"
    git(b, "update-ref", ref, git(b, "rev-parse", f"{ref}~1").strip())  # rewound behind the sandbox's back
    result = runner.invoke(cli, ["-C", str(b), "fetch"])
    assert result.exit_code == 1 and f"sandbox repair {run_id}" in result.output
    sb(runner, b, "repair", run_id)
    assert "2 new event(s)" in sb(runner, b, "fetch")


def test_bad_remotes_are_one_line_and_change_nothing(tmp_path: Path) -> None:
    a, _b, _bare = two_clones(tmp_path)
    runner = CliRunner()
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    git(a, "remote", "add", "relative", "../remote.git")  # resolved from the repository, as git does
    assert "Pushed run" in sandbox_cmd("push", run_id, "relative", cwd=a).stdout.decode()
    before = everything_of(a)
    for args, code, words in (
        (["push", run_id, "nowhere"], 2, "No remote named 'nowhere'"),
        (["push", run_id, str(tmp_path / "missing.git")], 1, "git ls-remote failed"),
        (["fetch", str(tmp_path / "missing.git")], 1, "git ls-remote failed"),
        (["fetch", "origin", "feedface"], 2, "origin has no run 'feedface'"),
    ):
        proc = sandbox_cmd(*args, cwd=a)
        err = proc.stderr.decode()
        assert proc.returncode == code, (args, err)
        assert words in err and len(err.strip().splitlines()) == 1, err
    assert everything_of(a) == before


def test_a_fetched_runs_record_is_readable_inside_it_and_your_stash_is_not(tmp_path: Path) -> None:
    """Inside a run your objects are your committed history (sandbox.store.history); a fetched run's
    record came into your objects by git: it is copied into the run's store, so its ledger, calls and
    snapshot are readable inside, and B's stash still is not."""
    runner = CliRunner()
    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sb(runner, a, "start", "--json"))["run"]
    sb(runner, a, "exec", run_id, "--", "sh", "-c", "echo from-the-agent > made.txt")
    sb(runner, a, "push", run_id)
    (b / "stashed.txt").write_text("b's stash\n")
    git(b, "add", "stashed.txt")
    git(b, "stash", "push", "-q")
    stashed = git(b, "rev-parse", "stash@{0}:stashed.txt").strip()
    sb(runner, b, "fetch")
    ours = [git(b, "rev-parse", f"refs/sandbox/{run_id}/{name}").strip() for name in ("ledger", "head", "base")]
    check = " && ".join(f"git cat-file -e {oid}" for oid in ours)
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", f"{check} && echo readable", cwd=b)
    assert proc.returncode == 0 and b"readable" in proc.stdout, proc.stderr
    proc = sandbox_cmd("exec", run_id, "--", "git", "cat-file", "-e", stashed, cwd=b)
    assert proc.returncode != 0, proc.stdout
    again = sandbox_cmd("exec", run_id, "--", "sh", "-c", f"{check} && echo readable", cwd=b)
    assert again.returncode == 0 and b"readable" in again.stdout, again.stderr  # its new calls too
