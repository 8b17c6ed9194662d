"""The ``--json`` outputs of the commands around agents: run, serve, hooks install, demo, completion,
doctor."""

from __future__ import annotations

from pydantic import Field

from sandbox.cli.outputs.base import Output


class StoppedProcess(Output):
    """A process the agent left running, stopped when its session ended."""

    pid: int
    cmd: str
    how: str = Field(description="TERM, or KILL when it outlived the grace period.")


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
    stopped_processes: list[StoppedProcess]
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
    max_open_files: int | None = None
    max_inotify_instances: int | None = None
    max_inotify_watches: int | None = None


class DoctorSystem(Output):
    """Default deny in the system directories: what other users cannot read is not visible inside, for root too."""

    applies: bool = Field(description="Whether the rule hides anything for this user here (root, under bubblewrap).")
    why: str
    walked: list[str] = Field(description="The system directories walked whole.")
    listed: list[str] = Field(description="Directories whose own entries are checked, not walked.")
    directories: int = Field(description="How many directories the walk listed.")
    hidden: list[str] = Field(description="System files and directories hidden inside now.")
    shown: list[str] = Field(description="Of those others cannot read, what the policy shows on purpose (allow_read).")


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
    home_allowlist: list[DoctorHidden] = Field(
        default_factory=list, description="What of the homes is visible inside (default deny), each with why."
    )
    masked: list[str] = Field(description="The masked secrets that exist here.")
    deny_read: list[str]
    env_allow: list[str]
    network: DoctorNetwork
    unix_sockets: list[str]
    limits: DoctorLimits
    landlock_abi: int | None
    cgroups: list[str]
    cannot_enforce: list[str]
    foreign_masked: list[str] | None = Field(
        default=None,
        description="RUN holds work from another clone: its worktree's agent settings masked for every command "
        "started on it (worktree-relative, those there now at its root and in each directory of one its recorded "
        "tree has, and the directories above it; the same names in each directory down to where a command starts "
        "are masked too). None: no run named, or a run of this clone's own.",
    )
    foreign_refusal: str | None = Field(
        default=None, description="Why a command on that run would be refused (a settings path linked out of it)."
    )
    system: DoctorSystem | None = Field(
        default=None, description="What of the system directories is hidden because others cannot read it."
    )
