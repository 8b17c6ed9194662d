"""The payloads of the other ledger events the fold keeps: compensations, drift, refused connections."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from pydantic import Field

from sandbox.models.base import Model, Payload, new_list


class CompensationLink(Payload):
    """A compensation started for a call (the ``compensation`` event, folded with its id and time)."""

    event_id: str = ""
    at: str = ""
    call_id: str
    compensation_call: str
    argv: list[str] = Field(default_factory=new_list)


class DriftPath(Model):
    """A worktree path that differs from the run's head although no recorded call changed it."""

    path: str
    before: str | None
    after: str | None
    before_mode: int | None = None
    after_mode: int | None = None
    attributed_to: str | None = None


class DriftRecord(Payload):
    """Changes found in the worktree that no recorded call made (a ``drift`` event, folded)."""

    event_id: str = ""
    at: str = ""
    paths: list[DriftPath] = Field(default_factory=new_list)
    commit: str | None = None


class NetworkRefusal(Payload):
    """A connection the run's allowlist proxy refused (``--network allow``): a ``note`` event whose
    ``data`` is ``{"network_refused": {...}}``, so older readers fold it as any note.

    ``call_id``: the call that was running then (the newest started one), None between calls;
    ``session``: the token of the ``sandbox run`` session it happened in.
    """

    host: str
    port: int
    at: str
    method: str = "CONNECT"
    call_id: str | None = None
    session: str | None = None
