"""Runs are private to each other and to your ``.git`` (issue 31, item 6; :mod:`sandbox.confine.gitview`).

From inside run a (real bubblewrap, through ``sandbox exec`` and ``sandbox run``), an agent looks for
what your common git directory holds: your stash (its ref, its reflog, ``git log refs/stash``), your
reflogs, ``packed-refs`` and every ref (your branches and tags, every run's ``refs/sandbox/<run>``),
the admin directories of your linked worktree and of a run made before homes (``.git/worktrees``),
your hooks, and run b's own git directory. Nothing of it is there (but ``HEAD`` and run a's own refs,
which the sandbox's tools inside read); the agent's own git still works
(status, diff, log through your history, commit, its own stash, branches and tags, ``cat-file`` of
your committed objects, fsck). Once with ``.git`` in your working tree, once with a git directory
elsewhere (``git init --separate-git-dir``), which no hidden working tree covers; as root and as an
ordinary user.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, write

from .helpers import make_legacy, make_user_repo, ok, open_run, sb, sb_as_user

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make venv installs it)"
)

#: What the agent of run a tries to read; each value is what it found (None: nothing there).
PROBE = r"""
import json, os, subprocess, sys
T = json.loads(sys.argv[1])
c = T["common"]

def read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return None

def listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None

def git(*args):
    proc = subprocess.run(["git", *args], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None

out = {
    "refs/stash": read(c + "/refs/stash"),
    "logs/refs/stash": read(c + "/logs/refs/stash"),
    "logs/HEAD": read(c + "/logs/HEAD"),
    "packed-refs": read(c + "/packed-refs"),
    "refs/": listdir(c + "/refs"),
    "HEAD": read(c + "/HEAD"),
    "ORIG_HEAD": read(c + "/ORIG_HEAD"),
    "hooks/pre-commit": read(c + "/hooks/pre-commit"),
    "info/": listdir(c + "/info"),
    "linked worktree admin": listdir(c + "/worktrees/linked"),
    "legacy run admin": listdir(c + "/worktrees/" + T["legacy"]),
    "legacy run admin HEAD": read(c + "/worktrees/" + T["legacy"] + "/HEAD"),
    "run b's git": listdir(T["b_git"]),
    "git log refs/stash": git("log", "--format=%H", "refs/stash"),
    "git reflog stash": git("reflog", "show", "stash"),
    "git rev-parse user branch": git("rev-parse", "--verify", "-q", "refs/heads/main"),
    "git rev-parse run b head": git("rev-parse", "--verify", "-q", "refs/sandbox/" + T["b"] + "/head"),
}
out["common dir"] = listdir(c)
out["for-each-ref"] = git("for-each-ref", "--format=%(refname)")
out["for-each-ref in your git dir"] = git("--git-dir=" + c, "for-each-ref", "--format=%(refname)")
print(json.dumps(out))
"""

#: The agent's own git, which must keep working: every command must succeed.
OWN_GIT = """
set -e
git status --porcelain >/dev/null
echo agent >> README.md
git diff --stat | grep -q README.md
git log --format=%s | grep -qx initial
git cat-file -p HEAD:src/app.py | grep -q app
git add README.md && git commit -qm "agent commit"
echo wip >> README.md && git stash -q && git stash list | grep -q "agent commit"
git stash pop -q
git branch agent-branch && git tag agent-tag
git for-each-ref --format='%(refname)' | grep -qx refs/tags/agent-tag
git fsck --connectivity-only --no-dangling
echo own-git-ok
"""


def _separate(tmp_path: Path) -> Path:
    """A user repository whose git directory lies outside its working tree."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main", f"--separate-git-dir={tmp_path / 'gitdir'}")
    git(root, "config", "user.name", "u")
    git(root, "config", "user.email", "u@example.com")
    return make_user_repo(root)


