"""The diffs of ``sandbox ui``: the run's (or a selection's) changes, one call's, file by file.

The records come from :func:`sandbox.merge.preview.diff_files`, the function behind ``sandbox diff
--json``, over the same range and pathspec: a selection made here (git pathspecs, ``--call`` ids
and ranges) shows the hunks, with the same ids, that ``sandbox apply`` with that selection takes.

A whole-file unit (added, deleted, binary, a symlink, a mode change) has one checkbox carrying the
file's id; a text edit has one per hunk. A deleted path and an added one that git would call a
rename (``git diff -M``: libgit2's similarity search over the changed paths only, 50% as git's
default) are shown as one rename, ``old → new``, with the edit between them, and picked together.

Big diffs are cut into pages of :data:`FILES_PER_PAGE` files, and a file's patch into pieces of
:data:`LINES_PER_FILE` lines loaded on demand, so a 10,000-line diff never renders at once. Syntax
colours are added in the browser (``static/vendor/highlight.min.js``) to the lines in view.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

import pygit2

from sandbox.errors import SandboxError, UsageError, damaged_object
from sandbox.escape import path as agent_path
from sandbox.fast.pathspec import Pathspec
from sandbox.run.run import Run
from sandbox.store.objects import DamagedObjectError
from sandbox.ui import filetree, images, names

if TYPE_CHECKING:
    from sandbox.merge.preview import FileRecord

#: Added paths that are renames of deleted ones: new path -> (old path, similarity %).
Renames = dict[str, tuple[str, int]]

FILES_PER_PAGE = 40
LINES_PER_FILE = 1500
MODE_NAMES = {"100644": "file", "100755": "executable", "120000": "symlink", "160000": "submodule"}


@dataclass
class Selection:
    """What to show and take: git pathspecs and calls (ids, log numbers, ranges ``A..B``), as the CLI's."""

    paths: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, paths: str | None, calls: str | None) -> Selection:
        """From the page's two boxes: pathspecs split as a shell would, calls on spaces or commas."""
        try:
            specs = shlex.split(paths or "")
        except ValueError as exc:
            raise UsageError(f"The paths {paths!r} cannot be read ({exc}); quote each pathspec whole.") from None
        names = [c for c in (calls or "").replace(",", " ").split() if c]
        return cls(specs, names)

    @classmethod
    def of(cls, body: Mapping[str, object]) -> Selection:
        """From an action's JSON body: ``paths`` and ``calls`` as the boxes' text or as lists."""
        paths, calls = body.get("paths"), body.get("calls")
        sel = cls.parse(paths if isinstance(paths, str) else None, calls if isinstance(calls, str) else None)
        if isinstance(paths, list):
            sel.paths = [str(p) for p in paths]
        if isinstance(calls, list):
            sel.calls = [str(c) for c in calls]
        return sel

    def spec(self) -> Pathspec | None:
        """The pathspec (validated as the CLI validates it; None: every path)."""
        from sandbox.merge.select import pathspec

        return pathspec(self.paths)

    def query(self) -> str:
        """The selection as query parameters ("" when empty)."""
        items = [("paths", shlex.join(self.paths))] if self.paths else []
        items += [("calls", " ".join(self.calls))] if self.calls else []
        return urlencode(items)

    def __bool__(self) -> bool:
        return bool(self.paths or self.calls)


def _records(run: Run, sel: Selection, call_id: str | None = None) -> tuple[list[FileRecord], Renames]:
    from sandbox.merge.preview import diff_files, preview_range

    rng = preview_range(run, call_id=call_id) if call_id else preview_range(run, calls=sel.calls or None)
    files = diff_files(run, rng, sel.spec())
    return files, _renames(run, rng.old, rng.new, files)


def run_diff(
    run: Run, page: int, side_by_side: bool = False, sel: Selection | None = None, ignore_ws: bool = False
) -> str:
    """The run's whole diff, or the selection's (what an apply of it would bring), hunks pickable.
    A selection the CLI would refuse shows the CLI's words. With ``ignore_ws`` a text edit's hunks are
    recomputed ignoring whitespace (:func:`whitespace_lines`), shown to read, not to pick."""
    sel = sel or Selection()
    try:
        files, renames = _records(run, sel)
    except SandboxError as exc:
        return f"<p class='refused' role='alert'>{escape(exc.message)}</p>"
    except DamagedObjectError as exc:
        return f"<p class='refused' role='alert'>{escape(damaged_object(exc))}</p>"
    return _files(run, files, renames, page, pick=True, side_by_side=side_by_side, sel=sel, ignore_ws=ignore_ws)


