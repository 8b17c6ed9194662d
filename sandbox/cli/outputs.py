"""What every command prints with ``--json``: one pydantic model per command, one vocabulary.

The commands build their JSON as plain data (no pydantic on their fast paths); these models
document it (``sandbox schema``), and tests/test_json_vocabulary.py checks every command's real
output against them, with unknown keys refused, so the two cannot drift apart.

The vocabulary, the same in every command:

- ``run``: the run's id (at the top level; persisted records nested inside keep ``run_id``);
- ``call_id`` / ``calls``: one call's id / several;
- ``user_head``: the user's HEAD when the run started; ``run_head``: the run's head commit (its
  last recorded change); ``base``: the snapshot the run started from;
- ``exit_code``: a command's exit status, as a shell reports it (127: could not start);
- times: ISO 8601 in UTC with the zone, ``2026-11-30T16:11:04.103445Z`` (``Z`` is offset +00:00);
- paths: relative to the worktree / your tree, ``/``-separated.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from sandbox import models
from sandbox.cli.common import RENAMES


class Output(BaseModel):
    """A command's JSON output; unknown keys are refused so the schema and the output cannot drift."""

    model_config = ConfigDict(extra="forbid")


def _renamed_model(model: type[BaseModel], name: str, drop: tuple[str, ...] = ()) -> type[BaseModel]:
    """An output model with ``model``'s fields under their :data:`RENAMES` names (follows the model)."""
    fields: dict[str, Any] = {
        RENAMES.get(field, field): (info.annotation, info)
        for field, info in model.model_fields.items()
        if field not in drop
    }
    return create_model(name, __base__=Output, __doc__=f"{model.__name__} in the CLI's vocabulary.", **fields)


# -- runs ----------------------------------------------------------------------------------------------


class StartOutput(Output):
    """``sandbox start --json``."""

    run: str
    worktree: str
    git_dir: str
    base: str
    user_head: str | None = Field(description="Your HEAD when the run started (None: no commit yet).")
    run_head: str = Field(description="The run's head: its base, as nothing is recorded yet.")
    label: str | None
    submodules: list[str]
    copied: list[str]
    linked: list[str]


class RunRow(Output):
    """One run in ``sandbox list --json`` (a damaged run has ``error`` and few other fields)."""

    run: str
    label: str | None
    created_at: str | None = Field(description="ISO 8601, UTC, with the zone (Z).")
    worktree: str | None = None
    git_dir: str | None = None
    worktree_exists: bool
    base: str | None = None
    user_head: str | None = None
    run_head: str | None = None
    calls: int
    by_status: dict[str, int] = Field(default_factory=dict)
    changed_paths: int
    unapplied_calls: int = 0
    #: Calls of which only some hunks were applied (``apply --hunks``).
    partly_applied_calls: list[str] = Field(default_factory=list)
    conflict_markers: list[str] = Field(
        default_factory=list, description="Files of your tree where apply --3way left conflict markers to resolve."
    )
    epoch: int = 0
    made_on: str | None = Field(default=None, description="The machine (host name) the run was started on.")
    fetched_from: dict[str, Any] | None = Field(
        default=None, description="The remote this clone fetched the run from, and when (None: made here)."
    )
    disk_bytes: int
    error: str | None = None
    damaged: bool = False


class StatusHost(Output):
    """The repository's host in ``sandbox status --json``."""

    pid: int | None
    serves_run: bool
    watched: bool = Field(description="The host watches the run's worktree (else its calls are found by scanning).")
    note: str | None


class NetworkRefusalRow(Output):
    """A connection the run's allowlist proxy refused (``sandbox run --network allow``)."""

    host: str
    port: int | None
    at: str | None = Field(description="ISO 8601, UTC, with the zone.")
    method: str | None = Field(default=None, description="CONNECT (a tunnel) or the plain-HTTP method.")
    call_id: str | None = Field(description="The call running then (None: between calls, in the session).")
    session: str | None = Field(default=None, description="The token of the 'sandbox run' session.")


class StatusOutput(RunRow):
    """``sandbox status --json``: the run's row, what the agent did with its own git, calls in flight."""

    agent_git: dict[str, Any] | None = Field(description="The run's own git: branch, head, branches, tags, commits.")
    in_flight: list[str]
    host: StatusHost | None = Field(
        default=None, description="The repository's host process as far as this run goes (None: none runs)."
    )
    network_refused: list[NetworkRefusalRow] = Field(
        default_factory=list, description="Connections refused by the run's network allowlist, oldest first."
    )


