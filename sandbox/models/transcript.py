"""The index of one stored copy of an agent's conversation (:mod:`sandbox.agent.transcripts`)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, new_dict, new_list, utcnow


class TranscriptIndex(Model):
    """One stored copy of an agent's conversation (``index.json`` of a transcript commit).

    The transcript's bytes are split at line ends into chunks, each a blob (so a later copy of a
    transcript that only grew stores only its new chunks: see :mod:`sandbox.agent.transcripts`).
    ``calls`` maps each tool-use id (= the call id in the ledger) to the line where the agent's
    message asking for it begins: a rewind cuts the conversation there.
    """

    version: int = FORMAT_VERSION
    #: Which agent wrote it: ``claude-code``, ``gemini`` or ``codex``.
    agent: str
    #: The agent's own session id.
    session: str
    size: int
    sha256: str
    lines: int
    #: Blob ids of the chunks, in order.
    chunks: list[str] = Field(default_factory=new_list)
    calls: dict[str, int] = Field(default_factory=new_dict)
    #: Why it was stored: ``session end``, ``checkpoint ckpt_003``, ``resume``, ``rewind``.
    reason: str = ""
    stored_at: datetime = Field(default_factory=utcnow)
