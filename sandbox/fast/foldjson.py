"""The fold of a run's ledger as JSON data, typed: what the fast path reads, mirroring the models.

The fast path cannot import pydantic or :mod:`sandbox.models`, so it reads the fold as the JSON
the models dump (``LedgerState.model_dump(mode="json")``, the sealed fold cache, ``fetched.json``).
Each ``TypedDict`` here names the fields of the model it mirrors that this package reads, with their
JSON types (times are ISO 8601 strings, enums their values); ``tests/fast/test_foldjson.py`` checks
that every field named here is a field of its model. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, cast


class RunInfoJson(TypedDict):
    """``sandbox.models.RunInfo``."""

    version: int
    run_id: str
    label: str | None
    created_at: str
    base: str
    head: str | None
    head_ref: str | None
    worktree: str
    user_workdir: str
    submodules: list[str]
    host: str | None
    group: str | None
    forked_from: str | None


class FileChangeJson(TypedDict):
    """``sandbox.models.FileChange``."""

    path: str
    before_hash: str | None
    after_hash: str | None
    before_mode: int | None
    after_mode: int | None


class EntryJson(TypedDict):
    """``sandbox.models.LedgerEntry``: one call, the fold of its events."""

    call_id: str
    tool_name: str
    input: object
    status: str
    summary: str | None
    started_at: str | None
    finished_at: str | None
    error: str | None
    error_detail: str | None
    error_ref: str | None
    commit: str | None
    files: list[FileChangeJson]
    approval: str | None
    denial_reason: str | None
    undone: bool
    applied: bool
    rolled_back: bool
    seq: int
    created_at: str


class PartialJson(TypedDict):
    """``sandbox.models.PartialApply``."""

    base_mode: int | None
    base_oid: str | None
    agent_mode: int | None
    agent_oid: str | None
    calls: list[str]
    edited: bool


class _UserPathJson(TypedDict):
    mode: int | None
    oid: str | None
    target_mode: int | None
    target_oid: str | None
    calls: list[str]


class UserPathJson(_UserPathJson, total=False):
    """``sandbox.models.UserPathRecord`` (``partial`` is left out when there is none)."""

    partial: PartialJson | None


class UndoItemJson(TypedDict):
    """``sandbox.models.UndoItem``."""

    call_id: str
    target: str | None
    event_id: str
    changed: list[str]


class FoldDataJson(TypedDict):
    """``sandbox.models.FoldData``; ``note``: the ``note`` events' data, any JSON object each."""

    user_paths: dict[str, UserPathJson]
    undo_stack: list[UndoItemJson]
    note: list[Mapping[str, object]]


class StateJson(TypedDict):
    """``sandbox.models.LedgerState``: the fold of a whole ledger."""

    version: int
    tip: str | None
    count: int
    run: RunInfoJson
    epoch: int
    head: str | None
    calls: dict[str, EntryJson]
    order: list[str]
    data: FoldDataJson
    clone: str | None
    #: How many events are not this clone's (None or absent: not counted when it was cached).
    foreign: int | None


class FetchedJson(TypedDict):
    """``sandbox.models.FetchedFrom``: where a run was last fetched from."""

    version: int
    remote: str
    url: str | None
    fetched_at: str
    tip: str
    events: int


def state_json(dumped: Mapping[str, object]) -> StateJson:
    """``LedgerState.model_dump(mode="json")`` as the typed data it is (the full read path's way in)."""
    return cast(StateJson, dumped)


def fetched_json(dumped: Mapping[str, object]) -> FetchedJson:
    """``FetchedFrom.model_dump(mode="json")`` (or a stored ``fetched.json``) as the typed data it is."""
    return cast(FetchedJson, dumped)


class CommitJson(TypedDict):
    """One of the agent's commits: its id and subject."""

    id: str
    subject: str


class AgentGitJson(TypedDict):
    """:class:`GitActivity` as JSON data (``agent_git`` of ``sandbox status --json``)."""

    branch: str | None
    head: str | None
    branches: dict[str, str]
    tags: dict[str, str]
    stash: int
    commits: list[CommitJson]
    commit_count: int


class RefusalJson(TypedDict):
    """A refused connection as ``status`` and ``log`` show it (``sandbox.cli.outputs.runs.NetworkRefusalRow``)."""

    host: str
    port: int | None
    at: str | None
    method: str | None
    call_id: str | None
    session: str | None


class _RunRowBase(TypedDict):
    run: str
    label: str | None
    created_at: str | None
    worktree_exists: bool
    calls: int
    changed_paths: int
    disk_bytes: int


class StatusHostJson(TypedDict):
    """The repository's host as far as one run goes (``sandbox.cli.outputs.runs.StatusHost``)."""

    pid: int
    serves_run: bool
    watched: bool
    note: str | None


class RunRowJson(_RunRowBase, total=False):
    """A run as ``list`` shows it (``sandbox.cli.outputs.runs.RunRow``): every field from :func:`summary`; a
    damaged run has the required ones, ``error`` and ``damaged``. ``status`` adds the last four
    (``sandbox.cli.outputs.runs.StatusOutput``)."""

    worktree: str | None
    git_dir: str | None
    base: str
    user_head: str | None
    run_head: str | None
    by_status: dict[str, int]
    renamed_paths: int
    unapplied_calls: int
    partly_applied_calls: list[str]
    call_numbers: dict[str, int]
    uncertain_calls: list[str]
    conflict_markers: list[str]
    epoch: int
    made_on: str | None
    fetched_from: FetchedJson | None
    disk_complete: bool
    error: str
    damaged: bool
    agent_git: AgentGitJson | None
    in_flight: list[str]
    host: StatusHostJson | None
    network_refused: list[RefusalJson]