class PathOutput(Output):
    """``sandbox path --json``."""

    run: str
    worktree: str
    git_dir: str


class StartedRun(Output):
    """One run of ``sandbox start --count N --json``."""

    run: str
    worktree: str
    git_dir: str
    label: str | None


class StartManyOutput(Output):
    """``sandbox start --count N --json``: N runs from one snapshot."""

    group: str | None
    base: str
    user_head: str | None
    runs: list[StartedRun]


class Transfer(Output):
    """One run in ``sandbox push --json`` / ``sandbox fetch --json``."""

    run: str
    outcome: str = Field(description="pushed, up_to_date, new, fetched, diverged, behind or refused.")
    events: int = Field(description="Events that travelled.")
    label: str | None
    host: str | None = Field(description="The machine the run was started on.")
    message: str | None


class TransferOutput(Output):
    """``sandbox push --json`` and ``sandbox fetch --json``."""

    remote: str
    runs: list[Transfer]


class ForkOutput(Output):
    """``sandbox fork --json``."""

    run: str
    worktree: str
    forked_from: str | None
    label: str | None


class CompareCheck(Output):
    """The ``--check`` command's call in one run."""

    call_id: str
    exit_code: int
    status: str


class CompareRow(Output):
    """One run in ``sandbox compare --json``."""

    run: str
    label: str | None
    base: str
    run_head: str
    calls: int
    failed_calls: int
    uncertain_calls: int
    #: Calls stopped while they ran (Ctrl-C, Esc).
    interrupted_calls: int
    #: Calls run outside the hook protocol or against a refusal.
    violation_calls: int
    files_changed: int
    lines_added: int
    lines_removed: int
    check: CompareCheck | None


class Disagreement(Output):
    """A path where the compared runs' results differ: {run: its state there}."""

    path: str
    states: dict[str, str]


class CompareOutput(Output):
    """``sandbox compare --json``."""

    same_base: bool
    runs: list[CompareRow]
    disagree: list[Disagreement]
    agree: list[str]


class ConflictSide(Output):
    """One version of a conflicting path: base, agent or yours."""

    oid: str | None
    mode: str | None
    describe: str


class ConflictRegion(Output):
    """Where in the file the versions disagree."""

    line: int
    lines: int


class ConflictRow(Output):
    """One path ``apply`` would refuse, explained."""

    path: str
    reason: str
    hint: str
    calls: list[str]
    base: ConflictSide
    agent: ConflictSide
    yours: ConflictSide
    obstacle: bool
    regions: list[ConflictRegion]


class ConflictsOutput(Output):
    """``sandbox conflicts --json`` (and ``diff --conflicts --json``)."""

    run: str
    conflicts: list[ConflictRow]


class BranchOutput(Output):
    """``sandbox branch --json``."""

    run: str
    branch: str
    ref: str
    tip: str
    base: str | None = Field(description="Your HEAD when the run started: the branch's first parent.")
    commits: list[str]
    calls: list[str]
    replaced: str | None = Field(description="The commit the branch was at before (--force).")
    snapshot_differs: bool = Field(description="Your tree had uncommitted changes at start; they are not on it.")


class DroppedRun(Output):
    """One run dropped by ``sandbox drop --all-but``."""

    run: str
    bytes_freed: int


class DropAllButOutput(Output):
    """``sandbox drop --all-but RUN --json``."""

    kept: str
    dropped: list[DroppedRun]


class DropOutput(Output):
    """``sandbox drop --json``."""

    run: str
    dropped: bool
    bytes_freed: int


class OrphanHomeOutput(Output):
    """A run home whose repository no longer exists."""

    home: str
    origin: str
    bytes: int


class GcOutput(Output):
    """``sandbox gc --json``."""

    runs: list[str]
    worktrees: list[str]
    admin_dirs: list[str]
    refs_deleted: int
    temp_files: int
    write_temp_files: int
    bytes_freed: int
    skipped_busy: list[str]
    moved: dict[str, str]
    not_moved: dict[str, str]
    damaged: list[str]
    orphan_homes: list[OrphanHomeOutput] = Field(
        description="Run homes whose repository no longer exists: home, origin (the gone git dir), bytes."
    )
    orphans_removed: bool = Field(description="True when --orphans removed them.")


class RepairOutput(Output):
    """``sandbox repair --json``."""

    run: str
    problem: str | None
    restored: str | None
    replaced: str | None
    events: int


