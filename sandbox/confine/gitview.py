"""Your ``.git`` as a run sees it: default deny, only the objects its git borrows.

A run's git is a repository of its own (:mod:`sandbox.store.worktree`): its own HEAD, refs, index,
config, hooks and logs in the run's ``git/`` directory, with ``commondir`` naming that directory
itself, and your objects reached through ``objects/info/alternates``. So of your common git
directory it needs ``objects/`` alone (and, for Git LFS, ``lfs/objects``, which git-lfs finds beside
an alternate). Everything else there is yours or another run's: your branches, tags and stash
(``refs/``, ``packed-refs``), reflogs (``logs/``), ``ORIG_HEAD``, ``FETCH_HEAD``, the commit message
you are writing, the admin directories of your linked worktrees (``worktrees/``), hooks, ``info/``,
submodules' git dirs (``modules/``, with their configs), and every run's refs (``refs/sandbox/<run>``).

Inside a run's sandbox the common directory is an empty read-only directory, with ``lfs/objects`` bound
back read-only, your committed history shown as ``objects/`` (a store of the sandbox's holding what your
branches, tags and remote-tracking branches reach, :mod:`sandbox.store.history`: not your stash, what
only your reflogs keep, nor unreachable objects), and what the sandbox's own tools inside read of this
run (see :func:`user_git_view`); the sandbox's own files in ``.git/sandbox`` keep their rule (this run's
directory and the host's socket directory bound back, :mod:`sandbox.confine.policy`).

A run made before homes existed (``legacy``) is a linked worktree of your repository: its git reads
your refs and config through ``commondir``. It keeps the older view (the whole ``.git`` read-only,
configs masked) until ``sandbox gc`` moves it into a home.

The objects: the host records each run into a store of its own (:mod:`sandbox.store.runstore`), which
the run's git lists first in its alternates and which lies in the run's directory (bound back read-only).
Your ``objects/info/alternates`` names the hub that lists every live run's store: inside, it is shown
with your own lines only, so a run's git reaches your objects and its own store, no other run's. Standard
library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import os

from sandbox.store import history, layout

#: What of your common git dir a run's git reads (read-only), relative to it: your objects as your
#: committed history (:mod:`sandbox.store.history`), your Git LFS files as they are (a run's own are in
#: its own storage, :mod:`sandbox.store.lfsstore`).
BORROWED = ("objects", os.path.join("lfs", "objects"))

WHY = "your repository's git directory (refs, stash, reflogs, hooks, other runs' refs): the run's git has its own"
#: In the run's directory: the run's own lines of ``packed-refs``, shown as ``packed-refs`` inside.
PACKED_VIEW = "packed-refs.view"
#: In the run's directory: your ``objects/info/alternates`` without the hub, shown as it inside.
ALTERNATES_VIEW = "alternates.view"


class View:
    """What of your common git dir a command of a run sees (all read-only): ``hidden`` (path -> why),
    ``readable`` (bound back where they are) and ``files`` ((generated file, where it is shown))."""

    def __init__(self) -> None:
        self.hidden: dict[str, str] = {}
        self.readable: list[str] = []
        self.files: list[tuple[str, str]] = []


def user_git_view(common_dir: str, run_id: str, *, history_view: bool) -> View:
    """Your common git dir hidden but for :data:`BORROWED` and what the sandbox's own tools inside
    (``sandbox mcp`` under ``sandbox run``, ``sandbox status``) read of this run: ``HEAD`` (so the
    directory opens as a repository), the run's own ``refs/sandbox/<run>/`` (live) and its lines of
    ``packed-refs`` (as of the command's start: a ``git pack-refs`` of yours during a long session
    leaves them stale inside until the next command). Your ``objects/`` is shown as your committed
    history (:func:`sandbox.store.history.shown`, brought up to your branches first) where the sandbox
    binds it (``history_view``: bubblewrap, not already inside a sandbox; Seatbelt cannot hide a read).
    Nothing for a legacy run, whose git is a linked worktree of yours and reads your refs and config."""
    view = View()
    real = os.path.realpath(common_dir)
    if real == "/" or not os.path.isdir(real):
        return view
    legacy = layout.place_of(common_dir, run_id).legacy
    history_on = history_view and not legacy and os.path.isdir(layout.run_store(real, run_id))
    alternates = os.path.join(real, "objects", "info", "alternates")
    if os.path.exists(alternates):  # your own lines, not the hub of every run's store (sandbox.store.runstore)
        # What your git borrows (a clone made with --shared or --reference): where your history is shown,
        # what of it your tips reach is in that store (packed from them), and the rest is not shown; else
        # the run's git borrows it whole.
        borrowed = [] if history_on else layout.user_alternates(real)
        view.readable += [os.path.realpath(p) for p in borrowed if os.path.isdir(p)]
        # And this run's own store: a git opened on your git dir inside sees this run's refs and objects.
        store = os.path.realpath(layout.run_store(real, run_id))
        shown_lines = [*borrowed, *([store] if os.path.isdir(store) else [])]
        text = "".join(line + "\n" for line in shown_lines).encode("utf-8", "surrogateescape")
        alternates_view = _write_view(os.path.join(layout.run_dir(real, run_id), ALTERNATES_VIEW), text)
        if alternates_view is not None:
            view.files.append((alternates_view, alternates))
    if legacy:
        return view
    view.hidden[real] = WHY
    own_refs = os.path.join(real, *layout.ref_prefix(run_id).rstrip("/").split("/"))
    with contextlib.suppress(OSError):  # a run whose refs are all packed: bound as an empty directory
        os.makedirs(own_refs, exist_ok=True)
    borrowed_here: tuple[str, ...] = BORROWED
    if history_on:
        view.files.append((history.shown(real), os.path.join(real, "objects")))
        if os.path.exists(layout.fetched_file(real, run_id)):  # its ledger came into your objects by git
            history.adopt(real, run_id)
        borrowed_here = BORROWED[1:]
    # else a run made before stores: what is recorded for it lies in your objects, shown whole.
    shown = [*(os.path.join(real, rel) for rel in borrowed_here), os.path.join(real, "HEAD"), own_refs]
    view.readable += [os.path.realpath(p) for p in shown if os.path.exists(p)]
    packed = _own_packed_refs(real, run_id)
    if packed is not None:
        view.files.append((packed, os.path.join(real, "packed-refs")))
    return view


def _own_packed_refs(common_dir: str, run_id: str) -> str | None:
    """The run's own lines of your ``packed-refs`` (with the header and their peeled lines), written
    to the run's directory; None when there is no ``packed-refs`` or it cannot be written."""
    prefix = b" " + layout.ref_prefix(run_id).encode()
    try:
        with open(os.path.join(common_dir, "packed-refs"), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    header = data[: data.index(b"\n") + 1] if data.startswith(b"#") and b"\n" in data else b""
    first = data.find(prefix)
    out = [header]
    if first >= 0:
        # Only from the run's first line on: a packed-refs of 10k tags costs a find, not a parse.
        start = data.rfind(b"\n", 0, first) + 1
        keep, pos = False, start
        while pos < len(data):
            end = data.find(b"\n", pos)
            line, pos = data[pos : len(data) if end < 0 else end + 1], len(data) if end < 0 else end + 1
            if line.startswith(b"^"):
                if keep:
                    out.append(line)
                continue
            keep = (b" " + line.partition(b" ")[2]).startswith(prefix)
            if keep:
                out.append(line)
            elif b"sorted" in header:
                break  # git keeps them sorted: the run's lines are together
    return _write_view(os.path.join(layout.run_dir(common_dir, run_id), PACKED_VIEW), b"".join(out))


def _write_view(path: str, text: bytes) -> str | None:
    """``path`` holding ``text`` (written only when it differs); None when it cannot be written."""
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        if fh.read() == text:  # as the last command left it: no write on the start path
            return path
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        return None
    return path
