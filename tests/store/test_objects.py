"""Raw tree editing and diffing: checked against a plain dict model with hypothesis."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.store import objects
from sandbox.store.objects import Entry
from tests.conftest import examples

NAMES = st.sampled_from(["a", "b", "a.txt", "a-b", "dir", os.fsdecode(b"\xe9t\xe9")])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map("/".join)


def _consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop paths that would need a file and a directory at once (keep the first seen)."""
    out: dict[str, bytes] = {}
    for path, data in files.items():
        parts = path.split("/")
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
        if any(p in out for p in prefixes) or any(k.startswith(path + "/") for k in out):
            continue
        out[path] = data
    return out


def _build(repo: pygit2.Repository, files: dict[str, bytes]) -> str:
    changes: dict[str, Entry | None] = {
        p: Entry(objects.MODE_FILE, objects.write_blob(repo, d)) for p, d in files.items()
    }
    return objects.edit_tree(repo, None, changes)


def _listing(repo: pygit2.Repository, tree: str) -> dict[str, str]:
    return {p: e.oid for p, e in objects.walk_tree(repo, tree)}


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    base=st.dictionaries(PATHS, st.binary(max_size=8), max_size=8),
    edits=st.dictionaries(PATHS, st.one_of(st.none(), st.binary(max_size=8)), max_size=6),
)
def test_edit_tree_matches_a_dict_model(tmp_path: Path, base: dict[str, bytes], edits: dict[str, bytes | None]) -> None:
    repo = pygit2.init_repository(str(tmp_path / "objects-repo"), bare=True)
    base = _consistent(base)
    tree = _build(repo, base)
    assert _listing(repo, tree) == {p: str(pygit2.hash(d)) for p, d in base.items()}
    # The model: apply each edit; a file replaces any directory at its path and any file above it.
    model = dict(base)
    changes: dict[str, Entry | None] = {}
    for path, data in edits.items():
        if data is None:
            for key in [k for k in model if k == path or k.startswith(path + "/")]:
                del model[key]
                changes[key] = None
            continue
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in model:
                del model[prefix]
                changes[prefix] = None
        for key in [k for k in model if k.startswith(path + "/")]:
            del model[key]
            changes[key] = None
        model[path] = data
        changes[path] = Entry(objects.MODE_FILE, objects.write_blob(repo, data))
    # Keep only a self-consistent change set (as capture produces): later edits win.
    new_tree = objects.edit_tree(repo, tree, changes)
    assert _listing(repo, new_tree) == {p: str(pygit2.hash(d)) for p, d in model.items()}
    diffed = {
        c.path: (c.old.oid if c.old else None, c.new.oid if c.new else None)
        for c in objects.diff_trees(repo, tree, new_tree)
    }
    old_listing, new_listing = _listing(repo, tree), _listing(repo, new_tree)
    expected = {
        p: (old_listing.get(p), new_listing.get(p))
        for p in set(old_listing) | set(new_listing)
        if old_listing.get(p) != new_listing.get(p)
    }
    assert diffed == expected


def test_trees_match_git_for_odd_names(tmp_path: Path) -> None:
    import subprocess

    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    files = {"a.txt": b"1", "a/b": b"2", "a-b": b"3", os.fsdecode(b"\xff"): b"4"}
    tree = _build(repo, files)
    out = subprocess.run(["git", "fsck", "--strict"], cwd=tmp_path / "r", capture_output=True, check=False)
    assert out.returncode == 0, out.stderr
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--name-only", tree], cwd=tmp_path / "r", capture_output=True, check=True
    ).stdout.split(b"\0")
    assert sorted(n for n in listed if n) == sorted(os.fsencode(p) for p in files)


def test_commit_changes_leave_submodule_entries_out(tmp_path: Path) -> None:
    """What diff, apply and branch read of a commit: its file changes, never a gitlink (added or removed)."""
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    link = Entry(objects.MODE_GITLINK, "1" * 40)
    a, b = objects.write_blob(repo, b"a\n"), objects.write_blob(repo, b"b\n")
    tree0 = objects.edit_tree(repo, None, {"keep": Entry(objects.MODE_FILE, a), "sub": link})
    tree1 = objects.edit_tree(repo, tree0, {"keep": Entry(objects.MODE_FILE, b), "sub": None, "new": link})
    first = objects.write_commit(repo, tree0, [], "first\n", 0)
    second = objects.write_commit(repo, tree1, [first], "second\n", 0)
    assert [(c.path, c.new) for c in objects.commit_changes(repo, first, second)] == [
        ("keep", Entry(objects.MODE_FILE, b))
    ]
    assert [c.path for c in objects.commit_changes(repo, None, first)] == ["keep"]
