"""Git LFS contents: a run's stay its own, yours are never written through a run (issue 31, item 6;
:mod:`sandbox.store.lfsstore`).

git-lfs keeps a file's content outside git, in its storage, and hard-links what it finds beside a borrowed
object directory into that storage. Before, the host's checkout of a run stored into the run's git dir
(the agent's to write): your ``.git/lfs/objects`` files were hard-linked there, and a confined command
rewrote your stored content through the shared inode. And the host recorded the agent's LFS files into
your ``.git/lfs/objects``, which every run reads. Real bubblewrap, real git-lfs, as root and as an ordinary
user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import git, make_repo, two_clones, write

from .helpers import ok, open_run, sb, sb_as_user

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (make venv installs it)"),
    pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed (make git-lfs installs it)"),
]

COMMITTED = b"your committed LFS content\n"
UNCOMMITTED = b"your uncommitted LFS content\n"

#: Run inside: every file named as one of the given contents is opened for writing; the paths written.
REWRITE = r"""
import json, os, sys
names = set(json.loads(sys.argv[1]))
written = []
for top in ("/tmp", "/root", "/home", os.getcwd(), *sys.argv[2:]):
    for root, dirs, files in os.walk(top):
        for name in files:
            if name in names:
                path = os.path.join(root, name)
                try:
                    with open(path, "r+b") as fh:
                        fh.write(b"evil")
                    written.append(path)
                except OSError:
                    pass