def call_diff(run: Run, call_id: str, side_by_side: bool = False) -> str:
    """One call's diff (its commit against its parent)."""
    try:
        files, renames = _records(run, Selection(), call_id)
    except SandboxError as exc:
        return f"<p class='muted'>{escape(exc.message)}</p>"
    except DamagedObjectError as exc:
        return f"<p class='refused' role='alert'>{escape(damaged_object(exc))}</p>"
    per_page = len(files) or 1
    return _files(
        run,
        files,
        renames,
        0,
        pick=False,
        side_by_side=side_by_side,
        sel=Selection(),
        per_page=per_page,
        call_id=call_id,
    )


def _tree(repo: pygit2.Repository, oid: str) -> pygit2.Tree | None:
    obj = repo.get(oid)
    if isinstance(obj, pygit2.Commit):
        return obj.tree
    return obj if isinstance(obj, pygit2.Tree) else None


def _renames(run: Run, old: str, new: str, files: list[FileRecord]) -> Renames:
    """Added paths that are renames of deleted ones: new path -> (old path, similarity %)."""
    added = {f["path"] for f in files if f["status"] == "added"}
    deleted = {f["path"] for f in files if f["status"] == "deleted"}
    if not added or not deleted:
        return {}
    repo = run.repo
    old_tree, new_tree = _tree(repo, old), _tree(repo, new)
    if old_tree is None or new_tree is None:
        return {}
    diff = old_tree.diff_to_tree(new_tree)
    diff.find_similar(flags=pygit2.enums.DiffFind.FIND_RENAMES)
    out: Renames = {}
    for delta in diff.deltas:
        if delta.status != pygit2.enums.DeltaStatus.RENAMED:
            continue
        source, target = delta.old_file.path, delta.new_file.path
        if target in added and source in deleted:
            out[target] = (source, delta.similarity)
    return out


def _files(
    run: Run,
    files: list[FileRecord],
    renames: Renames,
    page: int,
    *,
    pick: bool,
    side_by_side: bool,
    sel: Selection,
    per_page: int = FILES_PER_PAGE,
    ignore_ws: bool = False,
    call_id: str | None = None,
) -> str:
    if not files:
        return "<p class='muted'>No changes" + (" in this selection." if sel else ".") + "</p>"
    gone = {source for source, _ in renames.values()}
    deleted = {f["path"]: f for f in files if f["path"] in gone}
    shown = [f for f in files if f["path"] not in gone]
    pages = (len(shown) + per_page - 1) // per_page
    page = min(page, pages - 1)
    out = []
    if pages > 1:
        links = " ".join(
            f"<a href='#' data-page='{i}' class='{'current' if i == page else ''}'>{i + 1}</a>" for i in range(pages)
        )
        out.append(f"<nav class='pages'>{len(shown)} files · page {links}</nav>")
    here = shown[page * per_page : (page + 1) * per_page]
    if pick:  # the run's diff (not one call's, under the timeline): its files as a tree to fold and jump
        out.append(filetree.tree([f["path"] for f in here]))
    if ignore_ws:
        out.append(
            "<p class='note ws'>Whitespace ignored (as <code>git diff -w</code>): edits are shown to read; "
            "turn it off to pick their hunks.</p>"
        )
    for f in here:
        if f["path"] in renames:
            source, similarity = renames[f["path"]]
            out.append(_renamed(run, deleted[source], f, similarity, pick, side_by_side, call_id))
        else:
            out.append(_file(run, f, pick, side_by_side, sel, ignore_ws, call_id))
    return "".join(out)


def _mode(f: FileRecord) -> str:
    before, after = f["before_mode"], f["after_mode"]
    if before and after and before != after:
        names = f"{MODE_NAMES.get(before, before)} → {MODE_NAMES.get(after, after)}"
        return f" <span class='badge info'>mode {escape(before)} → {escape(after)} ({escape(names)})</span>"
    return ""


