"""Where a fetched run came from (``fetched.json``, written by ``sandbox fetch``)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, utcnow


class FetchedFrom(Model):
    """Where a run in this repository came from (``<common>/sandbox/runs/<run>/fetched.json``).

    Written by ``sandbox fetch`` each time it brings events of the run; local to this clone.
    """

    version: int = FORMAT_VERSION
    remote: str
    url: str | None = None
    fetched_at: datetime = Field(default_factory=utcnow)
    #: The ledger tip the fetch installed, and how many events arrived with it.
    tip: str
    events: int = 0
