"""Nothing the agent puts in the run's own git dir hangs or crashes ``status``, ``status --json`` or
``log``: each answers, showing the agent's git or saying nothing of it (unreadable).

The run's git dir is the agent's to write. Each trap below is made for real in a real run's git
dir (real FIFOs, a bound unix socket, symlinks to devices, sparse files, zlib bombs, hand-written
objects, alternates that loop), then the real ``sandbox`` runs with a timeout: a hang fails the
test instead of hanging the suite. The pygit2 walk that came before hung for ever on the FIFO, the
shallow and grafts traps and crashed on a commit with an unknown encoding
(tests/fast/test_revwalk.py covers the encodings).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.run.run import Run
from tests.conftest import git, sandbox_cmd, write
from tests.hook_fixtures import start_run

#: A trap: (the run's git dir, the agent's commits oldest first, the snapshot) -> None.
Trap = Callable[[Path, list[str], str], None]


def _loose(git_dir: Path, oid: str) -> Path:
    return git_dir / "objects" / oid[:2] / oid[2:]


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.chmod(0o644)
        path.unlink()
    make(path)


def _fifo_at_head(g: Path, ids: list[str], base: str) -> None:
    _replace(_loose(g, ids[-1]), os.mkfifo)


def _fifo_at_parent(g: Path, ids: list[str], base: str) -> None:
    _replace(_loose(g, ids[0]), os.mkfifo)


def _symlink_to_fifo(g: Path, ids: list[str], base: str) -> None:
    os.mkfifo(g / "trap-fifo")
    _replace(_loose(g, ids[-1]), lambda p: p.symlink_to(g / "trap-fifo"))


def _socket_at_head(g: Path, ids: list[str], base: str) -> None:
    def bind(path: Path) -> None:
        # Bound at a short path (the socket path limit is ~108 bytes), then moved into place.
        short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(short))
        _SOCKETS.append(sock)
        os.rename(short, path)
        short.parent.rmdir()

    _replace(_loose(g, ids[-1]), bind)


_SOCKETS: list[socket.socket] = []


def _dev_zero_at_head(g: Path, ids: list[str], base: str) -> None:
    _replace(_loose(g, ids[-1]), lambda p: p.symlink_to("/dev/zero"))


def _directory_at_head(g: Path, ids: list[str], base: str) -> None:
    _replace(_loose(g, ids[-1]), lambda p: p.mkdir())


def _alternates_to_fifos(g: Path, ids: list[str], base: str) -> None:
    """An objects directory of FIFOs named first in alternates: the snapshot's id, a pack index."""
    trap = g / "trap-objects"
    for oid in (base, ids[0]):
        _replace(_loose(trap, oid).parent.parent / oid[:2] / oid[2:], os.mkfifo)
    (trap / "pack").mkdir()
    os.mkfifo(trap / "pack" / "pack-trap.idx")
    os.mkfifo(trap / "pack" / "pack-trap.pack")
    _loose(g, ids[0]).unlink()  # found nowhere but in the trap
    alternates = g / "objects" / "info" / "alternates"
    alternates.write_text(f"{trap}\n" + alternates.read_text())


def _alternates_loop(g: Path, ids: list[str], base: str) -> None:
    """Alternates naming the run's own store and a directory that names it back."""
    other = g / "loop-objects"
    (other / "info").mkdir(parents=True)
    (other / "info" / "alternates").write_text(f"{g / 'objects'}\n")
    alternates = g / "objects" / "info" / "alternates"
    alternates.write_text(f"{g / 'objects'}\n{other}\n" + alternates.read_text())


def _alternates_missing(g: Path, ids: list[str], base: str) -> None:
    """5,000 alternates that do not exist (skipped, as git skips them)."""
    alternates = g / "objects" / "info" / "alternates"
    alternates.write_text("".join(f"{g}/nowhere-{i}\n" for i in range(5000)) + alternates.read_text())


