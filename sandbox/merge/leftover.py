"""What is left: the part of a run's patch that is not in the user's tree yet (``diff --unapplied``).

A path is *in* the user's tree when the user's file (probed as ``git add`` would store it) is the
agent's state, or is what the sandbox wrote there for that state (a 3-way merge, hunks placed on an
edited file: the ``user_paths`` record's target is the agent's state and its written state is the
file). A path the sandbox wrote only some hunks to (a :class:`~sandbox.models.PartialApply` taken
from the same agent state) has the others left: the hunks none of whose changes were taken, and the
untaken changes of a hunk taken in part, each shown as a hunk of its own (the ids ``apply
--hunks-from`` takes). Anything else is left whole. Reads only the range's changed paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from sandbox.fast import renamepairs
from sandbox.merge import hunks
from sandbox.merge.preview import FileRecord, HunkRecord
from sandbox.models import UserPathRecord
from sandbox.run.run import Run
from sandbox.store import convert, journal, objects


@dataclass
class Left:
    """What of one path is not in the user's tree: everything (``taken`` empty) or all but ``taken``."""

    path: str
    taken: set[str] = field(default_factory=set)


def left(run: Run, files: list[FileRecord]) -> dict[str, Left]:
    """For each record of ``files`` (from :func:`sandbox.merge.preview.diff_files`) not wholly in the
    user's tree: what is left of it. Paths missing from the answer are in the tree."""
    root = run.user_workdir
    conv = convert.for_tree(root)
    user_paths = run.state().data.user_paths
    out: dict[str, Left] = {}
    for f in files:
        path = f["path"]
        agent = _state(f["after_mode"], f["after_hash"])
        user = conv.clean_probe(root, path, journal.probe(root, path))
        record = user_paths.get(path)
        if journal.matches(user, agent) or _stands_for(record, user, agent):
            continue
        out[path] = Left(path, _taken(record, user, f))
    return out


def unapplied(run: Run, files: list[FileRecord]) -> list[FileRecord]:
    """``files`` cut down to what is not in the user's tree: whole records, or a partly applied
    file's records with only the hunks (or parts of hunks) left, its patch text rebuilt from them."""
    rest = left(run, files)
    out: list[FileRecord] = []
    for f in files:
        what = rest.get(f["path"])
        if what is None:
            continue
        if not what.taken:
            out.append(f)
            continue
        kept = _left_hunks(run, f, what.taken)
        if kept:
            head = f"diff --git a/{f['path']} b/{f['path']}\n--- a/{f['path']}\n+++ b/{f['path']}\n"
            out.append({**f, "hunks": kept, "patch": head + "".join(h["text"] for h in kept)})
    return out


def renames(rest: list[FileRecord]) -> dict[str, str]:
    """Old path -> new path for the renames of ``rest`` (from :func:`unapplied`) left whole on both
    sides: shown as one rename, as ``diff`` shows them."""
    sources = {f["path"]: f["renamed_from"] for f in rest}
    return {
        f["path"]: f["renamed_to"]
        for f in rest
        if f["renamed_to"] is not None and sources.get(f["renamed_to"]) == f["path"]
    }


def rename_patch(run: Run, old: FileRecord, new: FileRecord) -> str:
    """The patch text of a rename as git writes it: its header (similarity, ``rename from``/``to``),
    then the changes between the old path's content and the new one's, if any."""
    before = objects.read_blob(run.repo, old["before_hash"]) if old["before_hash"] else b""
    after = objects.read_blob(run.repo, new["after_hash"]) if new["after_hash"] else b""
    similarity = 100 if before == after else int(100 * renamepairs.similarity(before, after))
    a, b = old["path"], new["path"]
    head = f"diff --git a/{a} b/{b}\nsimilarity index {similarity}%\nrename from {a}\nrename to {b}\n"
    text = pygit2.Patch.create_from(before, after, old_as_path=a, new_as_path=b).text or ""
    body = text.split("\n", 1)[1] if text.startswith("diff --git") else text
    if old["before_mode"] != new["after_mode"]:
        head += f"old mode {old['before_mode']}\nnew mode {new['after_mode']}\n"
    return head + body


def _state(mode: str | None, oid: str | None) -> journal.State:
    return journal.entry_state(int(mode, 8) if mode else None, oid)


def _stands_for(record: UserPathRecord | None, user: journal.Probe, agent: journal.State) -> bool:
    """True when the sandbox wrote the user's file for the agent's state (a merge, hunks on an edit)."""
    if record is None or record.partial is not None:
        return False
    written = journal.entry_state(record.mode, record.oid)
    target = journal.entry_state(record.target_mode, record.target_oid)
    return target == agent and journal.matches(user, written)


def _taken(record: UserPathRecord | None, user: journal.Probe, f: FileRecord) -> set[str]:
    """The ids of ``f`` a partial apply still standing in the user's file took (empty: none)."""
    if record is None or record.partial is None or record.partial.agent_oid != f["after_hash"]:
        return set()
    if not journal.matches(user, journal.entry_state(record.mode, record.oid)):
        return set()
    return {h.id for h in record.partial.hunks}


def _left_hunks(run: Run, f: FileRecord, taken: set[str]) -> list[HunkRecord]:
    fh = hunks.file_hunks(
        run.repo, f["path"], _state(f["before_mode"], f["before_hash"]), _state(f["after_mode"], f["after_hash"])
    )
    kept: list[HunkRecord] = []
    for h in fh.hunks:
        if h.id in taken:
            continue
        rest = [c for c in h.changes if c.id not in taken]
        shown = [h] if len(rest) == len(h.changes) else [hunks.change_hunk(fh, c) for c in rest]
        for s in shown:
            text = hunks.hunk_text(s).decode(errors="replace")
            changes = [{"id": c.id, "header": c.header} for c in s.changes]
            kept.append({"id": s.id, "header": s.header, "text": text, "changes": changes})  # type: ignore[typeddict-item]
    return kept
