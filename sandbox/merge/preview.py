"""Previewing a run's patch: the whole run against its base, one call against its parent, or any
selection of calls (several ``--call``, ranges) as the chain of their recorded changes.

Text diffs come from ``git diff`` (one process, on the repository's git dir, no working tree
involved): it is the format users read every day, with color, renames detected as git detects them
(or exact paths with ``renames=False``), names that are not UTF-8 (which pygit2's patch text cannot
carry), and binary files named, not dumped. The JSON records (``diff --json``) are built in-process
with pygit2 from one tree diff, with no git process at all, and carry the stable hunk ids
``apply --hunks-from`` takes (:mod:`sandbox.merge.hunks`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypedDict

import pygit2

from sandbox.errors import SandboxError
from sandbox.fast.pathspec import Pathspec
from sandbox.merge import brings, hunks, select
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.gitcli import git


class ChangeRecord(TypedDict):
    """One change of a split hunk: its stable id and ``@@`` header."""

    id: str
    header: str


class HunkRecord(TypedDict):
    """One hunk of a file's diff: its stable id, ``@@`` header, text as git prints it, and its changes."""

    id: str
    header: str
    text: str
    changes: list[ChangeRecord]


class FileRecord(TypedDict):
    """One changed file of a preview (``sandbox diff --json``, the ui's diff pages)."""

    path: str
    #: added, deleted, modified, or mode (the content unchanged)
    status: str
    before_hash: str | None
    after_hash: str | None
    #: Modes as six octal digits (``100644``), None where the file is absent.
    before_mode: str | None
    after_mode: str | None
    binary: bool
    patch: str
    #: The id that takes the whole file (see :mod:`sandbox.merge.hunks`).
    id: str
    hunks: list[HunkRecord]
    #: An added path that is a deleted one renamed (as ``diff`` shows it): the old path, else None.
    renamed_from: str | None
    #: A deleted path that lives on at an added one: the new path, else None.
    renamed_to: str | None


@dataclass
class Range:
    """The two trees (or commits) a preview compares."""

    old: str
    new: str
    call_id: str | None = None
    calls: list[str] | None = None


def preview_range(run: Run, call_id: str | None = None, calls: list[str] | None = None) -> Range:
    """What to compare: what the run (or the selected calls) brings (:func:`sandbox.merge.brings.brings`),
    as two trees: the base with each changed path at its state before the first selected call that
    changed it, and at its state after the last one. For the whole run that is the base against the
    run's head after rollbacks and undos; apply writes exactly the second tree's states."""
    names = list(calls or ([call_id] if call_id else []))
    brought = brings.brings(run, calls=names or None, check=False)
    if names and not brought.chains:
        if len(names) == 1 and ".." not in names[0]:
            entry = select.resolve_name(run.state(), run.run_id, names[0])
            raise SandboxError(f"Call {entry.call_id} ({entry.tool_name}, {entry.status.value}) changed no files.")
        raise SandboxError(f"The selected calls of run {run.run_id} changed no files.")
    old, new = brings.trees(run, brought)
    single = brought.calls[0] if len(names) == 1 and ".." not in names[0] and brought.calls else None
    return Range(old, new, single, brought.calls if names else None)


def diff_text(
    run: Run, rng: Range, stat: bool = False, color: bool = False, spec: Pathspec | None = None, renames: bool = True
) -> str:
    """A git-style unified diff (or ``--stat``) between the range's trees, limited to ``spec``."""
    args = [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "-M" if renames else "--no-renames",
        f"--color={'always' if color else 'never'}",
    ]
    if stat:
        args.append("--stat")
    repo = run.repo
    visible = [
        c
        for c in objects.diff_trees(repo, _tree_of(repo, rng.old), _tree_of(repo, rng.new))
        if not run.is_private(c.path)
    ]
    if spec is not None and spec.positive:
        # As git refuses a pathspec that matches no file, so does diff (in-process, O(changed paths)).
        select.check_matched(spec, [c.path for c in visible], run.run_id)
    # git reads packed objects without checking their hashes: a garbled blob would be shown as if it
    # were what the agent wrote. The blobs of every file shown are read verified first (O(shown)).
    _verify(repo, [c for c in visible if spec is None or spec.matches(c.path)])
    args += [rng.old, rng.new, "--"]
    items = spec.items if spec is not None else []
    positive = [i.to_git() for i in items if not i.exclude]
    negative = [i.to_git() for i in items if i.exclude]
    # The sandbox's own files are never part of the agent's patch (see sandbox.run.include).
    owned = [":(exclude,literal,top)" + p for p in _owned(run)]
    if positive or negative or owned:
        args += [*(positive or [":(top)"]), *negative, *owned]
    return git(args, cwd=run.project.common_dir).stdout.decode(errors="surrogateescape")


