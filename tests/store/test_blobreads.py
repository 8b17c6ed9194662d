"""Blobs read once per operation (store/blobreads.py): inside ``reads_once`` a blob read and checked is
served again without the disk; outside the block, and in the next one, the object database is read (a
blob damaged or gone since is found)."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest

from sandbox.store import blobreads, objects


def test_a_blob_is_read_once_inside_the_block_only(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r"))
    oid = str(repo.create_blob(b"line\n" * 1000))  # loose: the file can be taken away
    loose = Path(repo.path) / "objects" / oid[:2] / oid[2:]
    assert blobreads.kept() is None
    with blobreads.reads_once():
        assert objects.read_blob(repo, oid) == b"line\n" * 1000
        os.rename(loose, tmp_path / "away")
        with blobreads.reads_once():  # nested: the same blobs
            assert objects.read_blob(repo, oid) == b"line\n" * 1000
    assert blobreads.kept() is None
    with pytest.raises(objects.DamagedObjectError):
        objects.read_blob(repo, oid)
    os.rename(tmp_path / "away", loose)
    with blobreads.reads_once():
        assert objects.read_blob(repo, oid) == b"line\n" * 1000
        tree = str(repo.TreeBuilder().write())
        assert objects.read_object(repo, tree)[0] == pygit2.enums.ObjectType.TREE
        kept = blobreads.kept()
        assert kept is not None and kept.get((objects._objects_dir(repo), tree)) is None  # blobs only
