"""The pre-read of a call's files (sandbox/store/preread.py): what capture records is what was read,
the walk follows capture's, and what is kept in memory is bounded."""

from __future__ import annotations

from pathlib import Path

import pygit2

from sandbox.store import objects
from sandbox.store.capture import capture, skip
from sandbox.store.preread import Preread
from tests.conftest import make_repo


def head_tree(root: Path) -> str:
    repo = pygit2.Repository(str(root))
    return objects.commit_tree(repo, str(repo.head.target))


def test_capture_records_what_was_read_before_and_reads_the_rest_itself(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "wt", {"a.txt": "a\n", "d/b.txt": "b\n", "gone.txt": "g\n"})
    repo = pygit2.Repository(str(root))
    tree = head_tree(root)
    (root / "a.txt").write_text("read before\n")
    (root / "new").mkdir()
    for i in range(4):
        (root / "new" / f"{i}.txt").write_text(f"{i}\n" * 1000)
    (root / "gone.txt").unlink()
    (root / "link").symlink_to("a.txt")
    pre = Preread(str(root), skip=skip)
    pre.budget = 3000  # two of the new files' content kept, the rest left to the capture
    pre.fill(["a.txt", "new", "gone.txt", "link"])
    assert set(pre.blobs) < {"a.txt", "new/0.txt", "new/1.txt", "new/2.txt", "new/3.txt"}
    assert pre.links == {"link": b"a.txt"}
    (root / "a.txt").write_text("changed after the read\n")
    cap = capture(repo, str(root), tree, ["a.txt", "new", "gone.txt", "link"], reader=pre)
    assert cap.changes["gone.txt"] is None
    assert objects.read_blob(repo, cap.changes["a.txt"].oid) == b"read before\n"  # type: ignore[union-attr]
    assert {f"new/{i}.txt" for i in range(4)} <= set(cap.changes)
    assert objects.read_blob(repo, cap.changes["link"].oid) == b"a.txt"  # type: ignore[union-attr]
