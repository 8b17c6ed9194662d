"""Generated repositories for the benchmarks, cached under bench/work/ by size.

A repository of N files has 2 KB text files, 10 per directory, in a tree of directories with 10
entries each (100k files: 10,000 leaf directories four levels deep), committed in one pack by
``git fast-import``, checked out, with one uncommitted edit and one untracked file, and an index
refreshed a second after checkout so that no entry is racily clean (a user's index is normally
stat-fresh).

Where the benchmark runs as root, everything lives on a journaled ext4 file system in a loop-mounted
image (bench/work/fs.img, mounted on bench/work/mnt for the run and unmounted after). The root file
system of the development machines is ext4 without a journal, where creating files right after
deleting many is slow for minutes; benchmarks that create and delete worktrees in a loop would
measure that instead of the code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
IMAGE = os.path.join(WORK, "fs.img")
MOUNT = os.path.join(WORK, "mnt")
GEN_VERSION = "2"
FILE_SIZE = 2048
PER_DIR = 10
USER_EDIT_INDEX = 0
UNTRACKED = "untracked-notes.txt"

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
    "return",
    "value",
    "import",
    "module",
    "class",
    "def",
    "self",
    "data",
    "path",
    "tree",
    "index",
]
_FILLER = " ".join(_WORDS[(i * 7 + i // 13) % len(_WORDS)] + ("\n" if i % 11 == 10 else "") for i in range(1200))


# -- the work file system --------------------------------------------------------------------------


def _mounted_at(path: str) -> str | None:
    real = os.path.realpath(path)
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) > 2 and parts[1] == real:
                return parts[2]
    return None


def fs_type(path: str) -> str:
    """The type of the file system holding ``path`` (from /proc/mounts), with journal info for ext4."""
    real = os.path.realpath(path)
    best, best_type, best_dev = "", "?", ""
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            dev, mnt, kind = line.split()[:3]
            if (real + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
                best, best_type, best_dev = mnt, kind, dev
    if best_type == "ext4":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            target = IMAGE if best == os.path.realpath(MOUNT) else best_dev
            out = subprocess.run(["dumpe2fs", "-h", target], capture_output=True, text=True, check=False).stdout
            features = next((ln for ln in out.splitlines() if ln.startswith("Filesystem features")), "")
            best_type += " (journaled)" if "has_journal" in features else " (no journal)"
    return best_type


@contextlib.contextmanager
def work_root(kind: str) -> Iterator[str]:
    """The directory to put repositories in: the loop mount (``loop``), or bench/work (``plain``).

    ``auto`` picks ``loop`` when running as root with mkfs.ext4 available. A mount made here is
    undone on exit; the image file stays, so the cached repositories survive to the next run.
    """
    os.makedirs(WORK, exist_ok=True)
    if kind == "auto":
        kind = "loop" if os.geteuid() == 0 and shutil.which("mkfs.ext4") else "plain"
    if kind == "plain":
        root = os.path.join(WORK, "plain")
        os.makedirs(root, exist_ok=True)
        yield root
        return
    mounted_here = False
    if _mounted_at(MOUNT) is None:
        if not os.path.exists(IMAGE):
            # Sparse: only what is written takes space. Enough inodes for the 300k set, three copies.
            subprocess.run(["truncate", "-s", "32G", IMAGE], check=True)
            subprocess.run(
                ["mkfs.ext4", "-q", "-N", "2500000", "-E", "lazy_itable_init=0,lazy_journal_init=0", IMAGE],
                check=True,
            )
        os.makedirs(MOUNT, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", IMAGE, MOUNT], check=True)
        mounted_here = True
    try:
        yield MOUNT
    finally:
        if mounted_here:
            subprocess.run(["sync"], check=False)
            # pygit2 keeps pack files of the repositories mapped until this process exits, so a
            # plain umount finds the file system busy; a lazy one completes at exit.
            if subprocess.run(["umount", MOUNT], check=False, capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", MOUNT], check=False)


# -- generated repositories ------------------------------------------------------------------------


def file_path(size: int, i: int) -> str:
    """The path of tracked file ``i`` in the repository of ``size`` files."""
    ndirs = max(1, -(-size // PER_DIR))
    width = len(str(ndirs - 1))
    digits = str(i // PER_DIR).zfill(width)
    return "/".join("d" + c for c in digits) + f"/file{i:06d}.txt"


def file_data(path: str, i: int, salt: str = "") -> bytes:
    """2 KB of text, different for every path (and salt)."""
    header = f"# {path} {i} {salt}\n"
    offset = (i * 37) % 1000
    body = _FILLER[offset : offset + FILE_SIZE - len(header)]
    return (header + body).encode()


def pick(size: int, k: int) -> list[str]:
    """``k`` tracked files spread evenly over the tree (never the user-edited one)."""
    step = max(1, size // k)
    return [file_path(size, (j * step + 3) % size) for j in range(k)]


@dataclass
class Repo:
    """A generated repository."""

    size: int
    path: str
    scratch: str

    @property
    def user_edit(self) -> str:
        return file_path(self.size, USER_EDIT_INDEX)


def git(args: list[str], cwd: str, env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:
    """Run git, raise on failure, return stdout."""
    full = dict(os.environ)
    full.update(env or {})
    proc = subprocess.run(["git", *args], cwd=cwd, env=full, input=input, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def ensure(root: str, size: int, log: object = print) -> Repo:
    """The repository of ``size`` files under ``root``, generated unless cached and clean."""
    path = os.path.join(root, f"repo-{size}")
    scratch = os.path.join(root, f"scratch-{size}")
    repo = Repo(size, path, scratch)
    if os.path.isdir(scratch):
        shutil.rmtree(scratch)
    os.makedirs(scratch)
    marker = os.path.join(path, ".git", "bench-ready")
    try:
        with open(marker, encoding="utf-8") as fh:
            ready = fh.read().strip() == GEN_VERSION
    except OSError:
        ready = False
    if ready and _tidy(repo):
        return repo
    t0 = time.perf_counter()
    if os.path.exists(path):
        shutil.rmtree(path)
    _generate(repo)
    with open(marker, "w", encoding="utf-8") as fh:
        fh.write(GEN_VERSION + "\n")
    log(f"  generated {size}-file repository in {time.perf_counter() - t0:.1f} s")  # type: ignore[operator]
    return repo


def _generate(repo: Repo) -> None:
    path, size = repo.path, repo.size
    os.makedirs(path)
    git(["init", "-q", "-b", "main", path], cwd=os.path.dirname(path))
    # No automatic gc in the middle of a measurement.
    git(["config", "gc.auto", "0"], cwd=path)
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=path, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    message = f"generated {size} files"
    head = (
        f"commit refs/heads/main\ncommitter Bench <bench@example.com> 1767225600 +0000\n"
        f"data {len(message)}\n{message}\n"
    ).encode()
    proc.stdin.write(head)
    batch: list[bytes] = []
    for i in range(size):
        rel = file_path(size, i)
        data = file_data(rel, i)
        batch.append(b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(data), data))
        if len(batch) >= 2000:
            proc.stdin.write(b"".join(batch))
            batch.clear()
    proc.stdin.write(b"".join(batch) + b"\n")
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("git fast-import failed")
    git(["-c", "checkout.workers=0", "reset", "-q", "--hard", "main"], cwd=path)
    with open(os.path.join(path, repo.user_edit), "ab") as fh:
        fh.write(b"an uncommitted edit by the user\n")
    with open(os.path.join(path, UNTRACKED), "wb") as fh:
        fh.write(b"an untracked file of the user\n")
    # Checked-out files are racily clean for a second; refresh after it so the index is stat-fresh.
    time.sleep(1.1)
    git(["update-index", "-q", "--refresh"], cwd=path, env={"GIT_OPTIONAL_LOCKS": "1"})
    git(["status", "--porcelain"], cwd=path)


def _tidy(repo: Repo) -> bool:
    """Remove what an earlier (perhaps interrupted) benchmark left; False when the repo must be rebuilt."""
    path = repo.path
    refs = git(["for-each-ref", "--format=%(refname)", "refs/sandbox/"], cwd=path).decode().split()
    if refs:
        git(["update-ref", "--stdin"], cwd=path, input="".join(f"delete {r}\n" for r in refs).encode())
    state = os.path.join(path, ".git", "sandbox")
    if os.path.isdir(state):
        subprocess.run(["chmod", "-R", "u+w", state], check=False)
        shutil.rmtree(state)
    # The runs' hub named in the alternates went with it (git would complain of it at every command).
    alternates = os.path.join(path, ".git", "objects", "info", "alternates")
    if os.path.exists(alternates):
        os.remove(alternates)
    git(["worktree", "prune"], cwd=path)
    status = git(["status", "--porcelain", "--untracked-files=all"], cwd=path).decode().splitlines()
    expected = sorted([f" M {repo.user_edit}", f"?? {UNTRACKED}"])
    if sorted(status) != expected:
        return False
    loose = int(git(["count-objects"], cwd=path).decode().split()[0])
    if loose > 20000:
        git(["prune", "--expire=now"], cwd=path)
    return True