print(json.dumps(sorted(set(written))))
"""

#: The agent's own git with LFS files inside: add, commit, check out the commit before and back.
OWN_LFS = (
    "set -e; printf 'agent content\\n' > agent.bin; git add agent.bin; git commit -qm agent;"
    " git checkout -q HEAD~1; test ! -e agent.bin; git checkout -q -; grep -q 'agent content' agent.bin;"
    " grep -q 'your committed' big.bin; echo own-lfs-ok"
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _lfs_repo(root: Path) -> Path:
    repo = make_repo(root, {"README.md": "hello\n"})
    git(repo, "lfs", "install", "--local")
    git(repo, "lfs", "track", "*.bin")
    write(repo, "big.bin", COMMITTED)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "lfs")
    write(repo, "new.bin", UNCOMMITTED)
    return repo


def _store(repo: Path) -> dict[str, Path]:
    """Your ``.git/lfs/objects``: content name -> file."""
    root = repo / ".git" / "lfs" / "objects"
    return {p.name: p for p in root.rglob("*") if p.is_file()}


def _inodes(directory: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_dev, p.stat().st_ino) for p in directory.rglob("*") if p.is_file() and not p.is_symlink()}


def _exec(repo: Path, run_id: str, as_user: bool, *command: str) -> subprocess.CompletedProcess[bytes]:
    return (sb_as_user if as_user else sb)("exec", run_id, "--", *command, cwd=repo)


@pytest.mark.parametrize("as_user", [False, True], ids=["root-or-you", "ordinary-user"])
def test_no_command_of_a_run_writes_your_lfs_contents(tmp_path: Path, as_user: bool) -> None:
    """No file of the run's git dir (the agent's to write) is one of your stored contents, after the host's
    checkout at start nor after your own ``git checkout`` in the worktree; a confined command that opens
    every file named as your contents writes none of yours; the agent's own git still stores, commits and
    checks out LFS files."""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    run = open_run(repo, run_id)
    wt, git_dir = Path(run.worktree), Path(run.place.git_dir)
    assert (wt / "big.bin").read_bytes() == COMMITTED and (wt / "new.bin").read_bytes() == UNCOMMITTED
    yours = _store(repo)
    assert set(yours) == {_sha(COMMITTED), _sha(UNCOMMITTED)}
    your_inodes = {(p.stat().st_dev, p.stat().st_ino) for p in yours.values()}
    assert not your_inodes & _inodes(git_dir), "a file of your LFS store is linked into the run's git dir"
    # Your own (unconfined) git in the worktree: it reads the run's config, which names the run's storage.
    (wt / "big.bin").unlink()
    git(wt, "checkout", "--", "big.bin")
    assert (wt / "big.bin").read_bytes() == COMMITTED
    assert not your_inodes & _inodes(git_dir)
    proc = _exec(repo, run_id, as_user, sys.executable, "-c", REWRITE, json.dumps(sorted(yours)), str(git_dir))
    assert proc.returncode == 0, proc.stderr.decode()
    assert {_sha(p.read_bytes()) for p in yours.values()} == set(yours), "your stored LFS content was rewritten"
    assert (repo / "big.bin").read_bytes() == COMMITTED
    own = _exec(repo, run_id, as_user, "sh", "-c", OWN_LFS)
    assert own.returncode == 0 and b"own-lfs-ok" in own.stdout, own.stderr.decode()
    assert set(_store(repo)) == set(yours)  # the agent's content is not in yours


def test_a_run_reads_no_lfs_content_of_another_run(tmp_path: Path) -> None:
    """What run b's files hold goes to run b's storage: your store lacks it and run a finds it nowhere;
    applied, it is in your tree and your store, and undone, your file is as it was."""
    repo = _lfs_repo(tmp_path / "repo")
    run_a = json.loads(ok("start", "--json", cwd=repo))["run"]
    run_b = json.loads(ok("start", "--json", cwd=repo))["run"]
    secret = b"run b's LFS secret\n"
    ok("exec", run_b, "--", "sh", "-c", 'printf "run b\'s LFS secret\\n" > secret.bin', cwd=repo)
    pointer = git(repo, "cat-file", "blob", f"refs/sandbox/{run_b}/head:secret.bin")
    assert f"oid sha256:{_sha(secret)}" in pointer, pointer
    assert _sha(secret) not in _store(repo), "run b's content was stored in your .git/lfs"
    find = (
        "import os, sys\n"
        "walks = (os.walk(top) for top in sys.argv[2:])\n"
        "hits = [os.path.join(r, n) for walk in walks for r, _d, f in walk for n in f if n == sys.argv[1]]\n"
        "print(hits)"
    )
    common = str(repo / ".git")
    found = ok("exec", run_a, "--", sys.executable, "-c", find, _sha(secret), common, "/tmp", "/root", cwd=repo)
    assert found.strip() == "[]", found
    ok("apply", run_b, cwd=repo)
    assert (repo / "secret.bin").read_bytes() == secret
    assert _sha(secret) in _store(repo)  # taken: yours now
    ok("undo", run_b, cwd=repo)
    assert not (repo / "secret.bin").exists()


def test_lfs_contents_you_take_from_a_run_check_out_in_your_git(tmp_path: Path) -> None:
    """A branch exported from a live run checks out in your git (its contents linked into your store); a
    fork starts from its source's contents; a rollback in the run writes the content back; a dropped
    run's contents join your store (a commit you picked from it may name them)."""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    first = json.loads(ok("--json", "exec", run_id, "--", "sh", "-c", "printf 'one\\n' > out.bin", cwd=repo))
    ok("checkpoint", run_id, "--label", "one", cwd=repo)
    ok("exec", run_id, "--", "sh", "-c", "printf 'two\\n' > out.bin", cwd=repo)
    assert not {_sha(b"one\n"), _sha(b"two\n")} & set(_store(repo))
    fork = json.loads(ok("--json", "fork", run_id, "--at", first["call_id"], cwd=repo))["run"]
    assert (Path(open_run(repo, fork).worktree) / "out.bin").read_bytes() == b"one\n"
    ok("branch", run_id, "exported", cwd=repo)
    assert git(repo, "show", "exported:out.bin").startswith("version https://git-lfs")
    git(repo, "-c", "lfs.fetchrecentalways=false", "checkout", "-q", "exported", "--", "out.bin")
    assert (repo / "out.bin").read_bytes() == b"two\n"
    git(repo, "checkout", "-q", "HEAD", "--", ".")
    git(repo, "rm", "-q", "--cached", "out.bin")
    (repo / "out.bin").unlink()
    ok("exec", run_id, "--", "sh", "-c", "printf 'kept\\n' > kept.bin", cwd=repo)
    wt = Path(open_run(repo, run_id).worktree)
    ok("rollback", run_id, "--files", "--to", "one", cwd=repo)
    assert (wt / "out.bin").read_bytes() == b"one\n"
    assert _sha(b"kept\n") not in _store(repo)
    ok("drop", run_id, "--force", cwd=repo)
    assert _sha(b"kept\n") in _store(repo)
    assert (Path(open_run(repo, fork).worktree) / "out.bin").read_bytes() == b"one\n"