@pytest.fixture(params=["dot-git", "separate-git-dir"])
def setting(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Your repository with a stash, a tag, packed refs, reflogs, a hook and a linked worktree; run a,
    run b (with a recorded call) and a run c made before homes (its admin dir in ``.git/worktrees``)."""
    repo = make_user_repo(tmp_path / "repo") if request.param == "dot-git" else _separate(tmp_path)
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "linked"))
    (common / "hooks").mkdir(exist_ok=True)
    write(common / "hooks", "pre-commit", "#!/bin/sh\necho user hook\n")
    run_a = json.loads(ok("start", "--json", cwd=repo))["run"]
    run_b = json.loads(ok("start", "--json", cwd=repo))["run"]
    ok("exec", run_b, "--", "sh", "-c", "echo b-secret > b.txt", cwd=repo)
    git(repo, "pack-refs", "--all")  # tags, branches, runs' refs packed: only run a's show inside run a
    git(repo, "stash", "push", "-q", "-m", "the user's secret stash")  # loose
    write(repo, "README.md", "hello\nagain\n")
    run_c = json.loads(ok("start", "--json", cwd=repo))["run"]
    make_legacy(repo, run_c)
    assert (common / "worktrees" / run_c / "HEAD").is_file() and (common / "refs" / "stash").is_file()
    return {
        "repo": str(repo),
        "common": str(common),
        "a": run_a,
        "b": run_b,
        "legacy": run_c,
        "b_git": open_run(repo, run_b).place.git_dir,
    }


def _inside(setting: dict[str, str], command: str, script: list[str]) -> subprocess.CompletedProcess[bytes]:
    """``script`` run by run a's agent, through ``sandbox exec`` or a ``sandbox run`` without hooks;
    ``exec-as-user``: ``sandbox exec`` as an ordinary user (uid 1000 in a user namespace of its own)."""
    args = ["run", setting["a"], "--hooks", "none"] if command == "run" else ["exec", setting["a"]]
    run = sb_as_user if command == "exec-as-user" else sb
    return run(*args, "--", *script, cwd=setting["repo"])


@pytest.mark.parametrize("command", ["exec", "run", "exec-as-user"])
def test_an_agent_reads_nothing_of_your_git_or_other_runs_but_its_own_git_works(
    setting: dict[str, str], command: str
) -> None:
    # What the user's own git sees, for comparison: every probe below finds something outside.
    repo = setting["repo"]
    assert git(repo, "stash", "list").strip() and git(repo, "for-each-ref", f"refs/sandbox/{setting['b']}/")
    proc = _inside(setting, command, [sys.executable, "-c", PROBE, json.dumps(setting)])
    assert proc.returncode == 0, proc.stderr.decode()
    seen = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    found = {name: value for name, value in seen.items() if value is not None}
    # Only what the run's git borrows (your objects), the sandbox's own directory (this run's token
    # and the host's socket) and what its own tools read of this run (HEAD, the run's own refs) are
    # in your git directory; the agent's git lists only the run's own refs.
    assert found.pop("common dir") == ["HEAD", "objects", "packed-refs", "refs", "sandbox"], seen
    assert found.pop("for-each-ref").split() == [f"refs/heads/sandbox/{setting['a']}"], seen
    theirs = found.pop("for-each-ref in your git dir").split()  # what git finds there: run a's own refs
    assert theirs and all(name.startswith(f"refs/sandbox/{setting['a']}/") for name in theirs), theirs
    assert found.pop("refs/") == ["sandbox"] and found.pop("HEAD").startswith("ref: refs/heads/"), seen
    packed = [line.split()[-1] for line in found.pop("packed-refs").splitlines() if line[:1] not in "#^"]
    assert packed and all(name.startswith(f"refs/sandbox/{setting['a']}/") for name in packed), packed
    assert found == {}, found
    own = _inside(setting, command, ["sh", "-c", OWN_GIT])
    assert own.returncode == 0 and b"own-git-ok" in own.stdout, own.stderr.decode()
    # The user's repository is as it was: the stash, and run a's recorded commit on its refs.
    assert "the user's secret stash" in git(repo, "stash", "list")
    assert git(repo, "fsck", "--connectivity-only", "--no-dangling").strip() == ""


def test_a_run_made_before_homes_still_reads_its_git_through_yours(setting: dict[str, str]) -> None:
    """A legacy run's git is a linked worktree of yours (``commondir``): it keeps the older view."""
    out = ok("exec", setting["legacy"], "--", "git", "log", "--format=%s", cwd=setting["repo"])
    assert "initial" in out.splitlines(), out


def test_an_agent_lists_none_of_another_runs_objects(setting: dict[str, str]) -> None:
    """``git cat-file --batch-all-objects`` inside run a: your committed history and a's own objects
    only: run b's recorded file (and its ledger) are in run b's own store (sandbox.store.runstore)."""
    secret = hashlib.sha1(b"blob 9\0b-secret\n").hexdigest()  # run b's recorded b.txt
    assert git(setting["repo"], "cat-file", "-t", secret).strip() == "blob"  # recorded into your store
    listing = ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]
    listed = ok("exec", setting["a"], "--", *listing, cwd=setting["repo"]).split()
    assert len(listed) > 10  # your history and run a's own objects are listed
    assert secret not in listed


