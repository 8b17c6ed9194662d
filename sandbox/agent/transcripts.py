"""The agent's conversation, kept with the run: content-addressed, deduplicated, mapped to the ledger.

A real agent writes its own transcript (Claude Code under ``<config>/projects/<cwd>/<session>.jsonl``,
see :mod:`sandbox.agent.sessions` for each agent). :func:`capture` copies it into the run's git
at the end of each ``sandbox run`` session, at ``sandbox checkpoint``, and before a ``resume
--continue`` or a ``rewind``, so the conversation is part of the run's evidence: it travels with
``sandbox push``/``fetch`` and outlives the agent's own files.

Storage: the transcript's bytes are cut at line ends into chunks (a boundary after a line whose
hash says so, at least :data:`MIN_CHUNK` and at most :data:`MAX_CHUNK` bytes), each chunk a blob.
The cut is decided left to right from the data alone, so a transcript that only grew (agents
append) cuts its old part into the same chunks: a later copy writes only the new chunks plus the
one that was still open (O(new bytes), ``bench/cases/transcripts.py``). One copy is a parentless
commit whose tree holds ``index.json`` (:class:`~sandbox.models.TranscriptIndex`: the chunk ids
in order, the size and SHA-256 of the whole, and where each tool use sits) and ``chunks/``. A
``note`` event in the ledger names it and keeps it reachable (the event's commit lists it as a
parent), which is how it travels with the ledger and how the latest copy of a session is found.
A copy equal to the latest one stored is not stored again.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox.errors import SandboxError
from sandbox.models import EventKind, TranscriptIndex, from_json, to_json
from sandbox.store import objects, packs

if TYPE_CHECKING:
    from sandbox.run.run import Run

#: A chunk ends after a line once it holds at least this many bytes and the line's hash agrees ...
MIN_CHUNK = 4096
#: ... and always at this size (a line longer than this is a chunk of its own).
MAX_CHUNK = 256 * 1024
#: One line in this many ends a chunk (past MIN_CHUNK): chunks of a few KB to a few tens of KB.
BOUNDARY = 8
INDEX = "index.json"
CHUNKS = "chunks"
_BLOB = 3


class TranscriptError(SandboxError):
    """A stored transcript is missing or does not read back."""


@dataclass(frozen=True)
class Stored:
    """One stored copy of a transcript: its commit and index."""

    commit: str
    index: TranscriptIndex


def chunk(data: bytes) -> list[bytes]:
    """Cut ``data`` at line ends into chunks; the same prefix always gives the same leading chunks."""
    out: list[bytes] = []
    start = pos = 0
    end = len(data)
    while pos < end:
        nl = data.find(b"\n", pos)
        line_end = end if nl < 0 else nl + 1
        size = line_end - start
        line = data[pos:line_end]
        if size >= MAX_CHUNK or (size >= MIN_CHUNK and zlib.crc32(line) % BOUNDARY == 0):
            out.append(data[start:line_end])
            start = line_end
        pos = line_end
    if start < end:
        out.append(data[start:end])
    return out


def _put_blob(run: Run, data: bytes) -> tuple[str, bool]:
    """Store a blob unless it is there already; (its id, whether it was written)."""
    oid = packs.object_id(_BLOB, data)
    if oid in run.repo.odb:
        return oid, False
    return objects.write_blob(run.repo, data), True


def store(run: Run, agent: str, session: str, data: bytes, calls: dict[str, int], reason: str) -> Stored | None:
    """Store ``data`` as the transcript of ``agent``'s ``session``; None when the latest copy is the same.

    ``calls`` maps tool-use ids to the line their message begins on. Records a ``note`` event that
    names the copy and keeps it reachable.
    """
    digest = hashlib.sha256(data).hexdigest()
    last = latest(run, session)
    if last is not None and last.index.sha256 == digest:
        return None
    pieces = chunk(data)
    entries: dict[str, objects.Entry] = {}
    written = 0
    with run.lock(), objects.batch(run.repo):
        ids = []
        for n, piece in enumerate(pieces):
            oid, new = _put_blob(run, piece)
            written += len(piece) if new else 0
            ids.append(oid)
            entries[f"{n:06d}"] = objects.Entry(objects.MODE_FILE, oid)
        index = TranscriptIndex(
            agent=agent,
            session=session,
            size=len(data),
            sha256=digest,
            lines=data.count(b"\n"),
            chunks=ids,
            calls=calls,
            reason=reason,
        )
        chunks_tree = objects.write_tree(run.repo, entries)
        index_blob, _ = _put_blob(run, to_json(index).encode())
        tree = objects.write_tree(
            run.repo,
            {
                INDEX: objects.Entry(objects.MODE_FILE, index_blob),
                CHUNKS: objects.Entry(objects.MODE_TREE, chunks_tree),
            },
        )
        message = f"sandbox: transcript of {agent} session {session} ({reason})\n\nSandbox-Run: {run.run_id}\n"
        commit = objects.write_commit(run.repo, tree, [], message, objects.now())
        record = {
            "agent": agent,
            "session": session,
            "commit": commit,
            "sha256": digest,
            "size": len(data),
            "new_bytes": written,
            "reason": reason,
        }
        run.record(
            EventKind.note,
            keep=[commit],
            reason=f"stored the transcript of {agent} session {session} ({reason})",
            data={"transcript": record},
            epoch=run.state().epoch,
        )
    return Stored(commit, index)


def records(run: Run) -> list[dict[str, Any]]:
    """Every stored transcript copy the ledger names, oldest first (the ``note`` events' records)."""
    out = []
    for _oid, event in run.events():
        if event.kind == EventKind.note and isinstance(event.data.get("transcript"), dict):
            out.append(dict(event.data["transcript"]))
    return out


def read(run: Run, commit: str) -> Stored:
    """The copy stored at ``commit``."""
    try:
        tree = objects.commit_tree(run.repo, commit)
        found = objects.lookup(run.repo, tree, INDEX)
        if found is None:
            raise ValueError("no index.json")
        index = from_json(TranscriptIndex, objects.read_blob(run.repo, found.oid))
    except (KeyError, ValueError) as exc:
        raise TranscriptError(
            f"The transcript copy {commit[:12]} of run {run.run_id} does not read back ({exc}); "
            f"see 'sandbox verify {run.run_id}'."
        ) from None
    return Stored(commit, index)


def latest(run: Run, session: str) -> Stored | None:
    """The newest stored copy of ``session``'s transcript, or None when none was stored."""
    for record in reversed(records(run)):
        if record.get("session") == session and isinstance(record.get("commit"), str):
            return read(run, record["commit"])
    return None


def sessions(run: Run) -> list[tuple[str, str]]:
    """(agent, session) of every stored transcript, in the order they were first stored."""
    seen: dict[str, str] = {}
    for record in records(run):
        session, agent = record.get("session"), record.get("agent")
        if isinstance(session, str) and isinstance(agent, str) and session not in seen:
            seen[session] = agent
    return [(agent, session) for session, agent in seen.items()]


def load(run: Run, stored: Stored) -> bytes:
    """The transcript's bytes, checked against the SHA-256 it was stored with."""
    try:
        data = b"".join(objects.read_blob(run.repo, oid) for oid in stored.index.chunks)
    except (KeyError, ValueError) as exc:
        raise TranscriptError(f"A chunk of transcript {stored.commit[:12]} is missing ({exc}).") from None
    if hashlib.sha256(data).hexdigest() != stored.index.sha256:
        raise TranscriptError(f"Transcript {stored.commit[:12]} of run {run.run_id} does not match its checksum.")
    return data


def run_sessions(run: Run) -> list[str]:
    """The agent session ids the run's calls ran in, and those stored, the most recently used last."""
    order: dict[str, int] = {}
    for n, (_agent, session) in enumerate(sessions(run)):
        order[session] = n
    entries = run.entries()
    for n, entry in enumerate(entries, start=len(order)):
        if entry.agent_session:
            order.pop(entry.agent_session, None)
            order[entry.agent_session] = n
    return list(order)


def capture(run: Run, homes: Mapping[str, Sequence[str]], reason: str) -> list[Stored]:
    """Store the transcript of every agent session of the run that can be found and changed since.

    ``homes``: each agent's candidate configuration homes (:func:`sandbox.agent.sessions.config_homes`).
    A session whose transcript is nowhere to be found here is skipped (it may live on another machine).
    """
    from sandbox.agent.sessions import AGENTS

    out = []
    for session in run_sessions(run):
        for agent in AGENTS.values():
            path = agent.find(session, homes.get(agent.name, ()))
            if path is None:
                continue
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            stored = store(run, agent.name, session, data, agent.calls(data), reason)
            if stored is not None:
                out.append(stored)
            break
    return out