def test_a_moved_repository_names_the_runs_lfs_storage_where_it_is(tmp_path: Path) -> None:
    """The run's config names its storage by path: moved with your repository, it names the new place."""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    moved = tmp_path / "moved"
    repo.rename(moved)
    ok("exec", run_id, "--", "true", cwd=moved)
    git_dir = Path(open_run(moved, run_id).place.git_dir)
    storage = git(git_dir.parent / "worktree", "config", "lfs.storage").strip()
    assert storage == str((moved / ".git" / "sandbox" / "runs" / run_id / "lfs").resolve())


def test_a_run_made_before_gets_its_storage_and_loses_the_links_to_your_store(tmp_path: Path) -> None:
    """A run made before its config named its storage: the host's checkout had linked your contents into
    its git dir. Its next confined command names the storage and unlinks those names (yours stay)."""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    git_dir = Path(open_run(repo, run_id).place.git_dir)
    config = git_dir / "config"
    text = config.read_text()
    ours = text[text.rindex("[lfs]\n\tstorage") :]
    config.write_text(text.replace(ours, ""))  # as a run made before wrote it
    yours = _store(repo)
    for name, path in yours.items():  # as the host's checkout linked them
        linked = git_dir / "lfs" / "objects" / name[:2] / name[2:4] / name
        linked.parent.mkdir(parents=True, exist_ok=True)
        if linked.exists():
            linked.unlink()
        os.link(path, linked)
    own = ok("exec", run_id, "--", "sh", "-c", OWN_LFS, cwd=repo)
    assert "own-lfs-ok" in own
    assert config.read_text().endswith(ours)
    your_inodes = {(p.stat().st_dev, p.stat().st_ino) for p in yours.values()}
    assert not your_inodes & _inodes(git_dir)
    assert {_sha(p.read_bytes()) for p in _store(repo).values()} == set(yours)


def test_no_git_the_sandbox_runs_downloads_from_an_lfs_url_the_agent_set(tmp_path: Path) -> None:
    """git-lfs downloads a content missing locally from ``lfs.url``, which a worktree's ``.lfsconfig`` sets:
    the agent writes one naming a listener of its own and a pointer to a content nowhere here, then a
    rollback makes the host write that pointer back, and your own git checks it out in the worktree. No
    connection is made; the pointer is written, as a checkout without the content leaves it."""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    hits: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    hits.append(conn.recv(200))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{'ab' * 32}\nsize 12\n"
    lfsconfig = f'[lfs]\n\turl = http://127.0.0.1:{port}/lfs\n[remote "origin"]\n\tlfsurl = http://127.0.0.1:{port}/o\n'
    wt = Path(open_run(repo, run_id).worktree)
    ok("exec", run_id, "--", "sh", "-c", "cat > .lfsconfig", cwd=repo, input=lfsconfig.encode())
    commit = "cat > p.bin; git add p.bin .lfsconfig; git commit -qm pointer"  # the agent's own git has it too
    ok("exec", run_id, "--", "sh", "-c", commit, cwd=repo, input=pointer.encode())
    ok("checkpoint", run_id, "--label", "pointer", cwd=repo)
    ok("exec", run_id, "--", "sh", "-c", "printf 'real content\\n' > p.bin", cwd=repo)
    try:
        ok("rollback", run_id, "--files", "--to", "pointer", cwd=repo)
        (wt / "p.bin").unlink()
        git(wt, "checkout", "--", "p.bin")  # your own git in the worktree reads the run's config: no download
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert (wt / "p.bin").read_text() == pointer
    assert hits == [], hits


_LFSCONFIG_TRAPS = {
    "fifo": "mkfifo .lfsconfig",
    # git-lfs reads .lfsconfig with `git config --includes`: an absolute include is opened by name.
    "include": "mkfifo trap; printf '[include]\\n\\tpath = %s/trap\\n' \"$PWD\" > .lfsconfig",
}