def test_doctor_explains_what_of_your_git_a_run_sees(setting: dict[str, str]) -> None:
    """``sandbox doctor RUN --explain`` gives the same verdict the mounts enforce, with why."""
    common = Path(setting["common"])
    packed = ok("--json", "doctor", setting["a"], "--explain", str(common / "packed-refs"), cwd=setting["repo"])
    assert json.loads(packed)["visible"] and "own lines" in json.loads(packed)["why"]
    for rel, visible in (("refs/stash", False), ("logs/HEAD", False), ("hooks/pre-commit", False), ("objects", True)):
        one = json.loads(ok("--json", "doctor", setting["a"], "--explain", str(common / rel), cwd=setting["repo"]))
        assert one["visible"] is visible and not one["writable"], (rel, one)
        assert visible or "the run's git has its own" in one["why"], one


def _blob(text: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(text) + text).hexdigest()


def test_your_stash_reflogs_and_unreachable_objects_are_not_in_a_runs_objects(tmp_path: Path) -> None:
    """Inside a run your ``objects/`` is your committed history (:mod:`sandbox.store.history`): the
    files of your stash, of a commit only your reflog keeps, of an object nothing names and of a dropped
    run's ledger are neither listed by ``git cat-file --batch-all-objects`` nor readable by id; what the
    run's snapshot took of yours beyond your history (a staged file) is in the run's own store, and the
    agent's git finds its start whole."""
    repo = make_user_repo(tmp_path / "repo")
    write(repo, "stashed.txt", "in your stash\n")
    git(repo, "add", "stashed.txt")
    git(repo, "stash", "push", "-q")
    write(repo, "amended.txt", "before the amend\n")
    git(repo, "add", "amended.txt")
    git(repo, "commit", "-qm", "to be amended")
    write(repo, "amended.txt", "after the amend\n")
    git(repo, "add", "amended.txt")
    git(repo, "commit", "-q", "--amend", "-m", "amended")  # the first version lives in your reflog alone
    loose = git(repo, "hash-object", "-w", str(write(tmp_path, "loose.txt", "named by nothing\n"))).strip()
    write(repo, "staged.txt", "staged, not committed\n")
    git(repo, "add", "staged.txt")  # the snapshot takes the index's blob, in your objects/ alone
    dropped = json.loads(ok("start", "--json", cwd=repo))["run"]
    ok("exec", dropped, "--", "sh", "-c", "echo dropped-ledger > d.txt", cwd=repo)
    ok("drop", dropped, "--force", cwd=repo)  # its store retired into yours
    run = json.loads(ok("start", "--json", cwd=repo))["run"]
    hidden = {
        "stash": _blob(b"in your stash\n"),
        "reflog": _blob(b"before the amend\n"),
        "unreachable": loose,
        "dropped run": _blob(b"dropped-ledger\n"),
    }
    for name, oid in hidden.items():
        assert git(repo, "cat-file", "-t", oid).strip() == "blob", name  # all in your objects/
    listing = ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]
    listed = set(ok("exec", run, "--", *listing, cwd=repo).split())
    assert git(repo, "rev-parse", "HEAD:README.md").strip() in listed  # your history is there
    assert not {name for name, oid in hidden.items() if oid in listed}, listed
    for name, oid in hidden.items():
        proc = sb("exec", run, "--", "git", "cat-file", "-e", oid, cwd=repo)
        assert proc.returncode != 0, name
    script = (
        "set -e; git cat-file -p HEAD:staged.txt | grep -q 'staged, not committed';"
        " git cat-file -p HEAD^:README.md >/dev/null; git fsck --connectivity-only --no-dangling; echo whole"
    )
    assert "whole" in ok("exec", run, "--", "sh", "-c", script, cwd=repo)
    # A branch you delete unmerged leaves the next command's history too (a new generation).
    git(repo, "checkout", "-q", "-b", "scratch")
    write(repo, "scratch.txt", "a commit you throw away\n")
    git(repo, "add", "scratch.txt")
    git(repo, "commit", "-qm", "scratch")
    git(repo, "checkout", "-q", "main")
    ok("exec", run, "--", "true", cwd=repo)
    assert _blob(b"a commit you throw away\n") in set(ok("exec", run, "--", *listing, cwd=repo).split())
    git(repo, "branch", "-q", "-D", "scratch")
    assert _blob(b"a commit you throw away\n") not in set(ok("exec", run, "--", *listing, cwd=repo).split())


