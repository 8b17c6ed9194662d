"""sandbox.store.agentread on its own: both resolvers, each refusal, the blob id computed as it reads."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from sandbox.store import agentread, beneath


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test once with openat2 and once with the component walk (as where openat2 is missing)."""
    if request.param == "openat2" and not beneath.has_openat2():
        pytest.skip("this kernel has no openat2")
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_HAVE_OPENAT2", False)
    yield request.param


def _root(path: Path) -> int:
    return agentread.open_root(str(path))


def test_reads_a_file_and_its_blob_id(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"content\n")
    root = _root(tmp_path)
    try:
        blob = agentread.read_file(root, "d/f")
        assert blob.data == b"content\n" and blob.oid == str(pygit2.hash(b"content\n"))
        assert agentread.listdir(root, "d") == ["f"] and sorted(agentread.listdir(root, "")) == ["d"]
    finally:
        os.close(root)


def test_no_link_is_followed_on_the_way_or_at_the_end(tmp_path: Path, resolver: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "inner").mkdir()
    (wt / "inner" / "f").write_bytes(b"inside\n")
    os.symlink(outside, wt / "out")  # a directory link leading out
    os.symlink("inner", wt / "in")  # one that stays inside: not followed either
    os.symlink(outside / "secret", wt / "leaf")
    root = _root(wt)
    try:
        for rel in ("out/secret", "in/f"):
            with pytest.raises(agentread.LinkRefusedError):
                agentread.read_file(root, rel)
            assert agentread.lstat(root, rel) is None
        with pytest.raises(agentread.NotRegularError, match="is a symlink"):
            agentread.read_file(root, "leaf")
        assert agentread.readlink(root, "leaf") == os.fsencode(outside / "secret")
        with pytest.raises(agentread.LinkRefusedError):
            agentread.read_file(root, "../outside/secret")
    finally:
        os.close(root)


def test_a_fifo_is_refused_without_waiting(tmp_path: Path, resolver: str) -> None:
    os.mkfifo(tmp_path / "fifo")
    root = _root(tmp_path)
    try:
        with pytest.raises(agentread.NotRegularError, match="FIFO"):
            agentread.read_file(root, "fifo")
        # Told it was a regular file (the caller's lstat, then a swap): the open does not wait, and
        # the descriptor is refused.
        (tmp_path / "other").write_bytes(b"x")
        with pytest.raises(agentread.NotRegularError):
            agentread.open_file(root, "fifo", os.stat(tmp_path / "other"))
    finally:
        os.close(root)


def test_a_file_swapped_after_its_lstat_is_refused(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    root = _root(tmp_path)
    try:
        with pytest.raises(agentread.ChangedError, match="replaced"):
            agentread.open_file(root, "a", os.stat(tmp_path / "b"))
    finally:
        os.close(root)


def test_a_file_over_the_bound_gives_its_size_and_id_and_keeps_nothing(tmp_path: Path, resolver: str) -> None:
    data = os.urandom(3 * agentread.CHUNK + 17)
    (tmp_path / "big").write_bytes(data)
    expected = subprocess.run(
        ["git", "hash-object", str(tmp_path / "big")], capture_output=True, check=True, text=True
    ).stdout.strip()
    root = _root(tmp_path)
    try:
        with pytest.raises(agentread.TooLargeError) as caught:
            agentread.read_file(root, "big", limit=agentread.CHUNK)
        assert caught.value.size == len(data) and caught.value.oid == expected
        assert f"is {len(data)} bytes (blob {expected}), more than max_read_size" in caught.value.message
        assert agentread.read_file(root, "big", limit=len(data)).oid == expected
    finally:
        os.close(root)