def _owned(run: Run) -> list[str]:
    from sandbox.run.include import private_paths

    return private_paths(run.dir)


def _verify(repo: pygit2.Repository, changes: list[objects.TreeChange]) -> None:
    """Read each side's blob of ``changes`` hash-checked: :class:`~sandbox.store.objects.DamagedObjectError`
    on a missing or garbled one."""
    for change in changes:
        for entry in (change.old, change.new):
            if entry is not None and entry.mode != objects.MODE_GITLINK:
                objects.read_blob(repo, entry.oid)


def _tree_of(repo: pygit2.Repository, oid: str) -> str | None:
    obj = repo.get(oid)
    if isinstance(obj, pygit2.Commit):
        return str(obj.tree_id)
    return oid


def diff_files(run: Run, rng: Range, spec: Pathspec | None = None) -> list[FileRecord]:
    """Per-file records of the range: path, status, blob ids, modes, binary flag, patch text, and the
    file's and its hunks' stable ids (see :mod:`sandbox.merge.hunks`). In-process: no git process."""
    repo = run.repo
    old_tree = _tree_of(repo, rng.old)
    new_tree = _tree_of(repo, rng.new)
    changes = [
        c
        for c in objects.diff_trees(repo, old_tree, new_tree)
        if not run.is_private(c.path) and (spec is None or spec.matches(c.path))
    ]
    if spec is not None:
        select.check_matched(spec, [c.path for c in changes], run.run_id)
    _verify(repo, changes)  # as for diff_text: only what is shown, each blob hash-checked
    texts: dict[str, bytes] = {}
    binary: set[str] = set()
    if changes:
        # One libgit2 tree diff for the patch texts (libgit2 skips identical subtrees, as git does); a patch,
        # which reads both blobs, is made only for the files shown.
        diff = repo.diff(old_tree or objects.EMPTY_TREE_HEX, new_tree or objects.EMPTY_TREE_HEX)
        wanted = {c.path for c in changes}
        for index, delta in enumerate(diff.deltas):
            path = os.fsdecode(delta.new_file.raw_path or delta.old_file.raw_path)
            patch = diff[index] if path in wanted else None
            if patch is not None:
                texts[path] = texts.get(path, b"") + patch.data
                if patch.delta.is_binary:
                    binary.add(path)
    out: list[FileRecord] = []
    for change in changes:
        status = "added" if change.old is None else "deleted" if change.new is None else "modified"
        if change.old and change.new and change.old.oid == change.new.oid:
            status = "mode"
        fh = hunks.file_hunks(repo, change.path, change.old, change.new)
        out.append(
            {
                "path": change.path,
                "status": status,
                "before_hash": change.old.oid if change.old else None,
                "after_hash": change.new.oid if change.new else None,
                "before_mode": f"{change.old.mode:06o}" if change.old else None,
                "after_mode": f"{change.new.mode:06o}" if change.new else None,
                "binary": change.path in binary,
                "patch": texts.get(change.path, b"").decode(errors="replace"),
                "id": fh.id,
                "hunks": [
                    {
                        "id": h.id,
                        "header": h.header,
                        "text": hunks.hunk_text(h).decode(errors="replace"),
                        "changes": [{"id": c.id, "header": c.header} for c in h.changes],
                    }
                    for h in fh.hunks
                ],
                "renamed_from": None,
                "renamed_to": None,
            }
        )
    _pair_renames(repo, out, changes)
    return out


def _pair_renames(repo: pygit2.Repository, out: list[FileRecord], changes: list[objects.TreeChange]) -> None:
    """Mark deleted and added records that are one rename (:func:`sandbox.merge.renames.find`)."""
    from sandbox.merge import renames

    deleted = {c.path: c.old for c in changes if c.new is None}
    added = {c.path: c.new for c in changes if c.old is None}
    if not deleted or not added:
        return
    pairs = renames.find(repo, deleted, added)
    by_path = {f["path"]: f for f in out}
    for old, new in pairs.items():
        by_path[old]["renamed_to"] = new
        by_path[new]["renamed_from"] = old
