"""Each run's own object store (:mod:`sandbox.store.runstore`), through the real CLI and plain git.

What the host records for a run is in ``.git/sandbox/runs/<run>/objects``, not in your ``objects/``; your
git sees every live run through the hub your alternates name once (``log``, ``fsck``, ``gc``); a run's
git inside its sandbox sees your objects and its own store; ``drop`` moves the objects into yours, so
what outlives the run keeps them; forks and ``start --count`` runs hold what they start from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import git, write

from sandbox.store import layout, packs, runstore
from tests.reliability.helpers import assert_fsck_clean, make_user_repo, ok, sb

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make venv installs it)"
)


def _blob(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _start(repo: Path, *args: str) -> list[str]:
    out = json.loads(ok("start", "--json", *args, cwd=repo))
    return [r["run"] for r in out["runs"]] if "runs" in out else [out["run"]]


def _store(repo: Path, run_id: str) -> Path:
    return repo / ".git" / "sandbox" / "runs" / run_id / "objects"


def _holds(objects_dir: Path, oid: str) -> bool:
    """True when ``objects_dir`` itself (not its alternates) stores ``oid``, loose or packed."""
    if (objects_dir / oid[:2] / oid[2:]).exists():
        return True
    return any(oid in packs.index_ids(str(idx)) for idx in (objects_dir / "pack").glob("*.idx"))


def _quiet_git(repo: Path, *args: str) -> str:
    """A git command of yours that must succeed and say nothing on stderr (no missing alternate)."""
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, check=False)
    assert proc.returncode == 0 and not proc.stderr, (args, proc.returncode, proc.stderr.decode())
    return proc.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path / "repo")


def test_a_runs_objects_are_in_its_store_and_your_git_sees_them(repo: Path) -> None:
    (run,) = _start(repo)
    ok("exec", run, "--", "sh", "-c", "echo only-here > new.txt", cwd=repo)
    blob = _blob("only-here\n")
    store = _store(repo, run)
    assert _holds(store, blob) and not _holds(repo / ".git" / "objects", blob)
    # The snapshot of your untracked file is the run's too, not written into your store.
    assert _holds(store, _blob("untracked notes\n"))
    assert not _holds(repo / ".git" / "objects", _blob("untracked notes\n"))
    # Your git reaches it through one line of your alternates, the hub listing the live stores.
    assert (repo / ".git" / "objects" / "info" / "alternates").read_text() == layout.HUB_LINE + "\n"
    assert runstore.listed(str(repo / ".git")) == {os.path.realpath(store)}
    assert _quiet_git(repo, "cat-file", "-p", blob) == "only-here\n"
    assert _quiet_git(repo, "show", f"refs/sandbox/{run}/head:new.txt") == "only-here\n"
    assert_fsck_clean(repo)
    # Your gc (repack -l) leaves the run's objects in its store, and the run works on.
    git(repo, "gc", "-q", "--prune=now")
    assert _holds(store, blob) and not _holds(repo / ".git" / "objects", blob)
    assert "+only-here" in ok("diff", run, cwd=repo)
    ok("exec", run, "--", "sh", "-c", "echo more >> new.txt", cwd=repo)
    assert_fsck_clean(repo)


def test_two_runs_of_one_dirty_tree_each_hold_their_snapshot(repo: Path) -> None:
    """git writes no object it finds anywhere: the second run's snapshot must not lean on the first's store."""
    first, second = _start(repo), _start(repo)
    notes = _blob("untracked notes\n")
    for (run,) in (first, second):
        assert _holds(_store(repo, run), notes), run
    (many_a, many_b) = _start(repo, "--count", "2")
    for run in (many_a, many_b):
        assert _holds(_store(repo, run), notes), run


@needs_bwrap
def test_inside_a_run_its_git_reads_its_snapshot_and_your_history_and_no_other_run(repo: Path) -> None:
    (a,) = _start(repo)
    (b,) = _start(repo)
    ok("exec", b, "--", "sh", "-c", "echo b-only > b.txt", cwd=repo)
    notes = _blob("untracked notes\n")
    assert ok("exec", a, "--", "git", "cat-file", "-p", notes, cwd=repo) == "untracked notes\n"
    assert "initial" in ok("exec", a, "--", "git", "log", "--format=%s", cwd=repo)
    shown = ok("exec", a, "--", "cat", str(repo / ".git" / "objects" / "info" / "alternates"), cwd=repo)
    assert shown == os.path.realpath(_store(repo, a)) + "\n"  # without the hub: run a's own store only
    proc = sb("exec", a, "--", "git", "cat-file", "-e", _blob("b-only\n"), cwd=repo)
    assert proc.returncode != 0


def test_drop_moves_the_objects_into_yours_and_a_branch_made_from_the_run_keeps_them(repo: Path) -> None:
    (run,) = _start(repo)
    ok("exec", run, "--", "sh", "-c", "echo kept > kept.txt", cwd=repo)
    ok("branch", run, "agent/work", cwd=repo)
    ok("drop", run, "--force", cwd=repo)
    assert not _store(repo, run).exists()
    assert runstore.listed(str(repo / ".git")) == set()
    assert _holds(repo / ".git" / "objects", _blob("kept\n"))
    assert _quiet_git(repo, "show", "agent/work:kept.txt") == "kept\n"
    _quiet_git(repo, "status", "--porcelain")
    assert_fsck_clean(repo)
    ok("gc", cwd=repo)
    assert_fsck_clean(repo)


def test_a_fork_holds_its_sources_objects(repo: Path) -> None:
    (source,) = _start(repo)
    ok("exec", source, "--", "sh", "-c", "echo from-source > s.txt", cwd=repo)
    fork = json.loads(ok("--json", "fork", source, cwd=repo))["run"]
    assert _holds(_store(repo, fork), _blob("from-source\n"))
    ok("drop", source, "--force", cwd=repo)
    assert "+from-source" in ok("diff", fork, cwd=repo)
    if shutil.which("bwrap") is not None:
        assert ok("exec", fork, "--", "git", "show", "HEAD:s.txt", cwd=repo) == "from-source\n"
    assert_fsck_clean(repo)


@needs_bwrap
def test_your_own_alternates_are_kept_and_shown_inside(tmp_path: Path) -> None:
    """A clone that borrows another repository's objects (``clone --shared``) keeps its line; inside a run
    its git reads that history from the history store (packed from your tips, borrowed objects included),
    and the borrowed store is not listed there (tests/reliability/test_private_runs.py)."""
    source = make_user_repo(tmp_path / "source")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--shared", str(source), str(clone))
    mine = (clone / ".git" / "objects" / "info" / "alternates").read_text()
    (run,) = _start(clone)
    lines = (clone / ".git" / "objects" / "info" / "alternates").read_text().splitlines()
    assert lines == [*mine.splitlines(), layout.HUB_LINE]
    shown = ok("exec", run, "--", "cat", str(clone / ".git" / "objects" / "info" / "alternates"), cwd=clone)
    assert shown.splitlines() == [os.path.realpath(_store(clone, run))]
    assert "initial" in ok("exec", run, "--", "git", "log", "--format=%s", cwd=clone)
    write(clone, "x.txt", "x\n")
    _quiet_git(clone, "status", "--porcelain")


@needs_bwrap
def test_what_you_take_from_a_run_is_in_your_store_for_every_later_run(repo: Path) -> None:
    """Applied files and an exported branch: their objects are yours (git would not write them again, as
    it finds them in the run's store), so a later run's git reads your commit of them."""
    (b,) = _start(repo)
    ok("exec", b, "--", "sh", "-c", "echo applied > taken.txt && echo branched > branch.txt", cwd=repo)
    ok("apply", b, "--", "taken.txt", cwd=repo)
    assert _holds(repo / ".git" / "objects", _blob("applied\n"))
    git(repo, "add", "taken.txt")
    git(repo, "commit", "-q", "-m", "take it")
    made = json.loads(ok("--json", "branch", b, "agent/work", cwd=repo))
    assert all(_holds(repo / ".git" / "objects", c) for c in made["commits"])
    assert _holds(repo / ".git" / "objects", _blob("branched\n"))
    (c,) = _start(repo)
    assert ok("exec", c, "--", "git", "show", "HEAD:taken.txt", cwd=repo) == "applied\n"
    assert ok("exec", c, "--", "git", "cat-file", "-p", f"{made['commits'][-1]}:branch.txt", cwd=repo) == "branched\n"


def test_a_moved_repository_keeps_seeing_its_runs(repo: Path, tmp_path: Path) -> None:
    """The hub's lines are relative to it: your git, moved with the repository, finds every live run's
    objects and warns of nothing."""
    (run,) = _start(repo)
    ok("exec", run, "--", "sh", "-c", "echo travels > t.txt", cwd=repo)
    moved = tmp_path / "elsewhere"
    repo.rename(moved)
    assert _quiet_git(moved, "show", f"refs/sandbox/{run}/head:t.txt") == "travels\n"
    assert_fsck_clean(moved)
    git(moved, "gc", "-q")
    assert _holds(_store(moved, run), _blob("travels\n"))