@pytest.mark.parametrize("trap", sorted(_LFSCONFIG_TRAPS))
def test_a_fifo_for_a_file_git_lfs_reads_does_not_hang_the_host(tmp_path: Path, trap: str) -> None:
    """git-lfs reads the worktree's ``.lfsconfig`` by name, and what it ``[include]``s: one the agent made
    a FIFO (after any check the host makes: it writes there while the host records), or an ``.lfsconfig``
    including a FIFO of the worktree by its absolute path, blocked the host's clean of its next LFS file
    for ever. The driver runs in a work tree of the host's, with copies of the ``.gitattributes`` read by
    descriptor and none of the agent's ``.lfsconfig``: the call ends and its LFS file is recorded as the
    pointer your git would store. (A ``.gitattributes`` FIFO is refused before any driver runs:
    sandbox.store.gitfiles.)"""
    repo = _lfs_repo(tmp_path / "repo")
    run_id = json.loads(ok("start", "--json", cwd=repo))["run"]
    script = f"{_LFSCONFIG_TRAPS[trap]}; mkdir -p sub; printf 'x\\n' > sub/stuck.bin"
    proc = sb("exec", run_id, "--", "sh", "-c", script, cwd=repo, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    recorded = git(repo, "cat-file", "blob", f"refs/sandbox/{run_id}/head:sub/stuck.bin")
    assert recorded.startswith("version https://git-lfs") and _sha(b"x\n") in recorded, recorded


def test_a_checkout_of_the_agents_tree_opens_nothing_its_lfsconfig_names(tmp_path: Path) -> None:
    """The host checks out a tree the agent wrote when it forks a run, and when it makes a missing worktree
    again (``resume``; a fetched run's first command takes the same path). git-lfs read that tree's
    ``.lfsconfig`` with ``git config --includes``: one including a FIFO of another run's worktree by its
    path blocked both for ever. Your git-lfs driver now runs against your repository with an empty work
    tree of the host's: they end, the LFS files have their contents, and your store gains none of the run's."""
    repo = _lfs_repo(tmp_path / "repo")
    run_a = json.loads(ok("start", "--json", cwd=repo))["run"]
    run_b = json.loads(ok("start", "--json", cwd=repo))["run"]
    trap = Path(open_run(repo, run_b).worktree) / "trap"
    ok("exec", run_b, "--", "mkfifo", str(trap), cwd=repo)
    script = f"printf '[include]\\n\\tpath = {trap}\\n' > .lfsconfig; printf 'agent\\n' > out.bin"
    ok("exec", run_a, "--", "sh", "-c", script, cwd=repo)
    before = set(_store(repo))

    forking = sb("--json", "fork", run_a, cwd=repo, timeout=60)
    assert forking.returncode == 0, forking.stderr.decode()
    fork = json.loads(forking.stdout)["run"]
    forked = Path(open_run(repo, fork).worktree)
    assert (forked / "out.bin").read_bytes() == b"agent\n"
    assert (forked / "big.bin").read_bytes() == COMMITTED

    worktree = Path(open_run(repo, run_a).worktree)
    shutil.rmtree(worktree)
    resuming = sb("resume", run_a, cwd=repo, timeout=60)
    assert resuming.returncode == 0, resuming.stderr.decode()
    assert (worktree / "out.bin").read_bytes() == b"agent\n"
    assert (worktree / "big.bin").read_bytes() == COMMITTED
    assert (worktree / ".lfsconfig").read_text().startswith("[include]")  # the agent's file, as it wrote it
    assert set(_store(repo)) == before


def test_a_fetched_runs_first_command_opens_nothing_its_lfsconfig_names(tmp_path: Path) -> None:
    """A run fetched from elsewhere gets its worktree here at its first command: a checkout of its head, then
    its agent's git put back (``reset --mixed``: the index refresh cleans the files the agent had not
    committed). Both ran your git-lfs on the run's ``.lfsconfig``, whose ``[include]`` named a FIFO of this
    machine (``/dev/tty`` waits as well): the command hung. It now ends and the files are the run's."""
    rules = "*.bin filter=lfs diff=lfs merge=lfs -text\n"
    a, b, _ = two_clones(tmp_path, {"README.md": "hello\n", ".gitattributes": rules})
    git(b, "lfs", "install", "--local")
    trap = tmp_path / "trap"
    os.mkfifo(trap)
    run_id = json.loads(ok("start", "--json", cwd=a))["run"]
    script = (
        f"printf '[include]\\n\\tpath = {trap}\\n' > .lfsconfig && printf 'one\\n' > out.bin && git add -A && "
        "git -c user.name=agent -c user.email=agent@example.com commit -qm one && printf 'two\\n' > out.bin"
    )
    ok("exec", run_id, "--", "sh", "-c", script, cwd=a)
    ok("push", run_id, "--with-agent-refs", cwd=a)
    ok("fetch", cwd=b)
    first = sb("exec", run_id, "--", "cat", "out.bin", cwd=b, timeout=60)
    assert first.returncode == 0, first.stderr.decode()
    assert first.stdout == b"two\n"
    worktree = Path(open_run(b, run_id).worktree)
    assert git(worktree, "log", "-1", "--format=%s").strip() == "one"  # the agent's own commit came along
