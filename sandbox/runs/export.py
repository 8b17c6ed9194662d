"""A run as an ordinary branch: one commit per call that changed files, on top of your HEAD at start.

For a pull-request workflow (and to keep the agent's history after ``drop``): the branch starts at
the commit your working tree had checked out when the run started, and each recorded call that
changed files and was not undone in the run becomes one commit setting those files to the call's result.
Each commit is authored by the agent (``sandbox agent``) at the call's time; its message says the
tool, the command and the call (``Sandbox-Run``/``Sandbox-Call`` trailers).

Only the changes the calls recorded are on the branch: uncommitted changes of yours that the
snapshot held at start are not, except in files a call changed (the agent's version of such a
file was made from yours): those come first, as one commit authored by you, so the agent's
commits hold only the agent's changes. The sandbox's own files are never exported.

Only ``refs/heads/NAME`` is written, in one reference update; your HEAD, index, working tree and
every other ref are left as they are. An existing branch is replaced only with ``force``, and
never a branch checked out in one of the repository's working trees.
"""

from __future__ import annotations

import datetime
import os
import shlex
from dataclasses import dataclass, field

import pygit2

from sandbox import escape
from sandbox.errors import SandboxError, UsageError
from sandbox.models import LedgerEntry
from sandbox.run.run import Run
from sandbox.store import lfsstore, objects, repository, trailers

AGENT_NAME = "sandbox agent"
AGENT_EMAIL = "sandbox@localhost"
SUBJECT_WIDTH = 72


class BranchExistsError(SandboxError):
    """The branch exists and ``force`` was not given (or it is checked out: never replaced)."""


@dataclass
class BranchExport:
    """What :func:`export` made."""

    branch: str
    ref: str
    tip: str
    base: str | None
    commits: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    replaced: str | None = None
    #: True when your tree had uncommitted changes at start (they are not on the branch).
    snapshot_differs: bool = False


def export(run: Run, name: str, force: bool = False) -> BranchExport:
    """Write the run's calls as a branch ``name`` of per-call commits on your HEAD at start."""
    repo = run.repo
    ref = f"refs/heads/{name}"
    if not _valid_branch_name(ref) or name.startswith("-"):
        raise UsageError(f"{name!r} is not a valid branch name; see 'git check-ref-format --branch'.")
    existing = repo.references.get(ref)
    if existing is not None:
        where = checked_out(run.project.common_dir, ref)
        if where is not None:
            raise BranchExistsError(
                f"Branch {name} is checked out in {where}; it is never replaced. Choose another name."
            )
        if not force:
            raise BranchExistsError(
                f"Branch {name} already exists (at {str(existing.target)[:12]}); choose another name, "
                "or replace it with --force."
            )
    live = run.verified_state().live_calls()
    base = run.info.head
    parent = base
    tree = objects.commit_tree(repo, base) if base else None
    result = BranchExport(name, ref, base or "", base, replaced=str(existing.target) if existing else None)
    result.snapshot_differs = objects.commit_tree(repo, run.base) != tree
    with objects.git_writes():
        if result.snapshot_differs:
            # Your uncommitted edits to the files the calls change come first, as your own commit:
            # the agent's commits then hold only the agent's changes.
            touched = {f.path for e in live for f in e.files if not run.is_private(f.path)}
            yours = _snapshot_entries(repo, run.base, tree, touched)
            if yours:
                new_tree = objects.edit_tree(repo, tree, yours)
                sig = _user_signature(repo, run.info.created_at)
                msg = trailers.message(
                    f"Your uncommitted changes to {len(yours)} file(s) when run {run.run_id} started",
                    [(trailers.RUN, run.run_id)],
                    body="The agent's commits that follow were made on top of them.",
                )
                commit = str(repo.create_commit(None, sig, sig, msg, new_tree, [parent] if parent else []))
                parent, tree = commit, new_tree
                result.commits.append(commit)
        blobs: list[str] = []
        for entry in live:  # as diff and apply: not undone in the run, not taken out by rollback --files
            call_id = entry.call_id
            assert entry.commit is not None  # a live call has its commit
            # The call's change as its commit holds it, read as diff and apply read it
            # (sandbox.merge.brings.call_changes), not from its event's file list.
            changes = {
                c.path: c.new
                for c in objects.commit_changes(repo, entry.parent_commit, entry.commit)
                if not run.is_private(c.path)
            }
            if not changes:
                continue
            blobs += [
                e.oid for e in changes.values() if e is not None and e.mode in (objects.MODE_FILE, objects.MODE_EXEC)
            ]
            new_tree = objects.edit_tree(repo, tree, changes)
            if new_tree == tree:
                continue
            sig = _signature(entry)
            commit = str(
                repo.create_commit(None, sig, sig, message(run.run_id, entry), new_tree, [parent] if parent else [])
            )
            parent, tree = commit, new_tree
            result.commits.append(commit)
            result.calls.append(call_id)
        if parent is None:
            raise SandboxError(
                f"Run {run.run_id} started in a repository without commits and no call changed files; "
                "there is nothing to put on a branch."
            )
        _give_to_user(run, result.commits, blobs)
        if existing is not None:
            repo.references.create(ref, parent, force=True)
        else:
            repo.references.create(ref, parent)
    result.tip = parent
    return result


def _give_to_user(run: Run, commits: list[str], blobs: list[str]) -> None:
    """Your branch's commits, trees and blobs in your own store, not only in the run's (give_to_user), and
    the Git LFS contents its files name, which the run's own storage holds (:mod:`sandbox.store.lfsstore`)."""
    repository.give_to_user(run.repo, commits)
    lfsstore.give(run.project.common_dir, run.run_id, _lfs_contents(run.repo, blobs))


