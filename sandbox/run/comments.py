"""Review comments: the reviewer's words on a path (and a line) of a run, handed back to the agent.

A comment is a ``note`` event of the run's ledger (``{"review_comment": {...}}``: an older sandbox
folds it as any note), tied to the call that last changed its path, when one did. ``sandbox resume
RUN --continue`` hands the comments not yet sent to the agent as its next user message
(:func:`message`) and records that, with the agent session they went to, as another note
(``{"review_comments_sent": {"ids": [...], "agent_session": ..., "agent": ...}}``): the ledger
says which comments were sent in which session, and a comment is sent once.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from sandbox.errors import SandboxError
from sandbox.run.run import Run

COMMENT = "review_comment"
SENT = "review_comments_sent"
#: The longest comment kept (a review comment, not a document).
MAX_TEXT = 20_000


class CommentError(SandboxError):
    """A comment that cannot be recorded (no text, a path outside the run, a line that is no number)."""


@dataclass(frozen=True)
class Comment:
    """One comment, and where it went."""

    id: str
    path: str
    line: int | None
    text: str
    at: str
    #: The call that last changed ``path`` when the comment was made (None: no call changed it).
    call_id: str | None
    #: The agent session the comment was sent to (None with ``sent_at``: a new session), or unsent.
    sent_session: str | None = None
    sent_at: str | None = None
    sent_agent: str | None = None
    #: Written by this clone (its key's MAC on the note, :mod:`sandbox.store.provenance`). Another clone's
    #: comment is shown, never handed to an agent: it would choose what the model is told.
    own: bool = True

    @property
    def where(self) -> str:
        """``path`` or ``path:line``."""
        return self.path if self.line is None else f"{self.path}:{self.line}"


def parse_target(target: str) -> tuple[str, int | None]:
    """``PATH[:LINE]`` as (path, line); a trailing ``:N`` is the line."""
    path, sep, tail = target.rpartition(":")
    if sep and tail.isdigit() and path:
        line = int(tail)
        if line < 1:
            raise CommentError(f"Line {line} is no line of {path}; lines count from 1.")
        return path, line
    return target, None


def add(run: Run, path: str, line: int | None, text: str) -> Comment:
    """Record a comment on ``path`` (relative to the worktree), optionally at ``line``."""
    text = text.strip()
    if not text:
        raise CommentError("The comment is empty; say what the agent should change.")
    if len(text) > MAX_TEXT:
        raise CommentError(f"The comment is {len(text)} characters long; keep it under {MAX_TEXT}.")
    rel = posixpath.normpath(path) if path else ""
    if rel in ("", ".") or rel.startswith("/") or rel == ".." or rel.startswith("../"):
        raise CommentError(f"{path!r} is not a path inside the run; name a file as 'sandbox diff' shows it.")
    state = run.state()
    call_id = None
    for cid in reversed(state.order):
        entry = state.calls[cid]
        if not entry.rolled_back and any(f.path == rel for f in entry.files):
            call_id = cid
            break
    if call_id is None and not _in_tree(run, rel):
        raise CommentError(f"Run {run.run_id} has no file {rel!r}; comment on a file its diff or worktree holds.")
    number = 1 + sum(1 for n in state.data.note if isinstance(n.get(COMMENT), dict))
    body: dict[str, object] = {"id": f"c{number}", "path": rel, "line": line, "text": text, "call_id": call_id}
    run.note({COMMENT: body})
    return next(c for c in listed(run) if c.id == body["id"])


def _in_tree(run: Run, rel: str) -> bool:
    import os

    return os.path.lexists(os.path.join(run.worktree, rel))


def listed(run: Run) -> list[Comment]:
    """Every comment of the run, oldest first, with where each was sent (as this clone recorded it) and
    whether this clone wrote it."""
    notes = list(run.state().data.note)
    if any(isinstance(n.get(COMMENT), dict) for n in notes):
        mine = {event.event_id for _oid, event in run.events_read() if event.own()}
    else:
        mine = set()
    sent: dict[str, tuple[str | None, str, str | None]] = {}
    for n in notes:
        s = n.get(SENT) if n.get("event_id") in mine else None
        if isinstance(s, dict) and isinstance(s.get("ids"), list):
            session = s.get("agent_session")
            agent = s.get("agent")
            for cid in s["ids"]:
                if isinstance(cid, str) and cid not in sent:
                    sent[cid] = (
                        session if isinstance(session, str) else None,
                        str(n.get("at", "")),
                        agent if isinstance(agent, str) else None,
                    )
    out = []
    for n in notes:
        c = n.get(COMMENT)
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            continue
        line = c.get("line")
        went = sent.get(c["id"])
        call = c.get("call_id")
        out.append(
            Comment(
                id=c["id"],
                path=str(c.get("path", "")),
                line=line if isinstance(line, int) and not isinstance(line, bool) else None,
                text=str(c.get("text", "")),
                at=str(n.get("at", "")),
                call_id=call if isinstance(call, str) else None,
                sent_session=went[0] if went else None,
                sent_at=went[1] if went else None,
                sent_agent=went[2] if went else None,
                own=n.get("event_id") in mine,
            )
        )
    return out


def unsent(run: Run) -> list[Comment]:
    """This clone's comments that no agent session has been given yet (another clone's are never handed on)."""
    return [c for c in listed(run) if c.sent_at is None and c.own]


def message(run: Run, comments: list[Comment]) -> str:
    """The comments as the agent's next user message."""
    state = run.state()
    lines = [
        f"The reviewer left {len(comments)} comment(s) on your changes in this run. Address each one, then "
        "continue the task:"
    ]
    for n, c in enumerate(comments, 1):
        entry = state.calls.get(c.call_id) if c.call_id else None
        about = f" (changed by your call #{entry.seq})" if entry is not None else ""
        lines.append(f"{n}. {c.where}{about}: {c.text}")
    return "\n".join(lines)


def mark_sent(run: Run, comments: list[Comment], agent_session: str | None, agent: str) -> None:
    """Record that ``comments`` went to the agent (``agent_session``; None: a new session)."""
    if comments:
        run.note({SENT: {"ids": [c.id for c in comments], "agent_session": agent_session, "agent": agent}})
