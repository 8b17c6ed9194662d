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
    same = True  # the chain is unchanged so far: its commits are kept (a fetch sees a fast-forward)
    for i, commit in enumerate(chain):
        head, _, body = commit.message.partition("\n\n")
        original = json.loads(body)
        event = edit(i, json.loads(body))
        if event is None:
            same = False
            continue
        more = extra_parents(i) if extra_parents is not None else []
        if same and event == original and not more:
            prev = str(commit.id)
            continue
        same = False
        root = head.startswith("sandbox-event-root")
        extras = [str(p) for p in (commit.parent_ids if root else commit.parent_ids[1:])]
        for key in ("commit", "parent_commit"):
            value = event.get(key)
            if isinstance(value, str) and _is_commit(repo, value) and value not in extras:
                extras.append(value)
        extras += [p for p in more if p not in extras]
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

    Any mode, name and object id go in as given (a gitlink, a tree mode, a missing object, ``.git ``):
    the trees are written as raw objects, past libgit2's own checks, as a forger's git would.
    """
    repo = pygit2.Repository(str(bare))
    base = repo[parent]
    assert isinstance(base, pygit2.Commit)
    tree = _edit(repo, str(base.tree_id), changes)
    return str(repo.create_commit(None, SIG, SIG, "forged\n", pygit2.Oid(hex=tree), [parent]))


def _entries(repo: pygit2.Repository, tree: str | None) -> dict[str, tuple[int, str]]:
    if tree is None:
        return {}
    kind, data = repo.odb.read(tree)
    out: dict[str, tuple[int, str]] = {}
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        out[data[space + 1 : nul].decode("utf-8", "surrogateescape")] = (
            int(data[pos:space], 8),
            data[nul + 1 : nul + 21].hex(),
        )
        pos = nul + 21
    return out


def _edit(repo: pygit2.Repository, tree: str | None, changes: dict[str, tuple[int, str] | None]) -> str:
    entries = _entries(repo, tree)
    below: dict[str, dict[str, tuple[int, str] | None]] = {}
    for path, entry in changes.items():
        name, sep, rest = path.partition("/")
        if sep:
            below.setdefault(name, {})[rest] = entry
        elif entry is None:
            entries.pop(name, None)
        else:
            entries[name] = entry
    for name, sub in below.items():
        existing = entries.get(name)
        subtree = existing[1] if existing is not None and existing[0] == 0o040000 else None
        entries[name] = (0o040000, _edit(repo, subtree, sub))
    items = sorted(
        entries.items(),
        key=lambda kv: kv[0].encode("utf-8", "surrogateescape") + (b"/" if kv[1][0] == 0o040000 else b""),
    )
    data = b"".join(
        b"%o %s\0" % (mode, name.encode("utf-8", "surrogateescape")) + bytes.fromhex(oid) for name, (mode, oid) in items
    )
    return str(repo.odb.write(pygit2.enums.ObjectType.TREE, data))