def _head(f: FileRecord, pick: bool, title: str, ids: list[str], status: str, boxes: bool = True) -> str:
    """A file's heading; its checkbox picks every hunk of it, or carries ``ids`` for a whole unit
    (none without ``boxes``: a whitespace-insensitive view is read, not picked)."""
    box = ""
    if pick and boxes:
        label = escape(f"all of {agent_path(f['path'])}", quote=True)  # a screen reader reads it out
        if ids:
            box = (
                f"<input type='checkbox' class='pick pick-file' data-hunk='{escape(' '.join(ids), quote=True)}' "
                f"aria-label='{label}'> "
            )
        else:
            box = f"<input type='checkbox' class='pick-file' aria-label='{label}'> "
    rev = escape(filetree.revision(f["before_hash"], f["after_hash"]), quote=True)
    return (
        f"<div class='file' data-path='{escape(f['path'], quote=True)}' data-lang='{escape(_lang(f['path']), True)}'"
        f" data-rev='{rev}'><h3>{box}<span class='fstatus {escape(status)}'>{escape(status)}</span> {title}"
        f"{_mode(f)}{filetree.controls() if pick else ''}</h3>"
    )


def _lang(path: str) -> str:
    """The highlighter's language name for a path: its extension (highlight.js knows the aliases)."""
    base = os.path.basename(path)
    if base in ("Makefile", "GNUmakefile"):
        return "makefile"
    if base == "Dockerfile":
        return "dockerfile"
    return os.path.splitext(base)[1][1:].lower()


def _blob_size(run: Run, oid: str | None) -> str:
    if not oid:
        return "absent"
    obj = run.repo.get(oid)
    return f"{obj.size} bytes" if isinstance(obj, pygit2.Blob) else "?"


def _file(
    run: Run, f: FileRecord, pick: bool, side_by_side: bool, sel: Selection, ignore_ws: bool, call_id: str | None
) -> str:
    whole = not f["hunks"]
    if ignore_ws and not whole and not f["binary"]:
        head = _head(f, pick, names.name(f["path"]), [], f["status"], boxes=False)
        lines = whitespace_lines(run, f)
        if not lines:
            return head + "<p class='note'>Only whitespace changed.</p></div>"
        return head + _hunks_of(run, f["path"], lines, side_by_side, sel, ignore_ws=True) + "</div>"
    head = _head(f, pick, names.name(f["path"]), [f["id"]] if whole else [], f["status"])
    if not f["binary"] and names.hides(f["patch"]):
        head += names.HIDDEN_NOTE
    if images.is_image(run, f):  # before and after as images (an SVG's text diff under them)
        if f["binary"]:
            return head + images.preview(run, f, call_id) + "</div>"
        head += images.preview(run, f, call_id)
    if f["binary"]:
        sizes = f"{_blob_size(run, f['before_hash'])} → {_blob_size(run, f['after_hash'])}"
        return head + f"<p class='note'>Binary file {names.name(f['path'])} ({sizes}): not shown.</p></div>"
    if whole:  # added, deleted, a symlink or a mode change: one unit, its patch shown as it is
        lines = _patch_lines(f["patch"])
        if not lines:
            return head + "<p class='note'>No change to its content (only its mode or type).</p></div>"
        note = "<p class='note'>Taken whole (added, deleted, a symlink or a mode change).</p>" if pick else ""
        return head + note + _hunks_of(run, f["path"], lines, side_by_side, sel) + "</div>"
    body = []
    shown = 0
    for h in f["hunks"]:
        lines = h["text"].splitlines()
        if shown >= LINES_PER_FILE:
            body.append(_more(run, f["path"], shown, sel))
            break
        cut = len(lines) > LINES_PER_FILE - shown + 1
        if cut:  # one huge hunk (a rewritten file): its start now, the rest on demand
            lines = lines[: LINES_PER_FILE - shown + 1]
        shown += len(lines)
        hunk_id = escape(h["id"], quote=True)
        box = f"<input type='checkbox' class='pick' data-hunk='{hunk_id}' aria-label='hunk {escape(h['header'])}'> "
        box = box if pick else ""
        body.append(f"<div class='hunk'><div class='hhead'>{box}<code>{escape(h['header'])}</code></div>")
        body.append(_split(lines[1:]) if side_by_side else unified(lines[1:], h["header"]))
        body.append("</div>")
        if cut:
            body.append(_more(run, f["path"], shown, sel))
            break
    return head + "".join(body) + "</div>"


