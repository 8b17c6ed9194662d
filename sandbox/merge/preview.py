"""Previewing a run's patch: the whole run against its base, or one call against its parent.

Text diffs come from ``git diff`` (run on the repository's git dir, no working tree involved):
it is the format users read every day, with color, renames detected as git detects them (or exact
paths with ``renames=False``), names that are not UTF-8 (which pygit2's patch text cannot carry),
and binary files named, not dumped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.errors import SandboxError
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.gitcli import git


@dataclass
class Range:
    """The two commits a preview compares."""

    old: str
    new: str
    call_id: str | None = None


def preview_range(run: Run, call_id: str | None = None) -> Range:
    """The commits to compare: base..head for the run, parent..commit for one call."""
    if call_id is None:
        return Range(run.base, run.head())
    entry = run.entry(call_id)
    if not entry.commit or not entry.parent_commit:
        raise SandboxError(f"Call {call_id} ({entry.tool_name}, {entry.status.value}) changed no files.")
    return Range(entry.parent_commit, entry.commit, call_id)


def diff_text(run: Run, rng: Range, stat: bool = False, color: bool = False, renames: bool = True) -> str:
    """A git-style unified diff (or ``--stat``) between the range's commits."""
    args = [
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "-M" if renames else "--no-renames",
        f"--color={'always' if color else 'never'}",
    ]
    if stat:
        args.append("--stat")
    args += [rng.old, rng.new, "--"]
    owned = _owned(run)
    if owned:
        # The sandbox's own files are never part of the agent's patch (see sandbox.run.include).
        args += [":(top)", *(":(exclude,literal,top)" + p for p in owned)]
    return git(args, cwd=run.project.common_dir).stdout.decode(errors="surrogateescape")


def _owned(run: Run) -> list[str]:
    from sandbox.run.include import private_paths

    return private_paths(run.dir)


def diff_files(run: Run, rng: Range) -> list[dict[str, Any]]:
    """Per-file records of the range: path, status, blob ids, modes, binary flag and patch text."""
    repo = run.repo
    old_tree = objects.commit_tree(repo, rng.old)
    new_tree = objects.commit_tree(repo, rng.new)
    out = []
    for change in objects.diff_trees(repo, old_tree, new_tree):
        if run.is_private(change.path):
            continue
        status = "added" if change.old is None else "deleted" if change.new is None else "modified"
        if change.old and change.new and change.old.oid == change.new.oid:
            status = "mode"
        proc = git(
            [
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                "--color=never",
                rng.old,
                rng.new,
                "--",
                ":(literal)" + change.path,
            ],
            cwd=run.project.common_dir,
        )
        text = proc.stdout.decode(errors="replace")
        out.append(
            {
                "path": change.path,
                "status": status,
                "before_hash": change.old.oid if change.old else None,
                "after_hash": change.new.oid if change.new else None,
                "before_mode": f"{change.old.mode:06o}" if change.old else None,
                "after_mode": f"{change.new.mode:06o}" if change.new else None,
                "binary": "Binary files " in text and "\n@@" not in text,
                "patch": text,
            }
        )
    return out