def _lfs_contents(repo: pygit2.Repository, blobs: list[str]) -> list[str]:
    """The Git LFS contents named by those of ``blobs`` that are pointers (a header read for the others)."""
    out = []
    for oid in blobs:
        try:
            _kind, size = repo.odb.read_header(oid)
        except (KeyError, ValueError, pygit2.GitError):
            continue
        content = lfsstore.pointer_oid(objects.read_blob(repo, oid)) if size <= lfsstore.POINTER_MAX else None
        if content is not None:
            out.append(content)
    return out


#: A loose ref is a file; its lock file adds ".lock", and most file systems allow 255 bytes a name.
_MAX_COMPONENT = 255 - len(".lock")


def _valid_branch_name(ref: str) -> bool:
    """git's rules (libgit2's check), plus what the file system can hold: UTF-8 (an undecodable byte
    from the command line is not), and no path component too long to be a file."""
    try:
        encoded = ref.encode("utf-8")
    except UnicodeEncodeError:
        return False
    if any(len(part) > _MAX_COMPONENT for part in encoded.split(b"/")):
        return False
    return pygit2.reference_is_valid_name(ref)


def message(run_id: str, entry: LedgerEntry) -> str:
    """The commit message of one call: its tool and command, then trailers naming run and call; what
    the agent wrote in it escaped (:mod:`sandbox.escape`)."""
    what = entry.tool_name
    inputs = entry.input
    detail = ""
    if isinstance(inputs, dict) and isinstance(inputs.get("argv"), list):
        detail = shlex.join(str(a) for a in inputs["argv"])
    elif isinstance(inputs, dict) and isinstance(inputs.get("command"), str):
        detail = inputs["command"]
    elif isinstance(inputs, dict) and isinstance(inputs.get("path") or inputs.get("file_path"), str):
        detail = inputs.get("path") or inputs["file_path"]
    elif entry.summary:
        detail = entry.summary
    first = (detail.strip().splitlines() or [""])[0]
    lines = len(detail.strip().splitlines())
    if lines > 1 and isinstance(inputs, dict) and isinstance(inputs.get("argv"), list):
        # A multi-line argument (python -c '...') is shown by its first line, quoted whole.
        shown = [str(a).strip().splitlines()[0] + " …" if "\n" in str(a).strip() else str(a) for a in inputs["argv"]]
        first = shlex.join(shown)
    elif lines > 1:
        first = first.rstrip() + " …"
    # The agent's words, each line made safe: 'git log' shows a message to a terminal as it is.
    what, first = escape.text(what), escape.text(first)
    subject = f"{what}: {first}" if first else what
    if len(subject) > SUBJECT_WIDTH:
        subject = subject[: SUBJECT_WIDTH - 1] + "…"
    body = []
    if detail.strip() and detail.strip() != first:
        body += [escape.message(detail.strip()), ""]
    files = ", ".join(escape.path(f.path) for f in entry.files[:10]) + (" …" if len(entry.files) > 10 else "")
    body.append(f"Changed: {files}")
    keys = [(trailers.RUN, run_id), (trailers.CALL, escape.text(entry.call_id)), (trailers.SEQ, entry.seq)]
    return trailers.message(subject, [*keys, (trailers.STATUS, entry.status.value)], body="\n".join(body))


def _snapshot_entries(
    repo: pygit2.Repository, snapshot: str, head_tree: str | None, paths: set[str]
) -> dict[str, objects.Entry | None]:
    """The entries of ``paths`` where the run's snapshot differs from your HEAD's tree."""
    snap_tree = objects.commit_tree(repo, snapshot)
    out: dict[str, objects.Entry | None] = {}
    for path in sorted(paths):
        mine = _file(repo, snap_tree, path)
        if mine != _file(repo, head_tree, path):
            out[path] = mine
    return out


def _file(repo: pygit2.Repository, tree: str | None, path: str) -> objects.Entry | None:
    entry = objects.lookup(repo, tree, path)
    return None if entry is None or entry.is_tree else entry


def _user_signature(repo: pygit2.Repository, when: datetime.datetime) -> pygit2.Signature:
    """Your identity from the repository's git config (user.name / user.email), else a plain one."""
    config = repo.config
    name = email = None
    try:
        name = config["user.name"]
        email = config["user.email"]
    except (KeyError, ValueError):
        pass
    name = (name or "").strip() or "you"
    email = (email or "").strip().replace("<", "").replace(">", "") or "you@localhost"
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return pygit2.Signature(name.replace("<", "").replace(">", ""), email, int(when.timestamp()), 0)


def _signature(entry: LedgerEntry) -> pygit2.Signature:
    when = entry.finished_at or entry.started_at or entry.created_at
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return pygit2.Signature(AGENT_NAME, AGENT_EMAIL, int(when.timestamp()), 0)


def checked_out(common_dir: str, ref: str) -> str | None:
    """The working tree (or git dir) that has ``ref`` checked out, else None."""
    heads = [(os.path.dirname(common_dir), os.path.join(common_dir, "HEAD"))]
    worktrees = os.path.join(common_dir, "worktrees")
    if os.path.isdir(worktrees):
        for name in sorted(os.listdir(worktrees)):
            admin = os.path.join(worktrees, name)
            where = admin
            try:
                with open(os.path.join(admin, "gitdir")) as fh:
                    where = os.path.dirname(fh.read().strip())
            except OSError:
                pass
            heads.append((where, os.path.join(admin, "HEAD")))
    for where, head in heads:
        try:
            with open(head) as fh:
                if fh.read().strip() == f"ref: {ref}":
                    return where
        except OSError:
            continue
    return None
