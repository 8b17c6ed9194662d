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
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.errors import SandboxError
from sandbox.models import CallStatus, EventKind, TranscriptIndex, from_json, to_json
from sandbox.store import objects, packs, trailers

if TYPE_CHECKING:
    from sandbox.agent.sessions import AgentSessions
    from sandbox.models import Event
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


class ForkError(SandboxError):
    """The conversation cannot be forked at the call asked for (nothing of it was copied)."""


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


def store(
    run: Run,
    agent: str,
    session: str,
    data: bytes,
    calls: dict[str, int],
    reason: str,
    known: list[dict[str, object]] | None = None,
) -> Stored | None:
    """Store ``data`` as the transcript of ``agent``'s ``session``; None when the latest copy is the same.

    ``calls`` maps tool-use ids to the line their message begins on; ``known``: :func:`records`
    when the caller has them. Records a ``note`` event that names the copy and keeps it reachable.
    """
    digest = hashlib.sha256(data).hexdigest()
    last = latest(run, session, known)
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
        message = trailers.message(
            f"sandbox: transcript of {agent} session {session} ({reason})", [(trailers.RUN, run.run_id)]
        )
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


def records(run: Run) -> list[dict[str, object]]:
    """Every stored transcript copy the ledger names, oldest first (the ``note`` events' records).

    As the ledger holds them (a ledger written by an older version may lack a field): a reader checks
    each value it reads."""
    out: list[dict[str, object]] = []
    for _oid, event in run.events_read():
        transcript = event.data.get("transcript") if event.kind == EventKind.note else None
        if isinstance(transcript, dict):
            out.append(dict(transcript))
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


def latest(run: Run, session: str, known: list[dict[str, object]] | None = None) -> Stored | None:
    """The newest stored copy of ``session``'s transcript, or None when none was stored."""
    for record in reversed(records(run) if known is None else known):
        commit = record.get("commit")
        if record.get("session") == session and isinstance(commit, str):
            return read(run, commit)
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
    """The agent session ids the run's calls ran in, the most recently used last (from the fold: cheap)."""
    order: dict[str, None] = {}
    for entry in run.entries():
        if entry.agent_session:
            order.pop(entry.agent_session, None)
            order[entry.agent_session] = None
    return list(order)


def fetched_sessions(run: Run) -> set[str]:
    """The agent sessions only foreign events of the ledger name (events this clone did not write:
    see :mod:`sandbox.store.provenance`).

    Someone else's text: such a session is looked for in the run's own agent homes only, never in
    yours, or a forged id naming one of your own sessions (of another project) would have its
    transcript stored with the run, and sent along with the next ``sandbox push``.
    """
    foreign: set[str] = set()
    own: set[str] = set()
    for _oid, event in run.events_read():
        named: list[object] = []
        if event.call is not None:
            named.append(event.call.agent_session)
        if event.kind == EventKind.note:
            named += [v.get("session") for k in SESSION_NOTES if isinstance(v := event.data.get(k), dict)]
        for session in named:
            if isinstance(session, str) and session:
                (own if event.own() else foreign).add(session)
    return foreign - own


def homes_for(run: Run, session: str, paths: Sequence[str], fetched: set[str]) -> list[str]:
    """Where to look for ``session``'s transcript: ``paths``, or only those in the run's own directory
    when the session is one of ``fetched`` (:func:`fetched_sessions`)."""
    if session not in fetched:
        return list(paths)
    inside = os.path.realpath(run.dir).rstrip("/") + "/"
    return [p for p in paths if os.path.realpath(p).startswith(inside)]


def capture(run: Run, homes: Mapping[str, Sequence[str]], reason: str) -> list[Stored]:
    """Store the transcript of every agent session of the run that can be found and changed since.

    ``homes``: each agent's candidate configuration homes (:func:`sandbox.agent.sessions.config_homes`).
    A session whose transcript is nowhere to be found here is skipped (it may live on another machine);
    one only a fetched part of the ledger names is looked for in the run's own homes only.
    """
    from sandbox.agent.sessions import agents, read_found

    out: list[Stored] = []
    wanted = run_sessions(run)
    if not wanted:
        return out  # no agent session recorded a call (a plain command): nothing to look for
    known = records(run)  # one walk of the ledger for every session
    fetched = fetched_sessions(run)
    for session in wanted:
        for agent in agents().values():
            where = homes_for(run, session, homes.get(agent.name, ()), fetched)
            path = agent.find(session, where)
            if path is None:
                continue
            try:
                data = read_found(path, where)  # beneath its home, through a checked descriptor
            except (OSError, SandboxError):
                continue
            stored = store(run, agent.name, session, data, agent.calls(data), reason, known)
            if stored is not None:
                out.append(stored)
            break
    return out


