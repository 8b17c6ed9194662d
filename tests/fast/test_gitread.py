"""sandbox.fast.gitread: the standard-library git reader agrees with pygit2, or says it cannot answer."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.fast.gitread import Commit, Repo
from sandbox.fast.odb import GitReadError
from sandbox.run.run import Run
from sandbox.store import integrity, layout, objects
from sandbox.store.project import Project
from tests.conftest import commit_all, git, make_repo, write

TYPE_NAMES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}


def all_oids(root: Path) -> list[str]:
    """Every object git sees in the repository (its alternates included)."""
    out = git(root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return out.split()


def assert_all_objects_equal(root: Path, git_dir: Path | None = None) -> int:
    """Every object read by gitread equals pygit2's (type and bytes); how many were compared."""
    gdir = str(git_dir or root / ".git")
    reader = Repo(gdir)
    for store in sorted(Path(reader.common_dir, "sandbox", "runs").glob("*/objects")):
        reader.use_store(str(store))  # runs' own stores: gitread reads those it is told of, not the hub
    oracle = pygit2.Repository(gdir)
    oids = all_oids(root)
    assert oids
    for oid in oids:
        kind, data = oracle.odb.read(oid)
        assert reader.read(oid) == (TYPE_NAMES[int(kind)], bytes(data)), oid
    return len(oids)


def fast_import(root: Path, commits: int = 60) -> None:
    """A history of many similar commits, trees and blobs (so that repack makes delta chains)."""
    lines: list[bytes] = []
    body = [f"line {i} of a long enough file to be worth a delta\n" for i in range(200)]
    for n in range(commits):
        body[(n * 7) % len(body)] = f"changed in commit {n}\n"
        blob = "".join(body).encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(b"committer T <t@example.com> %d +0000\n" % (1_700_000_000 + n))
        msg = b"commit %d\n" % n
        lines.append(b"data %d\n%s" % (len(msg), msg))
        for d in range(4):
            path = f"dir{d}/sub/file{d}.txt".encode()
            data = blob + b"dir %d commit %d\n" % (d, n)
            lines.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path, len(data), data))
    subprocess.run(["git", "fast-import", "--quiet", "--force"], cwd=root, input=b"".join(lines), check=True)
    git(root, "reset", "-q", "--hard", "main")


def delta_depths(root: Path) -> dict[str, int]:
    """oid -> delta depth of every deltified object in the repository's packs (git verify-pack -v)."""
    depths: dict[str, int] = {}
    for idx in pack_dir(root).glob("*.idx"):
        for line in git(root, "verify-pack", "-v", str(idx)).splitlines():
            parts = line.split()
            if len(parts) == 7 and len(parts[0]) == 40:
                depths[parts[0]] = int(parts[5])
    return depths


def pack_dir(root: Path) -> Path:
    """The pack directory of a repository (bare or not)."""
    return (root / ".git" if (root / ".git").exists() else root) / "objects" / "pack"


def pack_entry_types(root: Path) -> set[int]:
    """The type numbers of the entries of every pack, read at the offsets verify-pack reports."""
    kinds: set[int] = set()
    for idx in pack_dir(root).glob("*.idx"):
        data = idx.with_suffix(".pack").read_bytes()
        for line in git(root, "verify-pack", "-v", str(idx)).splitlines():
            parts = line.split()
            if len(parts) in (5, 7) and len(parts[0]) == 40:
                kinds.add((data[int(parts[4])] >> 4) & 7)
    return kinds


# -- objects --------------------------------------------------------------------------------------


def test_loose_objects_equal_pygit2(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"a.txt": "a\n", "d/b.bin": bytes(range(256)), "d/e/c": "c\n"})
    write(root, "a.txt", "a2\n")
    commit_all(root, "second")
    git(root, "tag", "-a", "-m", "annotated", "v1")
    assert not list((root / ".git" / "objects" / "pack").glob("*.pack"))
    assert assert_all_objects_equal(root) >= 8


