"""The ``--json`` outputs of the commands on whole runs: start, list, status, path, push/fetch, fork,
compare, conflicts, branch, drop, gc, repair."""

from __future__ import annotations

from pydantic import Field

from sandbox import models
from sandbox.cli.outputs.base import Output


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
    changed_paths: int = Field(
        description="Paths the run changes from its base; a rename counts once, as in diff --stat."
    )
    renamed_paths: int = Field(
        default=0, description="How many of changed_paths are renames (only exact ones past 10,000 pairs to compare)."
    )
    unapplied_calls: int = 0
    #: Calls of which only some hunks were applied (``apply --hunks``).
    partly_applied_calls: list[str] = Field(default_factory=list)
    uncertain_calls: list[str] = Field(
        default_factory=list,
        description="Calls whose end is unknown ('sandbox resume' marked them; 'call resolve' ends one).",
    )
    call_numbers: dict[str, int] = Field(
        default_factory=dict, description="How 'log' numbers the calls this row names (partly applied, in flight)."
    )
    conflict_markers: list[str] = Field(
        default_factory=list, description="Files of your tree where apply --3way left conflict markers to resolve."
    )
    epoch: int = 0
    made_on: str | None = Field(default=None, description="The machine (host name) the run was started on.")
    fetched_from: models.FetchedFrom | None = Field(
        default=None, description="The remote this clone fetched the run from, and when (None: made here)."
    )
    disk_bytes: int
    disk_complete: bool = Field(
        default=True,
        description=(
            "False when disk_bytes is a lower bound: only the first files counted (list/status without --disk), "
            "or a directory could not be read (nested past what a path names, unreadable)."
        ),
    )
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


class AgentCommit(Output):
    """One of the agent's own commits in its run (``sandbox.fast.foldjson.CommitJson``)."""

    id: str
    subject: str


class AgentGit(Output):
    """What the agent did with its own git in the run (``sandbox.fast.foldjson.AgentGitJson``)."""

    branch: str | None = Field(description="The branch the worktree is on (None: detached).")
    head: str | None
    branches: dict[str, str] = Field(
        description="Branches other than the starting one at the snapshot: name -> commit."
    )
    tags: dict[str, str]
    stash: int
    commits: list[AgentCommit] = Field(description="Commits not reachable from the snapshot, newest first (some).")
    commit_count: int = Field(description="How many such commits there are in all.")


class StatusOutput(RunRow):
    """``sandbox status --json``: the run's row, what the agent did with its own git, calls in flight."""

    agent_git: AgentGit | None = Field(description="The run's own git: branch, head, branches, tags, commits.")
    in_flight: list[str] = Field(
        description="Calls started and not ended: running, or left by a crash (uncertain too)."
    )
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
    left_out: list[str] = Field(
        default_factory=list,
        description="push: the refs of the agent's own git left behind (git/refs/tags/v1, ...): "
        "sent only with --with-agent-refs.",
    )


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
    #: Each run's diff (``--stat``: its summary) of the paths it changed that the runs disagree on.
    diffs: dict[str, str] = Field(default_factory=dict)


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


class AdoptOutput(Output):
    """``sandbox adopt --json``."""

    run: str
    adopted_events: int = Field(description="Events of the run that count as this clone's own now and did not before.")


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
    stored: list[str] = Field(description="Runs made before stores, given an object store of their own.")
    not_stored: dict[str, str] = Field(description="Such runs left without one this time: run id -> why.")
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
