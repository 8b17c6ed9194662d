"""The snapshot's ``git add -A`` into a copy of the user's index, started in the background.

The first half of :mod:`sandbox.store.snapshot`, in the standard library only: ``sandbox start`` spawns it
(with the checkout of the user's HEAD, :mod:`sandbox.run.prestart`) before it imports pygit2 and pydantic,
so the add runs while the process imports them. The copy means the user's real index is only ever read;
the copy lives in the run's scratch directory, where ``sandbox gc`` finds it if the start is killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from sandbox import faults
from sandbox.store.gitcli import git, spawn, wait

TYPE_CHECKING = False  # no typing at run time: sandbox start's early part (sandbox.run.prestart)
if TYPE_CHECKING:
    import subprocess

faults.POINTS.update({"start.snapshot.after_add"})

#: The copy of the user's index, in the run's scratch directory.
TEMP_INDEX = "snapshot-index"
_ADD = ["add", "-A", "--ignore-errors", "--", "."]


class Adding:
    """A ``git add -A`` running into a copy of the user's index; :meth:`tree` finishes it."""

    def __init__(
        self, workdir: str, temp_index: str, proc: subprocess.Popen[bytes], objects_env: dict[str, str]
    ) -> None:
        self.workdir = workdir
        self.temp_index = temp_index
        self.proc = proc
        self.objects_env = objects_env

    def tree(self) -> tuple[str, list[str]]:
        """Wait for the add, write its tree: (the tree's id, the nested repositories and gitlinks in it).
        The copied index is removed either way."""
        env = {"GIT_INDEX_FILE": self.temp_index, **self.objects_env}
        try:
            said = wait(_ADD, self.proc)
            faults.point("start.snapshot.after_add")
            tree = git(["write-tree"], cwd=self.workdir, env=env).stdout.decode().strip()
            submodules = _embedded(said)
            if os.path.exists(os.path.join(self.workdir, ".gitmodules")):
                # Listing the whole index costs O(repository): only where submodules are declared.
                listing = git(["ls-files", "-s", "-z"], cwd=self.workdir, env=env).stdout
                submodules += [
                    os.fsdecode(rec.split(b"\t", 1)[1]) for rec in listing.split(b"\0") if rec.startswith(b"160000 ")
                ]
        finally:
            self.stop()
        return tree, sorted(set(submodules))

    def stop(self) -> None:
        """Stop the add if it still runs, and remove the copied index."""
        if self.proc.returncode is None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.temp_index)


def begin(workdir: str, git_dir: str, scratch_dir: str, objects_env: dict[str, str] | None = None) -> Adding:
    """Copy the index of the user's git dir ``git_dir`` into ``scratch_dir`` and start ``git add -A`` of the
    working tree ``workdir`` into the copy (in the background). ``objects_env``: where its objects go
    (a run's store, :func:`sandbox.store.runstore.git_env`)."""
    objects_env = dict(objects_env or {})
    os.makedirs(scratch_dir, exist_ok=True)
    temp_index = os.path.join(scratch_dir, TEMP_INDEX)
    real_index = os.path.join(git_dir, "index")
    try:
        if os.path.exists(real_index):
            shutil.copyfile(real_index, temp_index)
        # Its stderr is read by a thread while it runs (``progress``), so a chatty add never fills the pipe.
        proc = spawn(_ADD, cwd=workdir, env={"GIT_INDEX_FILE": temp_index, **objects_env}, progress=_ignore)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_index)
        raise
    return Adding(workdir, temp_index, proc, objects_env)


def _ignore(_line: str) -> None:
    pass


def _embedded(stderr: bytes) -> list[str]:
    """Nested repositories ``git add`` took in as gitlinks (it warns about each one)."""
    out = []
    marker = "adding embedded git repository: "
    for line in stderr.decode(errors="surrogateescape").splitlines():
        if marker in line:
            out.append(line.split(marker, 1)[1].strip())
    return out
