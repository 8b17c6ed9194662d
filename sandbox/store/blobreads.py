"""Blobs read once per operation: an apply verifies the new calls' blobs, then diffs the same blobs
for their hunks (a 10,000-line file: 300 KB read, inflated and hashed twice).

Inside :func:`reads_once` (one operation, one thread), :func:`sandbox.store.objects.read_object`
keeps each verified blob it read, at most 64 of them and 32 MB, and serves a second read from there.
Nothing is kept after the block: a blob damaged on disk later is found by the next operation that
reads it, as before. Standard library only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from sandbox.store.lru import Lru

_READS = threading.local()


@contextlib.contextmanager
def reads_once() -> Iterator[None]:
    """Within the block, a blob read (and checked) once is not read again; nested blocks share one."""
    outer = kept()
    _READS.blobs = outer or Lru(64, 32 << 20, len)
    try:
        yield
    finally:
        _READS.blobs = outer


def kept() -> Lru[tuple[str, str], bytes] | None:
    """The blobs kept by the enclosing :func:`reads_once` block, by (objects directory, id); None outside."""
    found: Lru[tuple[str, str], bytes] | None = getattr(_READS, "blobs", None)
    return found
