"""The resume report: what ``sandbox resume`` found (uncertain calls, denials, drift, live processes) and decided."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, new_list
from sandbox.models.checkpoint import Checkpoint
from sandbox.models.event import Idempotency, ReplayPolicy
from sandbox.models.payloads import DriftPath

#: What a resume may do with an uncertain call (:func:`sandbox.recovery.resumereport.classify`).
ReplayDecision = Literal["may_replay", "ask_first", "do_not_replay"]


class LiveProcess(Model):
    """A process of an agent session found alive (or stopped) by ``sandbox resume``."""

    pid: int
    cmd: str
    call_ids: list[str] = Field(default_factory=new_list)
    #: ``alive``, or how resume stopped it: ``TERM`` or ``KILL``.
    state: str = "alive"


class UncertainCall(Model):
    """A call whose outcome is unknown after a resume, and what may be done with it."""

    call_id: str
    tool_name: str
    step_id: str | None = None
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    decision: ReplayDecision
    summary: str | None = None
    input_hash: str
    started_at: datetime | None = None
    #: Whether processes of the agent session the call ran in were still running at the resume
    #: (None: the call's start recorded no session to look for).
    processes_alive: bool | None = None


class Denial(Model):
    """A refused call: the same tool with the same input hash is known denied."""

    call_id: str
    tool_name: str
    input_hash: str
    step_id: str | None = None
    reason: str | None = None


class ResumeReport(Model):
    """What ``sandbox resume`` found and decided; ``note`` is the text for the model."""

    version: int = FORMAT_VERSION
    run_id: str
    epoch: int
    checkpoint: Checkpoint | None = None
    last_completed_step: str | None = None
    uncertain: list[UncertainCall] = Field(default_factory=new_list)
    do_not_replay: list[str] = Field(default_factory=new_list)
    may_replay: list[str] = Field(default_factory=new_list)
    ask_first: list[str] = Field(default_factory=new_list)
    denied: list[Denial] = Field(default_factory=new_list)
    drift: list[DriftPath] = Field(default_factory=new_list)
    drift_commit: str | None = None
    note: str
    next_step: str
    messages_ref: str | None = None
    run_state: Any = None
    messages: Any = None
    session_rollback: dict[str, object] | None = None
    head: str | None = None
    worktree_recreated: bool = False
    problems: list[str] = Field(default_factory=new_list)
    #: Processes of the run's agent sessions that resume stopped (--stop-processes).
    stopped_processes: list[LiveProcess] = Field(default_factory=new_list)
