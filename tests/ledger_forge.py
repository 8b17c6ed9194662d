"""Forging a run's record in a bare remote, as someone who controls a shared remote could.

A ledger is a chain of commits whose messages carry the events as JSON (see sandbox.store.ledger).
:func:`rewrite` re-writes that chain with some events changed (its trees, the ledger's key among them,
stay), and :func:`commit_with` makes a commit of a tree edited from a parent's, with any modes and
object ids, so an event can point at it. Only pygit2 on the bare repository: what a plain push
of hand-made objects would leave there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2

Edit = Callable[[int, dict[str, Any]], dict[str, Any] | None]

SIG = pygit2.Signature("forger", "forger@example.com", 1_700_000_000, 0)


def ledger_ref(run_id: str) -> str:
    return f"refs/sandbox/{run_id}/ledger"


def events(bare: Path, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The ledger's events oldest first: (commit id, event as JSON data)."""
    repo = pygit2.Repository(str(bare))
    out = []
    oid: pygit2.Oid | None = repo.references[ledger_ref(run_id)].target  # type: ignore[assignment]
    while oid is not None:
        commit = repo[oid]
        assert isinstance(commit, pygit2.Commit)
        head, _, body = commit.message.partition("\n\n")
        out.append((str(commit.id), json.loads(body)))
        oid = None if head.startswith("sandbox-event-root") or not commit.parent_ids else commit.parent_ids[0]
    out.reverse()
    return out


def rewrite(bare: Path, run_id: str, edit: Edit, extra_parents: Callable[[int], list[str]] | None = None) -> str:
    """Re-write the run's ledger in ``bare`` with ``edit(index, event)`` applied to each event.

    ``edit`` returns the new event (or None to drop it from the chain). Each new commit keeps the
    tree of the old one; its first parent is the previous new commit, the others are the old ones
    plus the commits the new event names (so they travel with a fetch). Returns the new tip.
    """
    repo = pygit2.Repository(str(bare))
    tip = repo.references[ledger_ref(run_id)].target
    chain: list[pygit2.Commit] = []
    oid: pygit2.Oid | None = tip  # type: ignore[assignment]
    while oid is not None:
        commit = repo[oid]
        assert isinstance(commit, pygit2.Commit)
        chain.append(commit)
        head = commit.message.partition("\n\n")[0]
        oid = None if head.startswith("sandbox-event-root") or not commit.parent_ids else commit.parent_ids[0]
    chain.reverse()
    prev: str | None = None
    for i, commit in enumerate(chain):
        head, _, body = commit.message.partition("\n\n")
        event = edit(i, json.loads(body))
        if event is None:
            continue
        root = head.startswith("sandbox-event-root")
        extras = [str(p) for p in (commit.parent_ids if root else commit.parent_ids[1:])]
        for key in ("commit", "parent_commit"):
            value = event.get(key)
            if isinstance(value, str) and _is_commit(repo, value) and value not in extras:
                extras.append(value)
        if extra_parents is not None:
            extras += [p for p in extra_parents(i) if p not in extras]
        prefix = "sandbox-event" if prev is not None else "sandbox-event-root"
        message = f"{prefix} {event.get('kind', '')}\n\n{json.dumps(event)}\n"
        parents = ([prev] if prev else []) + [p for p in extras if p != prev]
        prev = str(repo.create_commit(None, SIG, SIG, message, commit.tree_id, parents))
    assert prev is not None
    repo.references.create(ledger_ref(run_id), prev, force=True)
    return prev


def _is_commit(repo: pygit2.Repository, oid: str) -> bool:
    try:
        return isinstance(repo.get(oid), pygit2.Commit)
    except (ValueError, pygit2.GitError):
        return False


def blob(bare: Path, data: bytes) -> str:
    """Store ``data`` as a blob in ``bare``; its id."""
    return str(pygit2.Repository(str(bare)).create_blob(data))


def commit_with(bare: Path, parent: str, changes: dict[str, tuple[int, str] | None]) -> str:
    """A commit on ``parent`` whose tree is the parent's with ``changes`` ({path: (mode, oid) or None}).

    Any mode and any object id go in as given (a gitlink, a tree mode, a missing object): the
    remote's object store is the forger's.
    """
    repo = pygit2.Repository(str(bare))
    base = repo[parent]
    assert isinstance(base, pygit2.Commit)
    tree = _edit(repo, base.tree, changes)
    return str(repo.create_commit(None, SIG, SIG, "forged\n", tree, [parent]))


def _edit(repo: pygit2.Repository, tree: pygit2.Tree | None, changes: dict[str, tuple[int, str] | None]) -> pygit2.Oid:
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    below: dict[str, dict[str, tuple[int, str] | None]] = {}
    for path, entry in changes.items():
        name, sep, rest = path.partition("/")
        if sep:
            below.setdefault(name, {})[rest] = entry
        elif entry is None:
            if builder.get(name) is not None:
                builder.remove(name)
        else:
            mode, oid = entry
            builder.insert(name, pygit2.Oid(hex=oid), mode)
    for name, sub in below.items():
        existing = builder.get(name)
        is_tree = existing is not None and existing.filemode == pygit2.enums.FileMode.TREE
        subtree = repo[existing.id] if existing is not None and is_tree else None
        builder.insert(name, _edit(repo, subtree, sub), pygit2.enums.FileMode.TREE)  # type: ignore[arg-type]
    return builder.write()