def _alternates_many(g: Path, ids: list[str], base: str) -> None:
    """500 alternates that exist: each would be searched for every object (refused past 64)."""
    for i in range(500):
        (g / f"empty-{i}").mkdir()
    alternates = g / "objects" / "info" / "alternates"
    alternates.write_text("".join(f"{g}/empty-{i}\n" for i in range(500)) + alternates.read_text())


def _sparse(size: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(size)

    return make


def _huge_loose(g: Path, ids: list[str], base: str) -> None:
    _replace(_loose(g, ids[-1]), _sparse(8 << 30))


def _huge_packed_refs(g: Path, ids: list[str], base: str) -> None:
    _replace(g / "packed-refs", _sparse(1 << 30))


def _huge_alternates(g: Path, ids: list[str], base: str) -> None:
    _replace(g / "objects" / "info" / "alternates", _sparse(1 << 30))


def _zlib_bomb(g: Path, ids: list[str], base: str) -> None:
    """A loose object of 64 KiB that inflates to 64 MiB (its id does not match either)."""
    size = 64 << 20
    packer = zlib.compressobj(9)
    data = packer.compress(b"commit %d\0" % size) + packer.compress(b"\0" * size) + packer.flush()
    _replace(_loose(g, ids[-1]), lambda p: p.write_bytes(data))


def _delta_bomb(g: Path, ids: list[str], base: str) -> None:
    """A hand-made pack where the agent's head commit is the top of 5,000 deltas, each a few bytes
    that copy the 8 MB before it: 40 GB of copying before the id could be checked."""
    import hashlib
    import struct

    size = 8 << 20

    def header(kind: int, n: int) -> bytes:
        out = [(kind << 4) | (n & 15)]
        n >>= 4
        while n:
            out[-1] |= 0x80
            out.append(n & 0x7F)
            n >>= 7
        return bytes(out)

    def distance(n: int) -> bytes:
        out = [n & 0x7F]
        n >>= 7
        while n:
            n -= 1
            out.insert(0, 0x80 | (n & 0x7F))
            n >>= 7
        return bytes(out)

    def varint(n: int) -> bytes:
        out = []
        while True:
            out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
            n >>= 7
            if not n:
                return bytes(out)

    delta = varint(size) + varint(size) + bytes([0x80 | 0x40, size >> 16])  # copy 8 MB from offset 0
    depth = 5000
    body = bytearray(b"PACK" + struct.pack(">II", 2, depth + 1))
    positions = [len(body)]
    body += header(1, size) + zlib.compress(b"\0" * size)
    packed_delta = zlib.compress(delta)
    for _ in range(depth):
        here = len(body)
        body += header(6, len(delta)) + distance(here - positions[-1]) + packed_delta
        positions.append(here)
    pack_sum = hashlib.sha1(body).digest()
    body += pack_sum
    top = bytes.fromhex(ids[-1])
    fanout = b"".join(struct.pack(">I", 0 if i < top[0] else 1) for i in range(256))
    idx = b"\377tOc" + struct.pack(">I", 2) + fanout + top + struct.pack(">I", 0) + struct.pack(">I", positions[-1])
    idx += pack_sum
    idx += hashlib.sha1(idx).digest()
    (g / "objects" / "pack" / "pack-bomb.pack").write_bytes(bytes(body))
    (g / "objects" / "pack" / "pack-bomb.idx").write_bytes(idx)
    _loose(g, ids[-1]).unlink()


def _corrupt(g: Path, ids: list[str], base: str) -> None:
    path = _loose(g, ids[-1])
    body = zlib.decompress(path.read_bytes()).replace(b"agent commit", b"agent cOmmit")
    _replace(path, lambda p: p.write_bytes(zlib.compress(body)))


def _cycle(g: Path, ids: list[str], base: str) -> None:
    """Hand-written objects that name each other as parents (at paths their content does not hash to)."""
    tree = git(g, "rev-parse", f"{ids[0]}^{{tree}}").strip()
    for me, parent in ((ids[-1], ids[0]), (ids[0], ids[-1])):
        body = f"tree {tree}\nparent {parent}\nauthor A <a@e> 1 +0000\ncommitter A <a@e> 1 +0000\n\nloop\n"
        raw = b"commit %d\0%s" % (len(body), body.encode())
        _replace(_loose(g, me), lambda p, raw=raw: p.write_bytes(zlib.compress(raw)))  # type: ignore[misc]


def _graft_cycle(g: Path, ids: list[str], base: str) -> None:
    """info/grafts makes a true cycle (git reads grafts; so did libgit2, so does the walk)."""
    (g / "info").mkdir(exist_ok=True)
    (g / "info" / "grafts").write_text(f"{ids[-1]} {ids[0]}\n{ids[0]} {ids[-1]}\n")


def _fifo_at(rel: str) -> Trap:
    def trap(g: Path, ids: list[str], base: str) -> None:
        _replace(g / rel, os.mkfifo)

    return trap


def _symref_loop(g: Path, ids: list[str], base: str) -> None:
    (g / "refs" / "heads" / "a").write_text("ref: refs/heads/b\n")
    (g / "refs" / "heads" / "b").write_text("ref: refs/heads/a\n")


def _garbage_ref(g: Path, ids: list[str], base: str) -> None:
    (g / "refs" / "heads" / "garbage").write_bytes(b"\xff not a ref\n")


def _deep_tags(g: Path, ids: list[str], base: str) -> None:
    """Annotated tags of annotated tags, 150 deep."""
    target, kind = ids[-1], "commit"
    for i in range(150):
        body = f"object {target}\ntype {kind}\ntag t{i}\ntagger A <a@e> 1 +0000\n\nt\n"
        made = subprocess.run(
            ["git", "hash-object", "-w", "-t", "tag", "--stdin"],
            cwd=g,
            input=body.encode(),
            capture_output=True,
            check=True,
        )
        target = made.stdout.decode().strip()
        kind = "tag"
    (g / "refs" / "tags" / "deep").write_text(target + "\n")


TRAPS: dict[str, Trap] = {
    "fifo-at-head-commit": _fifo_at_head,
    "fifo-at-parent-commit": _fifo_at_parent,
    "symlink-to-fifo": _symlink_to_fifo,
    "socket-at-commit": _socket_at_head,
    "symlink-to-dev-zero": _dev_zero_at_head,
    "directory-at-commit": _directory_at_head,
    "alternates-to-fifos": _alternates_to_fifos,
    "alternates-loop": _alternates_loop,
    "alternates-5000-missing-dirs": _alternates_missing,
    "alternates-500-dirs": _alternates_many,
    "sparse-8g-loose-object": _huge_loose,
    "sparse-1g-packed-refs": _huge_packed_refs,
    "sparse-1g-alternates": _huge_alternates,
    "zlib-bomb-64m": _zlib_bomb,
    "delta-chain-bomb-40g": _delta_bomb,
    "corrupt-object": _corrupt,
    "commit-cycle-hand-written": _cycle,
    "graft-cycle": _graft_cycle,
    "fifo-shallow": _fifo_at("shallow"),
    "fifo-grafts": _fifo_at("info/grafts"),
    "fifo-commit-graph": _fifo_at("objects/info/commit-graph"),
    "fifo-stash-reflog": _fifo_at("logs/refs/stash"),
    "symref-loop": _symref_loop,
    "garbage-ref": _garbage_ref,
    "tags-150-deep": _deep_tags,
}

#: Traps the run's git still reads past (the agent's git is shown): the rest are unreadable.
READABLE = {
    "alternates-loop",
    "alternates-5000-missing-dirs",
    "symref-loop",
    "garbage-ref",
    "graft-cycle",
    "fifo-commit-graph",
    "tags-150-deep",
}


def agent_run(repo: Path) -> tuple[Run, list[str]]:
    """A run with a recorded call, whose agent then made two commits on its branch: (the run, their ids)."""
    run = start_run(repo)
    with run.tool_call("write_file", {"path": "notes.md"}) as call:  # log shows the agent's git after calls
        call.write("notes.md", "a call\n")
    worktree = Path(run.worktree)
    ids = []
    for i in range(2):
        write(worktree, "agent.txt", f"agent {i}\n")
        git(worktree, "add", "agent.txt")
        git(worktree, "commit", "-q", "-m", f"agent commit {i}")
        ids.append(git(worktree, "rev-parse", "HEAD").strip())
    return run, ids


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_status_and_log_answer_whatever_the_agent_put_in_its_git_dir(repo: Path, name: str) -> None:
    run, ids = agent_run(repo)
    git_dir = Path(run.git_dir)
    before = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo, timeout=60).stdout)["agent_git"]
    assert before is not None and before["commit_count"] == 2
    TRAPS[name](git_dir, ids, run.base)
    try:
        for args in (["status", run.run_id, "--json"], ["status", run.run_id], ["log", run.run_id]):
            # Twice: the first may take the full path (no sealed cache), the second the fast one.
            for _ in range(2):
                done = sandbox_cmd(*args, cwd=repo, timeout=60)  # raises subprocess.TimeoutExpired if it hangs
                assert done.returncode == 0, (name, args, done.stderr.decode())
                assert b"Traceback" not in done.stderr, (name, args, done.stderr.decode())
        shown = json.loads(sandbox_cmd("status", run.run_id, "--json", cwd=repo, timeout=60).stdout)["agent_git"]
        logged = sandbox_cmd("log", run.run_id, cwd=repo, timeout=60).stdout.decode()
        if name in READABLE:
            assert shown is not None and "agent git:" in logged, name
        else:
            assert shown is None and "agent git:" not in logged, (name, shown)
    finally:
        for sock in _SOCKETS:
            sock.close()
        _SOCKETS.clear()


