"""The repository's host record (``host.json``, see :mod:`sandbox.agent.host`)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, utcnow


class HostInfo(Model):
    """``<common>/sandbox/host/host.json``: the live host of a repository (its liveness record).

    Valid only while a process holds ``host.lock`` (see :func:`sandbox.agent.wire.host_alive`).
    """

    version: int = FORMAT_VERSION
    pid: int
    socket: str  #: the host's socket path (a filesystem path, never an abstract name)
    started_at: datetime = Field(default_factory=utcnow)