def whitespace_lines(run: Run, f: FileRecord) -> list[str]:
    """A text edit's patch lines recomputed ignoring whitespace, as ``git diff -w`` (libgit2's
    ``IGNORE_WHITESPACE``), from its blobs; [] when only whitespace changed."""
    old = run.repo.get(f["before_hash"]) if f["before_hash"] else None
    new = run.repo.get(f["after_hash"]) if f["after_hash"] else None
    if not isinstance(old, pygit2.Blob) or not isinstance(new, pygit2.Blob):
        return []
    return _patch_lines(_patch_text(old.data, new.data, pygit2.enums.DiffOption.IGNORE_WHITESPACE))


def _patch_text(before: bytes, after: bytes, flag: pygit2.enums.DiffOption = pygit2.enums.DiffOption.NORMAL) -> str:
    """The patch between two contents. Both are held here until its text is read: a libgit2 patch made
    from buffers points into them, and a temporary (``blob.data`` passed inline) may be freed first
    (measured: the same two blobs gave a different patch from one call to the next)."""
    patch = pygit2.Patch.create_from(before, after, flag=flag, context_lines=3)
    return patch.text or ""


def _patch_lines(patch: str) -> list[str]:
    """The lines of a patch from its first ``@@`` on (the git headers are said by the page itself)."""
    lines = patch.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            return lines[i:]
    return []


def _hunks_of(
    run: Run, path: str, lines: list[str], side_by_side: bool, sel: Selection, ignore_ws: bool = False
) -> str:
    """Read-only hunks from patch lines (``@@`` headers and their lines), cut at :data:`LINES_PER_FILE`."""
    out = []
    cut = len(lines) > LINES_PER_FILE
    lines = lines[:LINES_PER_FILE]
    current: list[str] = []
    for line in [*lines, "@@"]:
        if line.startswith("@@"):
            if current:
                out.append(f"<div class='hunk'><div class='hhead'><code>{escape(current[0])}</code></div>")
                out.append(_split(current[1:]) if side_by_side else unified(current[1:], current[0]))
                out.append("</div>")
            current = [line]
        else:
            current.append(line)
    if cut:
        out.append(_more(run, path, LINES_PER_FILE, sel, ignore_ws))
    return "".join(out)


def _renamed(
    run: Run, gone: FileRecord, f: FileRecord, similarity: int, pick: bool, side: bool, call_id: str | None
) -> str:
    """A deleted path and an added one shown as a rename: the edit between them, picked together."""
    title = f"{names.name(gone['path'])} → {names.name(f['path'])} ({similarity}% similar)"
    merged = f.copy()
    merged["before_mode"] = gone["before_mode"]
    merged["before_hash"] = gone["before_hash"]
    head = _head(merged, pick, title, [gone["id"], f["id"]], "renamed")
    merged["binary"] = gone["binary"] or f["binary"]
    if images.is_image(run, merged):
        head += images.preview(run, merged, call_id, before_path=gone["path"])
        if merged["binary"]:
            return head + "</div>"
    if gone["binary"] or f["binary"]:
        return head + "<p class='note'>Binary file: not shown.</p></div>"
    # A rename pairs a deleted path (it had a before blob) with an added one (it has an after blob).
    old = run.repo.get(gone["before_hash"]) if gone["before_hash"] else None
    new = run.repo.get(f["after_hash"]) if f["after_hash"] else None
    if not isinstance(old, pygit2.Blob) or not isinstance(new, pygit2.Blob):
        return head + "</div>"
    text = _patch_text(old.data, new.data)
    note = "<p class='note'>A rename is taken whole: the old path removed, the new one written.</p>" if pick else ""
    lines = _patch_lines(text)
    body = _hunks_of(run, f["path"], lines, side, Selection()) if lines else "<p class='note'>Content unchanged.</p>"
    return head + note + body + "</div>"


def _more(run: Run, path: str, start: int, sel: Selection, ignore_ws: bool = False) -> str:
    extra = ("&" + sel.query()) if sel else ""
    extra += "&ws=ignore" if ignore_ws else ""
    more = f"/run/{quote(run.run_id)}/file?path={quote(path)}&from={start}{extra}"
    return (
        f"<p><a href='#' class='more' data-src='{escape(more, quote=True)}'>Show the rest of this file's diff</a></p>"
    )