@pytest.mark.parametrize("how", ["--reference", "--shared"])
def test_a_borrowed_object_store_shows_only_your_history(tmp_path: Path, how: str) -> None:
    """Your clone borrows another repository's objects (``clone --reference`` or ``--shared``): inside a run
    your history is whole (packed from your tips, borrowed objects included), and what else that store
    holds (a branch you did not clone) is neither listed nor readable by id."""
    mirror = make_user_repo(tmp_path / "mirror")
    git(mirror, "checkout", "-q", "-b", "other")
    write(mirror, "other.txt", "only in the store you borrow\n")
    git(mirror, "add", "other.txt")
    git(mirror, "commit", "-qm", "other")
    git(mirror, "checkout", "-q", "main")
    secret = _blob(b"only in the store you borrow\n")
    repo = tmp_path / "repo"
    git(
        tmp_path,
        "clone",
        "-q",
        "--single-branch",
        "-b",
        "main",
        how,
        *([str(mirror)] if how == "--reference" else []),
        str(mirror),
        str(repo),
    )
    assert git(repo, "cat-file", "-t", secret).strip() == "blob"  # your git reads it through the alternate
    git(repo, "config", "user.name", "u")
    git(repo, "config", "user.email", "u@example.com")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    script = (
        "set -e; git log --format=%s | grep -q initial; git cat-file -p HEAD:README.md;"
        " git fsck --connectivity-only --no-dangling; echo whole"
    )
    assert "whole" in ok("exec", run_id, "--", "sh", "-c", script, cwd=repo)
    assert sb("exec", run_id, "--", "git", "cat-file", "-e", secret, cwd=repo).returncode != 0
    listing = ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"]
    assert secret not in ok("exec", run_id, "--", *listing, cwd=repo).split()
    found = ok("exec", run_id, "--", "sh", "-c", f"ls {mirror}/.git/objects 2>&1 || true", cwd=repo)
    assert "pack" not in found.split(), found


def test_gc_gives_a_run_made_before_stores_its_own(tmp_path: Path) -> None:
    """A run made before stores (what is recorded for it lies in your objects) sees your objects whole,
    your stash included; ``sandbox gc`` packs what its refs reach beyond your history into a store of its
    own, and from then on its sandbox shows your committed history and its own objects only."""
    from sandbox.store import layout, moved, runstore

    repo = make_user_repo(tmp_path / "repo")
    write(repo, "stashed.txt", "in your stash\n")
    git(repo, "add", "stashed.txt")
    git(repo, "stash", "push", "-q")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    ok("exec", run_id, "--", "sh", "-c", "echo its-own-record > own.txt", cwd=repo)
    common = str(repo / ".git")
    runstore.retire(common, run_id)  # as a run made before stores: its objects in yours, no store
    moved.write_alternates(open_run(repo, run_id).place.git_dir, common, run_id)
    stash, own = _blob(b"in your stash\n"), _blob(b"its-own-record\n")
    sb("serve", "--stop", cwd=repo)
    assert sb("exec", run_id, "--", "git", "cat-file", "-e", stash, cwd=repo).returncode == 0
    served = sb("serve", "--json", cwd=repo)  # the host up: gc leaves the run as it is, and says why
    assert served.returncode == 0, served.stderr.decode()
    kept = ok("gc", cwd=repo)
    assert f"Left run {run_id} without an object store of its own" in kept and "sandbox serve" in kept, kept
    assert not os.path.isdir(layout.run_store(common, run_id))
    sb("serve", "--stop", cwd=repo)
    out = ok("gc", cwd=repo)
    assert f"Gave run {run_id}" in out, out
    assert os.path.isdir(layout.run_store(common, run_id))
    assert sb("exec", run_id, "--", "git", "cat-file", "-e", stash, cwd=repo).returncode != 0
    assert ok("exec", run_id, "--", "git", "--git-dir", common, "cat-file", "-p", own, cwd=repo) == "its-own-record\n"
    assert "own.txt" in ok("diff", run_id, "--stat", cwd=repo)
    assert git(repo, "fsck", "--connectivity-only", "--no-dangling").strip() == ""
    assert "Gave run" not in ok("gc", cwd=repo)  # once
