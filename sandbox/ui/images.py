"""Previews of changed images on the run page: before and after, read from the git objects.

An image is known by its first bytes (PNG, JPEG, GIF, WebP), never by its name, so a file named
``x.png`` that holds HTML is not served as an image. SVG is text that can carry script: it is served
as ``image/svg+xml`` only for an ``<img>`` (a browser runs no script in an image), never put inline
in the page. Every answer carries ``X-Content-Type-Options: nosniff`` (:mod:`sandbox.ui.auth`), and
the page's script fetches each image with the tab's token and shows it from a ``blob:`` address
(an ``<img src>`` could not send the token). Only a path the shown diff changed is served, from the
range that diff compares.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pygit2

from sandbox.escape import path as agent_path
from sandbox.run.run import Run

if TYPE_CHECKING:
    from sandbox.merge.preview import FileRecord

#: Bigger images are not previewed (the page stays light; ``sandbox diff`` names them).
MAX_BYTES = 16 * 1024 * 1024

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def content_type(data: bytes, path: str) -> str | None:
    """The image type of ``data`` by its first bytes (SVG: by its name and a text start), else None."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if path.lower().endswith(".svg") and b"<svg" in data[:4096] and b"\0" not in data[:4096]:
        return "image/svg+xml"
    return None


def _blob(run: Run, oid: str | None) -> bytes | None:
    obj = run.repo.get(oid) if oid else None
    return obj.data if isinstance(obj, pygit2.Blob) and obj.size <= MAX_BYTES else None


def is_image(run: Run, f: FileRecord) -> bool:
    """True when either side of the changed file is an image this page previews (only a binary file or
    an ``.svg`` is read for it: a text diff's blobs are not read twice)."""
    if not f["binary"] and not f["path"].lower().endswith(".svg"):
        return False
    for oid in (f["before_hash"], f["after_hash"]):
        data = _blob(run, oid)
        if data is not None and content_type(data, f["path"]) is not None:
            return True
    return False


def preview(run: Run, f: FileRecord, call_id: str | None = None, before_path: str | None = None) -> str:
    """The before and after images of a changed file (``<img>`` the script fills), absent sides said."""
    figures = []
    for side, oid, path in (
        ("before", f["before_hash"], before_path or f["path"]),
        ("after", f["after_hash"], f["path"]),
    ):
        data = _blob(run, oid)
        kind = content_type(data, path) if data is not None else None
        if data is None or kind is None:
            what = "absent" if not oid else "not an image this page shows"
            figures.append(f"<figure class='{side}'><figcaption>{side}: {what}</figcaption></figure>")
            continue
        query = {"path": path, "side": side, **({"call": call_id} if call_id else {})}
        src = f"/run/{run.run_id}/image?{urlencode(query)}"
        alt = escape(agent_path(f"{path} {side}"), quote=True)
        figures.append(
            f"<figure class='{side}'><figcaption>{side} ({len(data)} bytes, {escape(kind)})</figcaption>"
            f"<img data-src='{escape(src, quote=True)}' alt='{alt}'></figure>"
        )
    return "<div class='images'>" + "".join(figures) + "</div>"


def image(run: Run, path: str, side: str, call_id: str | None = None) -> tuple[bytes, str] | None:
    """The bytes and content type of ``path`` before or after the run's (or one call's) changes, when
    the diff changed that path and that side is an image; else None."""
    from sandbox.merge.preview import diff_files, preview_range

    rng = preview_range(run, call_id=call_id) if call_id else preview_range(run)
    for f in diff_files(run, rng, None):
        if side == "before" and path in (f["path"], f["renamed_from"]):
            oid = f["before_hash"]
        elif side == "after" and f["path"] == path:
            oid = f["after_hash"]
        else:
            continue
        data = _blob(run, oid)
        kind = content_type(data, path) if data is not None else None
        if data is not None and kind is not None:
            return data, kind
    return None
