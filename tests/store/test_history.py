"""Your committed history as runs see it (:mod:`sandbox.store.history`), kept up without rebuilding it.

A branch moved forward adds one pack to the generation shown; a branch deleted or rewritten whose
commits nothing else reaches makes a new generation, without them; a generation a live process shows is
kept until that process exits (its sandboxes die with it), then removed; a run made before homes (a
linked worktree of yours) is not your history. Real git repositories, real processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import git, make_repo, write

from sandbox.store import history
from tests.agent.test_confine import needs_bwrap


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    common = str(repo / ".git")
    os.makedirs(os.path.join(common, "sandbox", "locks"), exist_ok=True)
    return repo, common


def _commit(repo: Path, name: str, text: str) -> str:
    write(repo, name, text)
    git(repo, "add", name)
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD").strip()


def _listed(objects: str) -> set[str]:
    """Every object of the objects directory ``objects`` (its own packs only)."""
    out = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"],
        env={**os.environ, "GIT_OBJECT_DIRECTORY": objects, "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""},
        cwd=os.path.dirname(objects),
        capture_output=True,
        check=True,
    )
    return set(out.stdout.decode().split())


def _blob(repo: Path, text: str) -> str:
    return (
        subprocess.run(
            ["git", "hash-object", "--stdin"], cwd=repo, input=text.encode(), capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )


def test_a_branch_moved_forward_adds_a_pack_and_a_deleted_one_makes_a_new_generation(tmp_path: Path) -> None:
    repo, common = _repo(tmp_path)
    first = history.shown(common)
    assert _blob(repo, "a\n") in _listed(first)
    _commit(repo, "b.txt", "b\n")
    assert history.shown(common) == first  # forward: the same generation, one more pack
    assert _blob(repo, "b\n") in _listed(first)
    git(repo, "checkout", "-q", "-b", "topic")
    _commit(repo, "c.txt", "thrown away\n")
    assert _blob(repo, "thrown away\n") in _listed(history.shown(common))
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "topic")
    second = history.shown(common)
    assert second != first and _blob(repo, "thrown away\n") not in _listed(second)
    assert _blob(repo, "b\n") in _listed(second)
    # A merged branch deleted changes nothing: what it reached, main reaches.
    git(repo, "branch", "-q", "merged")
    history.shown(common)
    git(repo, "branch", "-q", "-d", "merged")
    assert history.shown(common) == second


HOLD = """
import sys, time
from sandbox.store import history
print(history.shown(sys.argv[1]), flush=True)
time.sleep(60)
"""


def test_a_generation_a_live_process_shows_is_kept_until_it_exits(tmp_path: Path) -> None:
    repo, common = _repo(tmp_path)
    git(repo, "checkout", "-q", "-b", "topic")
    _commit(repo, "c.txt", "c\n")
    git(repo, "checkout", "-q", "main")
    env = {**os.environ, "PYTHONPATH": str(Path(history.__file__).parents[2])}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, common], stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None
        held = holder.stdout.readline().decode().strip()
        git(repo, "branch", "-q", "-D", "topic")
        newer = history.shown(common)
        assert newer != held and os.path.isdir(held)  # rewound: a new one, the held one kept
    finally:
        holder.kill()
        holder.wait()
    git(repo, "branch", "-q", "again")  # any change of tips: the next command looks again
    history.shown(common)
    assert not os.path.exists(held) and os.path.isdir(newer)


def test_a_worktrees_detached_head_is_history_a_run_made_before_homes_is_not(tmp_path: Path) -> None:
    repo, common = _repo(tmp_path)
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    detached = _commit(tmp_path / "linked", "d.txt", "detached\n")
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "legacy"))
    agents = _commit(tmp_path / "legacy", "e.txt", "the agent's\n")
    os.makedirs(os.path.join(common, "sandbox", "runs", "legacy"))  # the admin dir's name is a run's
    found = history.tips(common)
    assert detached in found and agents not in found


def test_commands_starting_together_share_one_build(tmp_path: Path) -> None:
    """Two processes that show the history at once: one builds, the other waits for it; one generation."""
    _repo_path, common = _repo(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(history.__file__).parents[2])}
    show = "import sys; from sandbox.store import history; print(history.shown(sys.argv[1]))"
    procs = [subprocess.Popen([sys.executable, "-c", show, common], stdout=subprocess.PIPE, env=env) for _ in range(3)]
    shown = {p.communicate(timeout=60)[0].decode().strip() for p in procs}
    assert all(p.returncode == 0 for p in procs) and len(shown) == 1, shown
    assert sorted(os.listdir(history.root(common))) == ["current", "g1"]


@needs_bwrap  # the store is built where bubblewrap binds it
def test_gc_with_no_run_left_removes_the_store_and_the_next_run_builds_it_again(tmp_path: Path) -> None:
    """``sandbox gc`` reclaims the disk the store takes once no run is left; a generation a live
    process holds is kept; the next confined command builds it again."""
    import json

    from tests.reliability.helpers import ok

    repo, common = _repo(tmp_path)
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    ok("exec", run_id, "--", "true", cwd=repo)
    assert os.path.isdir(os.path.join(history.root(common), "g1"))
    ok("gc", cwd=repo)  # a live run: kept
    assert os.path.isdir(os.path.join(history.root(common), "g1"))
    ok("drop", run_id, "--force", cwd=repo)
    ok("gc", cwd=repo)
    assert os.listdir(history.root(common)) == []
    held = history.shown(common)  # this process holds it now
    assert history.reclaim(common) == 0 and os.path.isdir(held)
    again = json.loads(ok("start", "--json", cwd=repo))["run"]
    assert "ok" in ok("exec", again, "--", "sh", "-c", "git cat-file -e HEAD^ && echo ok", cwd=repo)


def test_a_deleted_annotated_tag_leaves_the_view_with_its_message(tmp_path: Path) -> None:
    """A tag deleted whose commit stays reachable: the tag object itself (its message) is gone too."""
    repo, common = _repo(tmp_path)
    git(repo, "tag", "-a", "v9", "-m", "a message you take back")
    tag = git(repo, "rev-parse", "v9").strip()
    first = history.shown(common)
    assert tag in _listed(first)
    git(repo, "tag", "-d", "v9")
    assert tag not in _listed(history.shown(common))


def test_gc_keeps_a_store_another_command_is_bringing_up_to_date(tmp_path: Path) -> None:
    """``reclaim`` (``sandbox gc`` with no run left) does not wait on the store's lock, which a first build of a
    large history holds for long: the store is in use, kept, and gc goes on."""
    _repo_path, common = _repo(tmp_path)
    generation = history.shown(common)
    lock = os.path.join(common, "sandbox", "locks", "history.lock")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            lock,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert history.reclaim(common) == 0 and os.path.isdir(generation)
    finally:
        holder.kill()
        holder.wait()


def test_tips_are_read_from_regular_ref_files_only_following_no_link(tmp_path: Path) -> None:
    """A ref that is a link (to a file or a directory outside), a FIFO (never waited on) or not an id
    names no tip; the real branches and tags still do (packed ones included)."""
    repo, common = _repo(tmp_path)
    main = git(repo, "rev-parse", "HEAD").strip()
    outside = tmp_path / "outside"
    outside.mkdir()
    elsewhere = _blob(repo, "not history\n")
    (outside / "ref").write_text(elsewhere + "\n")
    (outside / "nested").mkdir()
    (outside / "nested" / "ref").write_text(elsewhere + "\n")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")
    _commit(repo, "b.txt", "b\n")  # main loose again, v1 packed
    loose = git(repo, "rev-parse", "HEAD").strip()
    heads = Path(common, "refs", "heads")  # made after git's own commands: git would wait on the FIFO
    os.symlink(outside / "ref", heads / "linked-file")
    os.symlink(outside / "nested", heads / "linked-dir")
    os.mkfifo(heads / "fifo")
    (heads / "junk").write_text("not an id\n")
    found = history.tips(common)
    assert loose in found and main in found and elsewhere not in found