_MARKER = re.compile(r"(<{7}|={7}|>{7}|\|{7})( |$)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def numbered(lines: list[str], header: str | None = None) -> list[tuple[int | None, int | None]]:
    """Each patch line's (old, new) line numbers, counted from ``header`` or the ``@@`` lines among them."""
    o = n = None
    found = _HUNK.match(header) if header else None
    if found:
        o, n = int(found[1]), int(found[2])
    out: list[tuple[int | None, int | None]] = []
    for line in lines:
        found = _HUNK.match(line)
        if found:
            o, n = int(found[1]), int(found[2])
            out.append((None, None))
        elif o is None or n is None or line.startswith("\\"):
            out.append((None, None))
        elif line.startswith("+"):
            out.append((None, n))
            n += 1
        elif line.startswith("-"):
            out.append((o, None))
            o += 1
        else:
            out.append((o, n))
            o, n = o + 1, n + 1
    return out


def unified(
    lines: list[str], header: str | None = None, numbers: list[tuple[int | None, int | None]] | None = None
) -> str:
    """Lines of a patch (without the ``@@`` header) as a unified diff: blue added, orange removed; with
    the hunk's ``header`` (or ``numbers``), each line carries its old and new line numbers (a gutter
    drawn by the style sheet, outside the line's text; ``data-n`` is the line a comment is about)."""
    nums = numbers if numbers is not None else numbered(lines, header)
    out = ["<pre class='diff'>"]
    for line, (o, n) in zip(lines, nums, strict=False):
        kind = "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
        if _MARKER.match(line, 1):
            kind += " marker"  # a conflict marker in the content: styled apart, as the Conflicts section does
        text, hidden = names.content(line)
        kind += " hidden-chars" if hidden else ""  # flagged on its line (the style sheet's mark)
        attrs = ""
        if o is not None or n is not None:
            attrs = f" data-ln='{o or '':>5} {n or '':>5} '" + (f" data-n='{n or o}'")
        out.append(f"<span class='{kind}'{attrs}>{text or ' '}</span>")
    out.append("</pre>")
    return "".join(out)


def _split(lines: list[str]) -> str:
    """Side by side: context on both sides, a run of removals paired with the additions after it."""
    rows: list[tuple[str, str, str, str]] = []
    dels: list[str] = []
    adds: list[str] = []

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            left = dels[i] if i < len(dels) else ""
            right = adds[i] if i < len(adds) else ""
            rows.append(("del" if left else "none", left[1:], "add" if right else "none", right[1:]))
        dels.clear()
        adds.clear()

    for line in lines:
        if line.startswith("-"):
            if adds:
                flush()
            dels.append(line)
        elif line.startswith("+"):
            adds.append(line)
        else:
            flush()
            rows.append(("ctx", line[1:], "ctx", line[1:]))
    flush()
    cells = "".join(f"<tr>{_cell(lk, lt)}{_cell(rk, rt)}</tr>" for lk, lt, rk, rt in rows)
    return f"<table class='split'>{cells}</table>"


def _cell(kind: str, line: str) -> str:
    text, hidden = names.content(line)
    return f"<td class='{kind}{' hidden-chars' if hidden else ''}'>{text}</td>"


def file_rest(run: Run, path: str, start: int, sel: Selection | None = None, ignore_ws: bool = False) -> str:
    """The rest of one file's diff, from line ``start`` (a big file's patch comes in pieces; with
    ``ignore_ws``, of its whitespace-insensitive patch)."""
    sel = sel or Selection()
    try:
        files, _ = _records(run, sel)
    except SandboxError as exc:
        return f"<p class='refused'>{escape(exc.message)}</p>"
    found = [f for f in files if f["path"] == path]
    if not found:
        return "<p class='muted'>No such changed file.</p>"
    f = found[0]
    if ignore_ws and f["hunks"] and not f["binary"]:
        lines = whitespace_lines(run, f)
    elif f["hunks"]:
        lines = [line for h in f["hunks"] for line in h["text"].splitlines()]
    else:
        lines = _patch_lines(f["patch"])
    piece = lines[start : start + LINES_PER_FILE]
    out = unified(piece, numbers=numbered(lines)[start : start + LINES_PER_FILE])
    if start + LINES_PER_FILE < len(lines):
        extra = ("&" + sel.query()) if sel else ""
        extra += "&ws=ignore" if ignore_ws else ""
        more = f"/run/{quote(run.run_id)}/file?path={quote(path)}&from={start + LINES_PER_FILE}{extra}"
        out += f"<p><a href='#' class='more' data-src='{escape(more, quote=True)}'>Show more</a></p>"
    return out
