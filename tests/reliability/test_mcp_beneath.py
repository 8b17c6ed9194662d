"""The MCP file tools never read or write outside the worktree while a directory on the way flips.

The ``sandbox mcp`` server is unconfined; the model's own ``run_command`` runs in the same worktree
at the same time. A check of the path followed by an open of it lets a directory turned into a
symlink between the two lead the open out (issue 20, item 6): ``read_file`` returned a file of the
host's ``/tmp``. Here a thread stands for that command, flipping ``d`` between a directory and a
symlink to a directory outside, while other threads call ``read_file``, ``write_file``,
``edit_file``, ``list_files`` and ``search`` through it (a bounded number of times each).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import make_repo

from sandbox.errors import SandboxError
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store import beneath
from sandbox.store.project import Project

SECONDS = 3.0
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def workspace(tmp_path: Path) -> Workspace:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    return ws


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_a_directory_flipped_to_a_symlink_never_leads_a_tool_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolver: str
) -> None:
    if resolver == "openat2" and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(beneath, "_HAVE_OPENAT2", resolver == "openat2")  # "walk": as on a kernel without it
    ws = workspace(tmp_path)
    assert ws.run is not None
    wt = Path(ws.run.worktree)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("SECRET outside\n")
    (wt / "d").mkdir()
    (wt / "d" / "f").write_text("inside\n")
    stop = threading.Event()
    flips = [0]

    swap = tmp_path / "swap"
    swap.symlink_to(outside)
    libc = ctypes.CDLL(None, use_errno=True)

    def flipper() -> None:  # what the model's command does (``mv --exchange``), as fast as it can
        d, other = os.fsencode(wt / "d"), os.fsencode(swap)
        while not stop.is_set():
            if libc.renameat2(AT_FDCWD, d, AT_FDCWD, other, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            flips[0] += 1

    answers: list[str] = []
    counts = {"read": 0, "write": 0, "other": 0}

    def reader() -> None:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            for call in (
                lambda: ws.read_file("d/f"),
                lambda: ws.list_files("d"),
                lambda: ws.list_files(".", pattern="**/f"),
                lambda: ws.search("SECR.T", path="d"),
            ):
                try:
                    answers.append(call())
                except SandboxError as exc:
                    answers.append(exc.message)
            counts["read"] += 1

    def writer() -> None:
        deadline = time.monotonic() + SECONDS
        n = 0
        while time.monotonic() < deadline:
            n += 1
            name = f"d/w{n}.txt"
            for call in (
                functools.partial(ws.write_file, name, "written\n"),
                lambda: ws.edit_file("d/f", "SECRET", "EDITED"),  # found only outside: must never be
            ):
                try:
                    answers.append(str(call()))
                except SandboxError as exc:
                    answers.append(exc.message)
            counts["write"] += 1

    threads = [threading.Thread(target=flipper), *(threading.Thread(target=reader) for _ in range(2))]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join(timeout=120)
    stop.set()
    threads[0].join(timeout=30)
    if (wt / "d").is_symlink():
        libc.renameat2(AT_FDCWD, os.fsencode(wt / "d"), AT_FDCWD, os.fsencode(swap), RENAME_EXCHANGE)

    print(f"flips {flips[0]}, {counts}")
    assert flips[0] > 100 and counts["read"] > 20 and counts["write"] > 5, (flips, counts)
    leaked = [a for a in answers if "SECRET outside" in a]
    assert leaked == [], leaked[:3]
    assert sorted(os.listdir(outside)) == ["f"]
    assert (outside / "f").read_text() == "SECRET outside\n"
    # Every refusal is one line.
    assert all("\n" not in a for a in answers if "refused" in a or "symlink" in a)
    # And the tools still work once the flipping stopped.
    assert "inside" in ws.read_file("d/f")