def test_objects_after_gc_equal_pygit2(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    fast_import(root, 20)
    git(root, "gc", "-q")
    assert list((root / ".git" / "objects" / "pack").glob("*.pack"))
    assert assert_all_objects_equal(root) > 60


def test_deep_ofs_delta_chains_equal_pygit2(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    fast_import(root)
    git(root, "repack", "-q", "-a", "-d", "-f", "--depth=50", "--window=50")
    depths = delta_depths(root)
    assert max(depths.values()) > 5, "the pack must hold delta chains deeper than 1"
    assert 6 in pack_entry_types(root)  # OFS_DELTA
    assert assert_all_objects_equal(root) > 200


def test_ref_deltas_equal_pygit2(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    fast_import(root, 30)
    git(root, "-c", "repack.useDeltaBaseOffset=false", "repack", "-q", "-a", "-d", "-f", "--depth=20")
    kinds = pack_entry_types(root)
    assert 7 in kinds and 6 not in kinds, kinds  # REF_DELTA only
    assert max(delta_depths(root).values()) > 1
    assert assert_all_objects_equal(root) > 100


def test_thin_pack_fixed_base_in_another_pack(tmp_path: Path) -> None:
    """A thin pack made whole by index-pack --fix-thin: REF_DELTAs against bases it appended."""
    src = make_repo(tmp_path / "src")
    fast_import(src, 10)
    dst = tmp_path / "dst"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(dst))
    old = git(src, "rev-parse", "main").strip()
    with open(src / "dir0/sub/file0.txt", "a") as fh:
        fh.write("one more line, so that the new blob is a delta against the old one\n")
    new = commit_all(src, "more")
    thin = subprocess.run(
        ["git", "pack-objects", "--thin", "--stdout", "--revs", "-q"],
        cwd=src,
        input=f"{new}\n^{old}\n".encode(),
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["git", "index-pack", "--fix-thin", "--stdin"], cwd=dst, input=thin, capture_output=True, check=True)
    git(dst, "update-ref", "refs/heads/main", new)
    assert len(list((dst / "objects" / "pack").glob("*.pack"))) == 2
    assert 7 in pack_entry_types(dst)
    assert_all_objects_equal(dst, dst)


def test_alternates_of_a_shared_clone(tmp_path: Path) -> None:
    src = make_repo(tmp_path / "src")
    fast_import(src, 10)
    git(src, "gc", "-q")
    dst = tmp_path / "dst"
    git(tmp_path, "clone", "-q", "--shared", str(src), str(dst))
    write(dst, "own.txt", "only here\n")
    own = commit_all(dst, "own")
    assert (dst / ".git" / "objects" / "info" / "alternates").exists()
    assert assert_all_objects_equal(dst) > 40
    reader = Repo(str(dst / ".git"))
    assert reader.ref("HEAD") == own
    assert reader.commit(own).parents == (git(src, "rev-parse", "main").strip(),)


def test_objects_written_by_the_sandbox(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("edit") as call:
        call.write("src/new.py", "NEW = 1\n")
    common = project.common_dir
    reader = Repo(common)
    reader.use_store(layout.run_store(common, run.run_id))  # the run's objects are in its own store
    oracle = pygit2.Repository(common)
    tip = reader.ref(layout.ref_name(run.run_id, "ledger"))
    assert tip is not None and tip == str(oracle.references[layout.ref_name(run.run_id, "ledger")].target)
    key = integrity.key_at(oracle, tip)
    assert key is not None
    seen = 0
    oid: str | None = tip
    while oid is not None:
        kind, data = oracle.odb.read(oid)
        assert reader.read(oid) == ("commit", bytes(data))
        info = objects.read_commit(oracle, oid)
        got = reader.commit(oid)
        assert (got.tree, list(got.parents), got.message) == (info.tree, info.parents, info.message)
        entry = reader.lookup(got.tree, integrity.KEY_NAME)
        expected = objects.lookup(oracle, got.tree, integrity.KEY_NAME)
        assert (entry.mode, entry.oid) == (expected.mode, expected.oid) if entry and expected else entry is expected
        if entry is not None:  # the event commits (their chain goes on into the commit the run started from)
            assert reader.read(entry.oid) == ("blob", key)
            seen += 1
        oid = got.parents[0] if got.parents else None
    assert seen >= 3
    # The run's own git dir: its HEAD, and objects reached through its alternates.
    own = Repo(run.git_dir)
    own_oracle = pygit2.Repository(run.git_dir)
    assert own.ref("HEAD") == str(own_oracle.head.target)
    head_commit = own.commit(str(own_oracle.head.target))
    assert head_commit.tree == str(own_oracle.head.peel(pygit2.Commit).tree.id)
    head = run.head()
    assert reader.commit(head).tree == objects.read_commit(oracle, head).tree
    # Every object, including those in the packs the sandbox writes itself (sandbox.store.packs).
    assert list((Path(run.repo.sandbox_store) / "pack").glob("*.idx"))
    assert assert_all_objects_equal(repo) > 10
    assert assert_all_objects_equal(Path(run.worktree), Path(run.git_dir)) > 10  # through its alternates


def test_commit_fields(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    second = git(root, "commit", "-q", "--allow-empty", "-m", "two\n\nbody")
    del second
    head = git(root, "rev-parse", "HEAD").strip()
    parent = git(root, "rev-parse", "HEAD~1").strip()
    got = Repo(str(root / ".git")).commit(head)
    oracle = pygit2.Repository(str(root))[head]
    assert got == Commit(str(oracle.tree_id), (parent,), oracle.message, oracle.commit_time)


def test_new_pack_is_found_after_the_repo_was_opened(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    git(root, "gc", "-q")
    reader = Repo(str(root / ".git"))
    assert reader.ref("HEAD") is not None
    reader.read(reader.ref("HEAD") or "")  # packs listed and mapped now
    write(root, "late.txt", "late\n")
    late = commit_all(root, "late")
    git(root, "repack", "-q", "-d")  # a new pack; the commit is no longer loose
    assert not (root / ".git" / "objects" / late[:2] / late[2:]).exists()
    assert reader.read(late)[0] == "commit"


# -- refs -----------------------------------------------------------------------------------------


def test_refs_loose_packed_peeled_and_overridden(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    first = git(root, "rev-parse", "HEAD").strip()
    second = commit_all(root, "second") if write(root, "b", "b\n") else ""
    git(root, "branch", "packed-one", first)
    git(root, "tag", "-a", "-m", "annotated", "v1", first)
    git(root, "update-ref", "refs/sandbox/abc/ledger", first)
    git(root, "pack-refs", "--all")
    packed = (root / ".git" / "packed-refs").read_text()
    assert "^" in packed and "refs/heads/packed-one" in packed
    git(root, "update-ref", "refs/sandbox/abc/ledger", second)  # loose now overrides the packed one
    git(root, "update-ref", "refs/sandbox/abc/head", second)
    git(root, "symbolic-ref", "refs/sandbox/abc/sym", "refs/heads/main")
    reader = Repo(str(root / ".git"))
    oracle = pygit2.Repository(str(root))
    assert reader.ref("refs/heads/packed-one") == first
    assert reader.ref("refs/sandbox/abc/ledger") == second
    assert reader.ref("refs/tags/v1") == str(oracle.references["refs/tags/v1"].target)
    assert reader.ref("refs/heads/nope") is None
    assert reader.ref("HEAD") == second
    assert reader.symbolic_target("HEAD") == "refs/heads/main"
    assert reader.symbolic_target("refs/heads/main") is None
    assert reader.symbolic_target("refs/heads/nope") is None
    for prefix in ("refs/sandbox/", "refs/heads/", "refs/tags/", "refs/", "refs/sandbox/abc/h"):
        expected = {
            name: str(oracle.references[name].resolve().target) for name in oracle.references if name.startswith(prefix)
        }
        assert reader.refs(prefix) == expected, prefix


def test_detached_and_unborn_head(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    head = git(root, "rev-parse", "HEAD").strip()
    git(root, "checkout", "-q", "--detach")
    reader = Repo(str(root / ".git"))
    assert reader.ref("HEAD") == head
    assert reader.symbolic_target("HEAD") is None
    empty = make_repo(tmp_path / "empty", commit=False)
    unborn = Repo(str(empty / ".git"))
    assert unborn.ref("HEAD") is None
    assert unborn.symbolic_target("HEAD") == "refs/heads/main"
    assert unborn.refs("refs/") == {}


def test_linked_worktree(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    main_head = git(root, "rev-parse", "HEAD").strip()
    git(root, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    write(tmp_path / "wt", "side.txt", "side\n")
    side = commit_all(tmp_path / "wt", "side")
    git(tmp_path / "wt", "update-ref", "refs/worktree/mine", side)
    git(tmp_path / "wt", "update-ref", "refs/bisect/bad", main_head)
    wt_git = git(tmp_path / "wt", "rev-parse", "--absolute-git-dir").strip()
    reader = Repo(wt_git)
    main = Repo(str(root / ".git"))
    assert reader.common_dir == str(root / ".git")
    assert reader.ref("HEAD") == side and main.ref("HEAD") == main_head
    assert reader.symbolic_target("HEAD") == "refs/heads/side"
    assert reader.ref("refs/heads/main") == main_head == main.ref("refs/heads/main")
    assert reader.ref("refs/worktree/mine") == side and main.ref("refs/worktree/mine") is None
    assert (
        reader.refs("refs/heads/")
        == main.refs("refs/heads/")
        == {"refs/heads/main": main_head, "refs/heads/side": side}
    )
    assert reader.refs("refs/worktree/") == {"refs/worktree/mine": side}
    assert reader.refs("refs/bisect/") == {"refs/bisect/bad": main_head}
    assert main.refs("refs/") == {"refs/heads/main": main_head, "refs/heads/side": side}
    assert reader.read(side)[0] == "commit"


def test_odd_refs_raise(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    reader = Repo(str(root / ".git"))
    (root / ".git" / "refs" / "heads" / "garbage").write_text("not an oid\n")
    with pytest.raises(GitReadError):
        reader.ref("refs/heads/garbage")
    with pytest.raises(GitReadError):
        reader.refs("refs/heads/")
    for bad in ("refs/heads/../../config", "../HEAD", "refs//x", "refs/heads/.hidden", "lower"):
        with pytest.raises(GitReadError):
            reader.ref(bad)
    (root / ".git" / "refs" / "heads" / "garbage").unlink()
    git(root, "symbolic-ref", "refs/heads/loop1", "refs/heads/loop2")
    git(root, "symbolic-ref", "refs/heads/loop2", "refs/heads/loop1")
    with pytest.raises(GitReadError):
        reader.ref("refs/heads/loop1")


# -- changed paths --------------------------------------------------------------------------------


def diff_oracle(root: Path, old: str | None, new: str | None) -> list[str]:
    return [c.path for c in objects.diff_trees(pygit2.Repository(str(root)), old, new)]


def test_changed_paths_hand_made(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"f": "f\n", "d/x": "x\n", "d/y/z": "z\n", "exe": "e\n", "keep/k": "k\n"})
    sub = make_repo(tmp_path / "sub")
    sub_head = git(sub, "rev-parse", "HEAD").strip()
    trees = [git(root, "rev-parse", "HEAD^{tree}").strip()]
    # file -> dir, dir -> file, mode change, symlink, nested deletes, a gitlink
    (root / "f").unlink()
    write(root, "f/inner", "now a dir\n")
    shutil.rmtree(root / "d")
    write(root, "d", "now a file\n")
    (root / "exe").chmod(0o755)
    os.symlink("keep/k", root / "link")
    commit_all(root, "shapes")
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{sub_head},mod")
    git(root, "commit", "-q", "-m", "gitlink")
    trees.append(git(root, "rev-parse", "HEAD^{tree}").strip())
    git(root, "rm", "-q", "-r", "keep", "f")
    git(root, "commit", "-q", "-m", "deletes")
    trees.append(git(root, "rev-parse", "HEAD^{tree}").strip())
    reader = Repo(str(root / ".git"))
    pairs = [(a, b) for a in [None, *trees] for b in [None, *trees]]
    for a, b in pairs:
        assert reader.changed_paths(a, b) == diff_oracle(root, a, b), (a, b)
    assert reader.changed_paths(trees[0], trees[1]) == ["d/x", "d/y/z", "d", "exe", "f/inner", "f", "link", "mod"]


_names = st.sampled_from(["a", "b", "a.b", "a-b", "c", "\u00e9", "Z"])
_leaf = st.tuples(st.sampled_from([0o100644, 0o100755, 0o120000, 0o160000]), st.sampled_from([b"1", b"2", b"3"]))
_trees = st.recursive(
    st.dictionaries(_names, _leaf, max_size=4),
    lambda children: st.dictionaries(_names, st.one_of(_leaf, children), max_size=4),
    max_leaves=12,
)


def _build(repo: pygit2.Repository, spec: dict[str, object]) -> str:
    entries: dict[str, objects.Entry] = {}
    for name, value in spec.items():
        if isinstance(value, dict):
            entries[name] = objects.Entry(objects.MODE_TREE, _build(repo, value))
        else:
            assert isinstance(value, tuple)
            mode, data = value
            oid = str(pygit2.hash(data)) if mode == 0o160000 else objects.write_blob(repo, data)
            entries[name] = objects.Entry(mode, oid)
    return objects.write_tree(repo, entries)


@pytest.fixture(scope="module")
def hypo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hypo") / "r"
    return make_repo(root)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=_trees, new=_trees)
def test_changed_paths_equal_diff_trees(hypo_repo: Path, old: dict[str, object], new: dict[str, object]) -> None:
    repo = pygit2.Repository(str(hypo_repo))
    a, b = _build(repo, old), _build(repo, new)
    reader = Repo(str(hypo_repo / ".git"))
    assert reader.changed_paths(a, b) == diff_oracle(hypo_repo, a, b)
    assert reader.changed_paths(None, b) == diff_oracle(hypo_repo, None, b)


def test_tree_and_lookup(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"a/b/c": "c\n", "top": "t\n"})
    reader = Repo(str(root / ".git"))
    oracle = pygit2.Repository(str(root))
    tree = str(oracle.head.peel(pygit2.Commit).tree_id)
    assert [(e.name, e.mode, e.is_tree) for e in reader.tree(tree)] == [("a", 0o40000, True), ("top", 0o100644, False)]
    entry = reader.lookup(tree, "a/b/c")
    assert entry is not None and entry.oid == str(oracle.revparse_single("HEAD:a/b/c").id)
    assert reader.lookup(tree, "a/b/nope") is None
    assert reader.lookup(tree, "top/under") is None
    assert reader.lookup(None, "top") is None
    with pytest.raises(GitReadError):
        reader.tree(entry.oid)  # a blob, not a tree


# -- damage and formats this reader refuses -------------------------------------------------------


def test_flipped_byte_in_loose_object(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"a": "some content\n"})
    oid = git(root, "rev-parse", "HEAD:a").strip()
    path = root / ".git" / "objects" / oid[:2] / oid[2:]
    raw = zlib.decompress(path.read_bytes())
    garbled = raw[:-2] + bytes([raw[-2] ^ 1]) + raw[-1:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(garbled))
    with pytest.raises(GitReadError, match="does not match"):
        Repo(str(root / ".git")).read(oid)
    data = bytearray(zlib.compress(raw))
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(GitReadError):
        Repo(str(root / ".git")).read(oid)
    path.write_bytes(zlib.compress(raw)[:-6])
    with pytest.raises(GitReadError):
        Repo(str(root / ".git")).read(oid)


def test_truncated_or_damaged_pack(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    fast_import(root, 20)
    git(root, "repack", "-q", "-a", "-d", "-f", "--depth=50")
    oids = all_oids(root)
    (pack,) = (root / ".git" / "objects" / "pack").glob("*.pack")
    original = pack.read_bytes()
    pack.chmod(0o644)
    pack.write_bytes(original[: len(original) // 2])
    reader = Repo(str(root / ".git"))
    for oid in oids:
        with pytest.raises(GitReadError):
            reader.read(oid)
    # Damage inside the pack with the trailer kept: every read is an error or the right object.
    oracle_data = {}
    pack.write_bytes(original)
    oracle = pygit2.Repository(str(root))
    for oid in oids:
        kind, data = oracle.odb.read(oid)
        oracle_data[oid] = (TYPE_NAMES[int(kind)], bytes(data))
    for spot in range(12, len(original) - 20, max(1, len(original) // 97)):
        damaged = bytearray(original)
        damaged[spot] ^= 0x5A
        pack.write_bytes(bytes(damaged))
        reader = Repo(str(root / ".git"))
        for oid in oids[::7]:
            try:
                assert reader.read(oid) == oracle_data[oid]
            except GitReadError:
                pass


def test_truncated_idx_and_idx_v1(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    git(root, "gc", "-q")
    head = git(root, "rev-parse", "HEAD").strip()
    (idx,) = (root / ".git" / "objects" / "pack").glob("*.idx")
    original = idx.read_bytes()
    idx.chmod(0o644)
    idx.write_bytes(original[:500])
    with pytest.raises(GitReadError):
        Repo(str(root / ".git")).read(head)
    idx.write_bytes(struct.pack(">256I", *([0] * 256)) + original[1032:])  # a version 1 index
    with pytest.raises(GitReadError):
        Repo(str(root / ".git")).read(head)


def test_missing_object(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    reader = Repo(str(root / ".git"))
    with pytest.raises(GitReadError, match="missing"):
        reader.read("0" * 40)
    with pytest.raises(GitReadError):
        reader.read("not-an-oid")


def test_sha256_repository_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    git(tmp_path, "init", "-q", "--object-format=sha256", str(root))
    reader = Repo(str(root / ".git"))
    with pytest.raises(GitReadError, match="sha256"):
        reader.ref("HEAD")


def test_reftable_repository_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    made = subprocess.run(["git", "init", "-q", "--ref-format=reftable", str(root)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"this git cannot make a reftable repository: {made.stderr.decode().strip()}")
    with pytest.raises(GitReadError, match="reftable"):
        Repo(str(root / ".git")).ref("HEAD")


def test_reftable_config_refused(tmp_path: Path) -> None:
    """The same refusal, from the config alone (git here may be too old to make a reftable repository)."""
    root = make_repo(tmp_path / "r")
    git(root, "config", "core.repositoryformatversion", "1")
    git(root, "config", "extensions.refStorage", "reftable")
    reader = Repo(str(root / ".git"))
    with pytest.raises(GitReadError, match="reftable"):
        reader.refs("refs/")
    config = root / ".git" / "config"
    config.write_text(config.read_text().replace("refStorage = reftable", "someFutureThing = true"))
    with pytest.raises(GitReadError, match="somefuturething"):
        Repo(str(root / ".git")).ref("HEAD")


def test_idx_whose_pack_was_removed(tmp_path: Path) -> None:
    """A repack unlinks the pack before its idx: such an idx is passed over, not read."""
    root = make_repo(tmp_path / "r")
    git(root, "gc", "-q")
    head = git(root, "rev-parse", "HEAD").strip()
    (pack,) = (root / ".git" / "objects" / "pack").glob("*.pack")
    pack.unlink()
    with pytest.raises(GitReadError, match="missing"):
        Repo(str(root / ".git")).read(head)


def test_explicit_sha1_and_files_formats_are_read(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r")
    head = git(root, "rev-parse", "HEAD").strip()  # (this git does not know refStorage yet)
    with open(root / ".git" / "config", "a") as fh:
        fh.write(
            '[core]\n\trepositoryformatversion = 1 ; v1\n[extensions]\n\tobjectFormat = "sha1"\n\trefStorage = files\n'
        )
        fh.write("\tworktreeConfig\n")
    reader = Repo(str(root / ".git"))
    assert reader.ref("HEAD") == head
