"""Property test of apply and undo against random base trees, agent changes and user changes.

One repository serves every example; each example gets a fresh run made directly from ledger events
(no worktree, no CLI process), so hundreds of examples run in seconds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.merge import mergeback
from sandbox.merge.undo import NothingToUndoError, undo
from sandbox.models import CallSpec, Event, EventKind, FileChange, RunInfo
from sandbox.run.ids import new_run_id
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.ledger import new_event_id
from sandbox.store.project import Project
from tests.conftest import examples, git, make_repo

#: A small universe with file <-> directory clashes (d vs d/e) and a nested directory.
PATHS = ["a", "b", "d", "d/e", "d/f", "g/h/i", "l"]
#: Possible states: absent, two contents, an executable, two symlinks.
STATES: list[tuple[str, bytes] | None] = [
    None,
    ("file", b"one\n"),
    ("file", b"two\n"),
    ("exec", b"one\n"),
    ("link", b"a"),
    ("link", b"../x"),
]

Tree = dict[str, "tuple[str, bytes] | None"]


def valid(tree: Tree) -> bool:
    """No path is both a file and a directory."""
    present = [p for p, s in tree.items() if s is not None]
    return not any(q.startswith(p + "/") for p in present for q in present)


def fix(tree: Tree) -> Tree:
    if tree.get("d") is not None:
        tree = {**tree, "d/e": None, "d/f": None}
    return tree


trees = st.fixed_dictionaries({p: st.sampled_from(STATES) for p in PATHS}).map(fix)


def mutate(base: Tree) -> st.SearchStrategy[Tree]:
    return st.fixed_dictionaries({p: st.one_of(st.just(base[p]), st.sampled_from(STATES)) for p in PATHS}).map(fix)


def entry(repo: object, state: tuple[str, bytes] | None) -> objects.Entry | None:
    if state is None:
        return None
    kind, data = state
    mode = {"file": objects.MODE_FILE, "exec": objects.MODE_EXEC, "link": objects.MODE_LINK}[kind]
    return objects.Entry(mode, objects.write_blob(repo, data))


def build_tree(run_repo: object, tree: Tree) -> str:
    return objects.edit_tree(run_repo, None, {p: entry(run_repo, s) for p, s in tree.items() if s is not None})


def write_user_tree(root: Path, tree: Tree) -> None:
    for name in os.listdir(root):
        if name != ".git":
            full = root / name
            if full.is_dir() and not full.is_symlink():
                shutil.rmtree(full)
            else:
                full.unlink()
    for path, state in sorted(tree.items()):
        if state is None:
            continue
        kind, data = state
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            os.symlink(data.decode(), full)
        else:
            full.write_bytes(data)
            full.chmod(0o755 if kind == "exec" else 0o644)


def read_user_tree(root: Path) -> Tree:
    out: Tree = {}
    for path in PATHS:
        full = root / path
        parent_ok = all(
            (root / "/".join(path.split("/")[:i])).is_dir() and not (root / "/".join(path.split("/")[:i])).is_symlink()
            for i in range(1, len(path.split("/")))
        )
        if not parent_ok or not os.path.lexists(full) or (full.is_dir() and not full.is_symlink()):
            out[path] = None
        elif full.is_symlink():
            out[path] = ("link", os.fsencode(os.readlink(full)))
        else:
            out[path] = ("exec" if os.stat(full).st_mode & 0o100 else "file", full.read_bytes())
    return out


def extra_files(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found - set(PATHS)


class World:
    """One user repository shared by all examples."""

    def __init__(self, root: Path) -> None:
        self.root = make_repo(root, {"README.md": "r\n"})
        self.head = git(self.root, "rev-parse", "HEAD").strip()
        project, workdir, _ = Project.discover(str(self.root))
        assert workdir is not None
        self.project, self.workdir = project, workdir

    def run(self, base: Tree, steps: list[Tree]) -> Run:
        repo = self.project.repo
        sig = objects.signature()
        run_id = new_run_id()
        base_commit = str(repo.create_commit(None, sig, sig, "base", build_tree(repo, base), [self.head]))
        run = Run(self.project, run_id)
        os.makedirs(run.dir, exist_ok=True)
        info = RunInfo(
            run_id=run_id,
            base=base_commit,
            head=self.head,
            worktree=str(self.root) + "-none",
            user_workdir=self.workdir,
        )
        run.record_event(Event(event_id=new_event_id(), kind=EventKind.run_started, run_id=run_id, run=info))
        parent, parent_tree = base_commit, build_tree(repo, base)
        for i, tree in enumerate(steps):
            new_tree = build_tree(repo, tree)
            files = [
                FileChange(
                    path=c.path,
                    before_hash=c.old.oid if c.old else None,
                    after_hash=c.new.oid if c.new else None,
                    before_mode=c.old.mode if c.old else None,
                    after_mode=c.new.mode if c.new else None,
                )
                for c in objects.diff_trees(repo, parent_tree, new_tree)
            ]
            if not files:
                continue
            commit = str(repo.create_commit(None, sig, sig, f"step {i}", new_tree, [parent]))
            # Recorded straight into the ledger: these runs have no worktree (start_call needs one).
            call_id = f"step{i}-{run_id}"
            spec = CallSpec(tool_name=f"step{i}", input_hash=f"sha256:{i}")
            run.record(EventKind.call_started, call_id, call=spec)
            run.record_event(
                run.new_event(EventKind.call_succeeded, call_id, commit=commit, parent_commit=parent, files=files),
                keep=[commit],
            )
            parent, parent_tree = commit, new_tree
        return run


@pytest.fixture(scope="module")
def w(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The shared repository, on tmpfs when there is one: every apply fsyncs, and real fsyncs
    on a loaded disk would make hundreds of examples take minutes (the behaviour is the same)."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        top = Path(tempfile.mkdtemp(prefix="sandbox-prop-", dir=shm))
    else:
        top = tmp_path_factory.mktemp("prop")
    yield World(top / "repo")
    shutil.rmtree(top, ignore_errors=True)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_apply_then_undo_properties(w: World, data: st.DataObject) -> None:
    base = data.draw(trees, label="base")
    mid = data.draw(mutate(base), label="agent step 1")
    final = data.draw(mutate(mid), label="agent step 2")
    user = data.draw(mutate(base), label="user")
    write_user_tree(w.root, user)
    (w.root / "untracked.txt").write_text("keep me\n")
    run = w.run(base, [mid, final])
    if not run.entries():
        return
    expected: Tree = {}
    clash = False
    for p in PATHS:
        if user[p] == base[p]:
            expected[p] = final[p]
        else:
            expected[p] = user[p]
            clash = clash or (final[p] != base[p] and final[p] != user[p])
    must_conflict = clash or not valid(expected)
    try:
        mergeback.apply(run)
    except mergeback.ApplyConflict:
        assert must_conflict, "refused although every path could be applied"
        assert read_user_tree(w.root) == user, "a refused apply wrote something"
        return
    assert not must_conflict, f"applied despite a conflict: {read_user_tree(w.root)}"
    assert read_user_tree(w.root) == expected
    assert extra_files(w.root) == {"untracked.txt"}  # nothing else appeared or vanished
    while True:
        try:
            undo(run)
        except NothingToUndoError:
            break
    assert read_user_tree(w.root) == user, "apply then undo did not give back the user's tree"
    assert (w.root / "untracked.txt").read_text() == "keep me\n"