# -- which agent, which session ------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedCommand:
    """The agent command ``sandbox run`` last recorded for a run (its session ``note``), and whose record it is."""

    argv: list[str]
    #: Where in the worktree it ran, as recorded (unchecked: see :func:`sandbox.recovery.continue_.plan`).
    subdir: str
    #: How that session was confined (:meth:`sandbox.confine.spawn.Isolation.describe`), None when not said.
    isolation: str | None
    #: None when this clone wrote the note; else where it came from (``fetched from origin``): someone
    #: else's text, which picks neither the program, nor its options, nor the confinement.
    foreign: str | None = None


def agent_command(run: Run) -> RecordedCommand | None:
    """The last agent command ``sandbox run`` recorded for the run, where it ran, and whose record it is.

    Only a note this clone wrote (its MAC verifies: :mod:`sandbox.store.provenance`) is its own; any
    other is foreign however it arrived (``sandbox fetch``, a plain ``git fetch``, a push into this
    repository, a copied ``.git``), and so is one that says so itself (``foreign``: a fork of a
    foreign run carries it over).
    """
    events = run.events_read()
    found: tuple[Event, list[str], dict[str, object]] | None = None
    for _oid, event in events:
        data = event.data if event.kind == EventKind.note else {}
        argv = data.get("agent_command")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            found = (event, [str(a) for a in argv], data)
    if found is None:
        return None
    note, argv, data = found
    marked = data.get("foreign")
    foreign = None if note.own() else origin(run)
    if foreign is None and marked:
        foreign = marked if isinstance(marked, str) else "from another clone"
    subdir, isolation = data.get("subdir"), data.get("isolation")
    return RecordedCommand(
        argv=argv,
        subdir=subdir if isinstance(subdir, str) else "",
        isolation=isolation if isinstance(isolation, str) else None,
        foreign=foreign,
    )


def origin(run: Run) -> str:
    """Where a run's foreign events came from, in words: ``fetched from REMOTE`` when ``sandbox fetch``
    brought the run, else ``made in another clone`` (plain git, a push into this repository, a copy)."""
    from sandbox.models import FetchedFrom
    from sandbox.store import layout

    try:
        with open(layout.fetched_file(run.project.common_dir, run.run_id), encoding="utf-8") as fh:
            record = from_json(FetchedFrom, fh.read())
    except (OSError, ValueError):
        return "made in another clone"
    return f"fetched from {record.remote}"


#: Keys of ``note`` events that make a new session the run's current one (a rewind, a fork).
SESSION_NOTES = ("rewind", "conversation_fork", "rewind_undo", "rewind_redo")


def current_session(run: Run) -> str | None:
    """The agent session the run continues in: the last call's, or a later rewind's or fork's.

    Only a value shaped as a session id counts: it becomes a file name and an argument of the
    relaunched agent (``--resume ID``), and a fetched ledger is someone else's text.
    """
    from sandbox.agent.adapters import valid_session

    session = None
    for _oid, event in run.events_read():
        if event.kind == EventKind.call_started and event.call is not None and event.call.agent_session:
            if valid_session(event.call.agent_session):
                session = event.call.agent_session
        elif event.kind == EventKind.note:
            for key in SESSION_NOTES:
                made = event.data.get(key)
                if isinstance(made, dict) and isinstance(made.get("session"), str) and valid_session(made["session"]):
                    session = made["session"]
    return session


def recorded_calls(run: Run, session: str, target: str | None = None) -> list[tuple[str, str, object]]:
    """The run's calls as far as ``session``'s conversation holds them: (call id, tool, input), oldest first.

    Up to the session's last call (a conversation continued from an earlier session holds that one's
    turns too); a call whose outcome is unknown is left out unless it is ``target`` (an agent killed
    during it may never have written it down).
    """
    state = run.state()
    order = state.order
    last = max((i for i, c in enumerate(order) if state.calls[c].agent_session == session), default=-1)
    out: list[tuple[str, str, object]] = []
    for call_id in order[: last + 1]:
        entry = state.calls[call_id]
        if entry.status in (CallStatus.started, CallStatus.uncertain) and call_id != target:
            continue
        out.append((call_id, entry.tool_name, entry.input))
    return out


def primary_home(homes: Sequence[str]) -> str | None:
    """The configuration home a relaunched agent will use: the first candidate (the run's own home
    where the agent has one: 'sandbox run' seeds it around what is written there)."""
    return homes[0] if homes else None


