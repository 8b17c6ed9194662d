"""Bringing the ignored files an agent needs (``.env``, ``node_modules``, virtualenvs) into a new worktree.

``git worktree add`` checks out tracked files only. The user lists the ignored paths to bring along
in ``.worktreeinclude`` (gitignore syntax, as Claude Code reads it) or ``include = [...]`` in
``.sandbox.toml`` / ``[tool.sandbox]``: those are *copied* (the default). ``link = [...]`` names big
directories to *symlink* instead: a link shares state with the user's tree, so an agent writing
there writes into the user's files, and the report says so.

Only paths that git ignores in the user's tree are brought: anything else is already part of the
run's snapshot. Copies stay ignored in the worktree, so they are never captured; links are not
ignored by a ``dir/`` pattern (a symlink is not a directory to git), so their paths go on the run's
private list, which capture never records.

The per-run private list (``<run dir>/private.json``) also holds files the sandbox itself puts in
the worktree, such as an agent's local hook settings (``.claude/settings.local.json``,
``.gemini/settings.json``). It is the run's one list of sandbox-owned paths: recording (a call's
files, ``agent_session`` cuts), drift at resume, ``rollback --files``, ``diff`` and ``apply`` all
leave them out (through ``Run.is_private``). A path goes on the list *before* the sandbox writes
it, so no cut can catch it in between.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field

from sandbox.errors import PathRefusedError
from sandbox.run import config
from sandbox.store import fsutil, paths

PRIVATE_FILE = "private.json"


@dataclass
class IncludeReport:
    """What :func:`populate` brought into the worktree."""

    copied: list[str] = field(default_factory=list)
    linked: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def populate(workdir: str, worktree: str, run_dir: str) -> IncludeReport:
    """Copy (or link) the ignored paths the user's settings name from ``workdir`` into ``worktree``."""
    report = IncludeReport()
    try:
        cfg = config.load(workdir)
    except config.ConfigError as exc:
        report.warnings.append(f"settings ignored: {exc.message}")
        return report
    if not cfg.include and not cfg.link:
        return report
    linked = _ignored_matches(workdir, cfg.link) if cfg.link else []
    copied = [p for p in _ignored_matches(workdir, cfg.include) if not _under_any(p, linked)] if cfg.include else []
    for rel in copied:
        _bring(workdir, worktree, rel, link=False, report=report)
    for rel in linked:
        _bring(workdir, worktree, rel, link=True, report=report)
    if report.linked:
        add_private(run_dir, report.linked)
        report.warnings.append(
            f"linked {', '.join(report.linked)} from your tree: the agent shares these with you, "
            "and what it writes there changes your files directly (not recorded, not undoable)."
        )
    return report


def _ignored_matches(workdir: str, patterns: list[str]) -> list[str]:
    """Untracked paths of ``workdir`` matching ``patterns`` that git ignores (whole dirs as ``dir``)."""
    from sandbox.store.gitcli import git

    # git's own walk: it stops at a directory that matches as a whole (--directory), where
    # libgit2's status would list every file below node_modules.
    args = ["ls-files", "-z", "--others", "--ignored", "--directory"]
    for pattern in patterns:
        args += ["-x", pattern]
    listed = [os.fsdecode(p) for p in git(args, cwd=workdir).stdout.split(b"\0") if p]
    if not listed:
        return []
    # Keep only what the user's own ignore rules exclude: the rest is already in the snapshot.
    proc = git(["check-ignore", "-z", "--stdin"], cwd=workdir, check=False, input=b"\0".join(map(os.fsencode, listed)))
    ignored = sorted({os.fsdecode(p).rstrip("/") for p in proc.stdout.split(b"\0") if p})
    out: list[str] = []
    for rel in ignored:
        if not _under_any(rel, out):
            out.append(rel)
    return out


def _under_any(rel: str, roots: list[str]) -> bool:
    return any(rel == r or rel.startswith(r + "/") for r in roots)


def _bring(workdir: str, worktree: str, rel: str, *, link: bool, report: IncludeReport) -> None:
    try:
        rel = paths.normalize(rel)
        paths.check_parents(worktree, rel)
    except PathRefusedError as exc:
        report.warnings.append(f"skipped {rel}: {exc.message}")
        return
    src = os.path.join(workdir, rel)
    dst = os.path.join(worktree, rel)
    if os.path.lexists(dst):
        report.warnings.append(f"skipped {rel}: it already exists in the worktree.")
        return
    try:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if link:
            os.symlink(os.path.abspath(src), dst)
            report.linked.append(rel)
        elif os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, dst, symlinks=True)
            report.copied.append(rel)
            # A virtualenv names its place in absolute paths: the copy's scripts would run yours.
            from sandbox.run import venvcopy

            venvcopy.retarget(dst, os.path.abspath(src), os.path.abspath(dst), workdir, worktree)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
            report.copied.append(rel)
    except OSError as exc:
        report.warnings.append(f"could not bring {rel} ({exc.strerror or exc}).")


# -- the run's private paths -------------------------------------------------------------------

_cache: dict[str, tuple[tuple[int, int], list[str]]] = {}


def private_paths(run_dir: str) -> list[str]:
    """The run's private paths: never captured, never part of the agent's patch."""
    path = os.path.join(run_dir, PRIVATE_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return []
    stamp = (st.st_mtime_ns, st.st_ino)
    cached = _cache.get(path)
    if cached and cached[0] == stamp:
        return cached[1]
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        found = [p for p in data.get("paths", []) if isinstance(p, str)]
    except (OSError, ValueError, AttributeError):
        found = []
    _cache[path] = (stamp, found)
    return found


def add_private(run_dir: str, rels: list[str]) -> None:
    """Add paths to the run's private list (durably; idempotent)."""
    current = private_paths(run_dir)
    merged = sorted(set(current) | {paths.normalize(r) for r in rels})
    if merged == current:
        return
    os.makedirs(run_dir, exist_ok=True)
    fsutil.write_json_file(os.path.join(run_dir, PRIVATE_FILE), json.dumps({"version": 1, "paths": merged}))
    with contextlib.suppress(KeyError):
        del _cache[os.path.join(run_dir, PRIVATE_FILE)]


def is_private(run_dir: str, rel: str) -> bool:
    """True when ``rel`` is one of the run's private paths or lies below one."""
    return _under_any(rel, private_paths(run_dir))