_TRUNCATE = """
import os, sys
from sandbox.fast import gitread, odb
repo = gitread.Repo(sys.argv[1], mapped=sys.argv[2] == "mapped")
first, last = sys.argv[3], sys.argv[4]
repo.read(first)  # the pack is open now
pack = [p for p in os.listdir(os.path.join(sys.argv[1], "objects", "pack")) if p.endswith(".pack")][0]
os.truncate(os.path.join(sys.argv[1], "objects", "pack", pack), 4096)  # what an agent can do meanwhile
try:
    repo.read(last)
except odb.GitReadError as exc:
    print("unreadable:", exc)
"""


def test_a_pack_truncated_while_it_is_read(tmp_path: Path) -> None:
    """The run's git is read with pread, never mapped: a mapped pack truncated under the reader
    kills it with SIGBUS (shown here in a child process); read with pread, it is unreadable."""
    import sys

    git_dir = tmp_path / "repo.git"
    git(tmp_path, "init", "-q", "--bare", str(git_dir))
    lines = []
    for i in range(300):
        blob = os.urandom(600).hex()  # incompressible: the pack grows past a few pages
        lines += [f"commit refs/heads/main\ncommitter C <c@e> {1_600_000_000 + i} +0000\ndata 2\nc"]
        lines += [f"M 644 inline f{i}\ndata {len(blob)}\n{blob}"]
    subprocess.run(["git", "fast-import", "--quiet"], cwd=git_dir, input="\n".join(lines).encode() + b"\n", check=True)
    for mode, expect in (("pread", 0), ("mapped", -7)):  # -7: killed by SIGBUS
        git(git_dir, "gc", "-q")  # a fresh, whole pack for each
        (idx,) = (git_dir / "objects" / "pack").glob("*.idx")
        listed = subprocess.run(["git", "show-index"], stdin=idx.open("rb"), capture_output=True, check=True)
        by_offset = sorted((int(line.split()[0]), line.split()[1]) for line in listed.stdout.decode().splitlines())
        first, last = by_offset[0][1], by_offset[-1][1]  # the last object lies past the truncation
        done = subprocess.run(
            [sys.executable, "-c", _TRUNCATE, str(git_dir), mode, first, last],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == expect, (mode, done.returncode, done.stderr.decode())
        if mode == "pread":
            assert b"unreadable:" in done.stdout
        subprocess.run(["rm", "-rf", str(git_dir / "objects" / "pack")], check=True)
        subprocess.run(
            ["git", "fast-import", "--quiet"], cwd=git_dir, input="\n".join(lines).encode() + b"\n", check=True
        )