def write_for_agent(agent: AgentSessions, homes: Sequence[str], cwd: str, session: str, data: bytes) -> str | None:
    """Write ``data`` as ``session``'s transcript where ``agent``, started in ``cwd``, looks for it.

    In the agent's :func:`primary_home`; returns the path written, or None when it has no home here.
    """
    from sandbox.agent.adapters import valid_session
    from sandbox.store import beneath

    home = primary_home(homes)
    if home is None or not valid_session(session):
        return None  # a session id is part of the file name: never a path of its own
    dest = agent.place(home, cwd, session)
    os.makedirs(home, exist_ok=True)  # the home itself is the sandbox's (a mount point inside)
    try:
        # The agent writes its home from inside its sandbox: a directory it turned into a link
        # (now, or while this runs) would send this write, outside the sandbox, anywhere. So it is
        # written by descriptor, no link followed on the way; then no transcript is placed, and the
        # agent is continued in a new session that is told so.
        beneath.write_beneath(home, os.path.relpath(dest, home), data, 0o600)
    except beneath.EscapeError:
        return None
    return dest


def fork_conversation(source: Run, target: Run, at: str | None, homes: Mapping[str, Sequence[str]]) -> str | None:
    """Give ``target`` (a fork of ``source``) ``source``'s conversation up to just after call ``at``.

    The conversation is copied, cut before the next tool use after ``at`` (whole for None), into a
    new agent session stored with ``target``, written where the agent finds it, and named by a
    ``note`` event, with ``source``'s agent command, so ``sandbox resume TARGET --continue`` goes on
    from there (a foreign command stays foreign: :func:`agent_command`). Returns the new session
    id, or None when ``source`` holds no conversation. ``at`` is a call of ``source`` by any name
    ``log`` accepts; another name, or a call its conversation does not hold, is refused
    (:class:`ForkError`) before anything is copied: never a whole copy in its place.
    """
    from sandbox.agent.sessions import agents

    state = source.state()
    if at is not None and at not in state.calls:
        at = _call_named(source, at)
    capture(source, homes, f"fork into {target.run_id}")
    state = source.state()
    upto = state.order[: state.order.index(at) + 1] if at is not None else state.order
    old = next((state.calls[c].agent_session for c in reversed(upto) if state.calls[c].agent_session), None)
    stored = latest(source, old) if old else None
    agent = agents().get(stored.index.agent) if stored is not None else None
    if stored is None or agent is None or old is None or not agent.forks:
        return None  # the files are forked; this agent's conversation cannot be cut at a call
    data = load(source, stored)
    line = None
    if at is not None:
        own = agent.own_call(data, at, recorded_calls(source, old, at))
        line = stored.index.calls.get(own) if own else None
        if line is None:
            raise ForkError(
                f"Call {at} of run {source.run_id} is not a tool use of its stored conversation, so the "
                "conversation was not forked (only the files were)."
            )
    later = sorted((n, c) for c, n in stored.index.calls.items() if line is not None and n > line)
    new = agent.new_session()
    try:
        forked = agent.fork(data, later[0][1] if later else None, new)
    except KeyError:
        # The stored index names a tool use its transcript lacks, or the transcript is not one the
        # agent's fork understands (a fetched run's copy is anybody's text): nothing copied.
        where = f"after call {at}" if at is not None else "as a new session"
        raise ForkError(
            f"The stored conversation of run {source.run_id} cannot be cut {where} (it does not read as "
            f"{agent.name}'s own), so the conversation was not forked (only the files were)."
        ) from None
    write_for_agent(agent, homes.get(agent.name, ()), target.worktree, new, forked)
    store(target, agent.name, new, forked, agent.calls(forked), f"fork of {source.run_id}")
    recorded = agent_command(source)
    if recorded is not None:
        noted: dict[str, object] = {
            "agent_command": recorded.argv,
            "subdir": recorded.subdir,
            "forked_from": source.run_id,
        }
        if recorded.foreign is not None:
            noted["foreign"] = recorded.foreign  # written here, but not chosen here
        target.note(noted)
    target.record(
        EventKind.note,
        reason=f"conversation forked from run {source.run_id}",
        data={"conversation_fork": {"session": new, "from_session": old, "run": source.run_id, "at": at}},
        epoch=target.state().epoch,
    )
    return new


def _call_named(run: Run, name: str) -> str:
    """The id of ``run``'s call named ``name`` (any name ``log`` accepts); :class:`ForkError` when none is."""
    from sandbox.errors import UnknownCallError
    from sandbox.run.names import resolve_call_id

    try:
        return resolve_call_id(run, name)
    except UnknownCallError:
        raise ForkError(
            f"Run {run.run_id} has no call {name!r}, so its conversation was not forked; "
            f"see 'sandbox log {run.run_id}'."
        ) from None
