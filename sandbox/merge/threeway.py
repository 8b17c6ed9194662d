"""Three-way merges (``apply --3way``, ``sandbox conflicts``): git's own markers, from ``git merge-file``.

A text file both the user and the agent changed can be merged instead of refused: :func:`merge`
turns such a conflict into a ``merge`` verdict (:func:`sandbox.merge.decide.merged`) whose result
is stored as a blob before anything is written; :func:`merge_text` is the merge itself, shared with
``sandbox conflicts`` (which shows its diff3 regions and writes nothing).
"""

from __future__ import annotations

import os
import tempfile

from sandbox.errors import SandboxError
from sandbox.merge import decide
from sandbox.merge.planned import PlannedPath
from sandbox.run.run import Run
from sandbox.store import convert, objects
from sandbox.store.gitcli import git
from sandbox.store.objects import MODE_EXEC, MODE_FILE, Entry
from sandbox.store.project import Project

#: Bytes looked at for a NUL, as git does, to call a file binary.
BINARY_SNIFF = 8000


def _is_text(data: bytes) -> bool:
    return b"\0" not in data[:BINARY_SNIFF]


def merge(run: Run, root: str, p: PlannedPath) -> None:
    """Three-way merge of a text file both sides changed; on success the path becomes a merge."""
    base, agent, user = p.base, p.agent, p.user.entry
    gaps = any(p.steps[j].after != p.steps[j + 1].before for j in range(len(p.steps) - 1))
    regular = (MODE_FILE, MODE_EXEC)
    if gaps or user is None or agent is None or p.user.kind != "file" or agent.mode not in regular:
        p.hint = "--3way merges only text files present on both sides; " + p.hint
        return
    if base is not None and base.mode not in regular:
        return
    base_mode = base.mode if base else MODE_FILE
    if user.mode != base_mode and agent.mode != base_mode and user.mode != agent.mode:
        return
    mode = user.mode if user.mode != base_mode else agent.mode
    repo = run.repo
    with open(os.path.join(root, p.path), "rb") as fh:
        ours = convert.for_tree(root).clean_bytes(p.path, fh.read())
    theirs = objects.read_blob(repo, agent.oid)
    ancestor = objects.read_blob(repo, base.oid) if base else b""
    if not (_is_text(ours) and _is_text(theirs) and _is_text(ancestor)):
        p.reason += " (binary: --3way cannot merge it)"
        return
    merged, conflicts = merge_text(run.project, ours, ancestor, theirs)
    decide.merged(p, Entry(mode, objects.write_blob(repo, merged)), markers=conflicts > 0)


def merge_text(project: Project, ours: bytes, base: bytes, theirs: bytes, diff3: bool = False) -> tuple[bytes, int]:
    """Merge three texts with git-style conflict markers; returns (result, number of conflicts).

    Runs ``git merge-file``: libgit2 (pygit2) has no binding to merge raw contents, only blobs of
    an index, so the git command on three temp files is the one way to get git's own markers. It
    runs inside the repository, so its ``merge.conflictStyle`` (diff3, zdiff3) applies as it does
    to ``git merge``; ``diff3`` asks for the base section whatever the config says. The labels are
    ``yours``, ``base`` and ``agent``.
    """
    scratch = os.path.join(project.state_dir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        names = []
        for name, data in (("yours", ours), ("base", base), ("agent", theirs)):
            path = os.path.join(tmp, name)
            with open(path, "wb") as fh:
                fh.write(data)
            names.append(path)
        style = ["--diff3"] if diff3 else []
        args = ["merge-file", "-p", *style, "-L", "yours", "-L", "base", "-L", "agent", *names]
        proc = git(args, cwd=tmp, check=False)
    if proc.returncode < 0 or proc.returncode > 127:
        raise SandboxError(f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout, proc.returncode