# -- calls ---------------------------------------------------------------------------------------------


class CallDetail(models.LedgerEntry):
    """``sandbox log --call CALL --json``: the ledger entry with its whole error text."""

    error_text: str | None


class ExecOutput(Output):
    """``sandbox exec --json`` (the command's own output goes to stderr)."""

    call_id: str
    status: str
    exit_code: int
    files: int | None = Field(description="Files the call changed (None: the host did not say).")
    cannot_start: str | None = Field(description="Why the command could not start (it is recorded failed).")


class DiffFile(Output):
    """One file of ``sandbox diff --json``."""

    path: str
    status: str
    before_hash: str | None
    after_hash: str | None
    before_mode: str | None
    after_mode: str | None
    binary: bool
    patch: str
    #: The whole file's stable id, and its hunks (``id``, ``header``, ``text``, ``changes``) with
    #: theirs: what ``apply --hunks-from`` takes (see sandbox.merge.hunks).
    id: str
    hunks: list[dict[str, Any]] = Field(default_factory=list)


class DiffOutput(Output):
    """``sandbox diff --json``: the range shown and its files."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    run: str
    call_id: str | None
    #: The selected calls (several ``--call``, ranges), in ledger order; None for the whole run.
    calls: list[str] | None = None
    from_: str = Field(alias="from")
    to: str
    files: list[DiffFile]


ApplyOutput = _renamed_model(models.ApplyReport, "ApplyOutput")
UndoOutput = _renamed_model(models.UndoReport, "UndoOutput")


class CheckpointsOutput(Output):
    """``sandbox checkpoints --json``."""

    checkpoints: list[models.Checkpoint]
    problems: list[str]


class ResumeCheckpoint(Output):
    """The checkpoint a resume starts from, in brief."""

    id: str
    name: str
    label: str | None
    step_id: str | None
    seq: int
    created_at: str


_ResumeBase = _renamed_model(models.ResumeReport, "_ResumeBase", drop=("messages", "checkpoint"))


class ResumeOutput(_ResumeBase):  # type: ignore[misc,valid-type]
    """``sandbox resume --json`` (the message history is left out: see ``messages_ref``)."""

    checkpoint: ResumeCheckpoint | None = None


class RollbackFilesOutput(Output):
    """``sandbox rollback --files --json``."""

    action: str
    checkpoint: str
    commit: str | None
    files: list[Any]
    undone_calls: list[str]
    applied_calls: list[str]
    message: str


class RewindSideEffect(Output):
    """A call after the rewind point that may have acted outside the worktree."""

    call_id: str
    tool_name: str
    summary: str | None
    hint: str


class RewindOutput(Output):
    """``sandbox rewind --json``."""

    run: str
    call_id: str = Field(description="The call the run was rewound to just before.")
    checkpoint: str = Field(description="The automatic checkpoint at that call's start (the files now).")
    undo_to: str | None = Field(description="The checkpoint 'rollback --files --to' takes the rewind back to.")
    files: list[str]
    session: str | None = Field(description="The agent session forked from the conversation (None: none stored).")
    from_session: str | None
    side_effects: list[RewindSideEffect]
    messages: list[str]


class RollbackSessionOutput(Output):
    """``sandbox rollback --session --json``."""

    action: str
    checkpoint: str
    checkpoint_id: str
    run_state: Any
    calls_after: list[str]
    message: str


class CompensateOutput(Output):
    """``sandbox compensate --json``."""

    action: str
    call_id: str
    compensation_call: str | None
    exit_code: int
    entry: models.LedgerEntry | None
    message: str


# -- agents --------------------------------------------------------------------------------------------


class RunAgentOutput(Output):
    """``sandbox run --json`` (the agent's own output goes to stderr)."""

    run: str
    worktree: str
    exit_code: int
    interrupted: str | None = Field(description="Why the session counts as interrupted (Ctrl-C), else None.")
    calls: int = Field(description="Calls recorded in this session.")
    changed_paths: int
    unfinished: list[str]
    not_run: list[str] = Field(description="This session's calls that did not run.")
    stopped_processes: list[dict[str, Any]]
    notes: list[str]
    network: str = Field(default="on", description="allow (through the allowlist proxy), on or off.")
    network_allow: list[str] | None = Field(default=None, description="The allowlist of --network allow.")
    network_refused: int = Field(default=0, description="Connections the allowlist refused in this session.")


class ServeOutput(Output):
    """``sandbox serve --json``."""

    run: str | None = Field(description="The run named (RUN, or the worktree you are in), if any.")
    started: bool = Field(description="False: a host already serves this repository's runs (its pid, if known).")
    pid: int | None
    log: str | None
    stopped: bool | None = Field(default=None, description="With --stop: True when a running host was stopped.")


class HooksInstallOutput(Output):
    """``sandbox hooks install AGENT --json``."""

    run: str
    agent: str
    settings: str
    env: dict[str, str]
    service_started: bool


class DemoOutput(Output):
    """``sandbox demo --json`` (the walk-through goes to stderr)."""

    ok: bool
    run: str
    repository: str | None
    your_tree_unchanged_before_apply: bool
    undo_refused_over_your_edit: bool
    your_edit_kept: bool


class CompletionOutput(Output):
    """``sandbox completion SHELL --json``."""

    shell: str
    script: str
    install: str


class DoctorHidden(Output):
    """A directory not visible inside, and why."""

    path: str
    why: str


class DoctorNetwork(Output):
    """The network a confined agent has."""

    run: str
    exec: str
    allow: list[str] | None = Field(description="The proxy's allowlist (None: no proxy; the network is on or off).")


class DoctorLimits(Output):
    """What a confined process may consume (None: not bounded)."""

    tmpfs_bytes: int
    max_processes: int | None
    max_file_bytes: int | None
    max_memory: int | None
    max_call_bytes: int | None


class DoctorOutput(Output):
    """``sandbox doctor --json``: the effective confinement policy."""

    run: str | None
    isolate: bool
    backend: str
    unavailable: str | None = Field(description="Why confinement cannot be had here (None: it can).")
    readable: str
    writable: list[str]
    read_only_inside_writable: list[str]
    hidden: list[DoctorHidden]
    masked: list[str] = Field(description="The masked secrets that exist here.")
    deny_read: list[str]
    env_allow: list[str]
    network: DoctorNetwork
    unix_sockets: list[str]
    limits: DoctorLimits
    landlock_abi: int | None
    cgroups: list[str]
    cannot_enforce: list[str]


#: Each command's ``--json`` output. ``hook`` answers in the agent's hook protocol (hooks/README.md);
#: ``schema`` prints JSON Schema documents.
COMMANDS: dict[str, Any] = {
    "start": StartOutput,
    "list": list[RunRow],
    "status": StatusOutput,
    "path": PathOutput,
    "drop": DropOutput,
    "drop --all-but": DropAllButOutput,
    "start --count": StartManyOutput,
    "push": TransferOutput,
    "fetch": TransferOutput,
    "fork": ForkOutput,
    "compare": CompareOutput,
    "conflicts": ConflictsOutput,
    "branch": BranchOutput,
    "gc": GcOutput,
    "repair": RepairOutput,
    "log": list[models.LedgerEntry],
    "log --call": CallDetail,
    "diff": DiffOutput,
    "exec": ExecOutput,
    "write": models.LedgerEntry,
    "call start": models.LedgerEntry,
    "call plan": models.LedgerEntry,
    "call finish": models.LedgerEntry,
    "call resolve": models.LedgerEntry,
    "approve": models.LedgerEntry,
    "deny": models.LedgerEntry,
    "apply": ApplyOutput,
    "undo": UndoOutput,
    "redo": UndoOutput,
    "checkpoint": models.Checkpoint,
    "checkpoints": CheckpointsOutput,
    "resume": ResumeOutput,
    "rollback --files": RollbackFilesOutput,
    "rollback --session": RollbackSessionOutput,
    "rewind": RewindOutput,
    "compensate": CompensateOutput,
    "run": RunAgentOutput,
    "serve": ServeOutput,
    "hooks install": HooksInstallOutput,
    "demo": DemoOutput,
    "completion": CompletionOutput,
    "doctor": DoctorOutput,
    "schema": dict[str, Any],
}


def schema_of(command: str) -> dict[str, Any]:
    """The JSON Schema of ``command``'s ``--json`` output."""
    from pydantic import TypeAdapter

    return TypeAdapter(COMMANDS[command]).json_schema(by_alias=True)


def check(command: str, data: Any) -> Any:
    """Validate ``data`` (a command's parsed ``--json`` output) against its model; raises on a mismatch."""
    from pydantic import TypeAdapter

    return TypeAdapter(COMMANDS[command]).validate_python(data)
