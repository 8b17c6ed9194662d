"""The confinement a command asks for: the user's settings, its flags and what the CLI read of the
machine, decided into one :class:`~sandbox.confine.policy.Isolation` (:func:`decide`).

The CLI only reads the machine (:class:`Machine`: the home, the backend's program, the terminal, the
installed interpreter, the variables that name the agent's model hosts) and prints; the decision is
made here, where the agents' registry (:mod:`sandbox.agent.adapters`) says what each agent needs,
and :mod:`sandbox.confine.policy` turns it into one run's policy. Standard library only (``sandbox
exec``'s fast path imports it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.agent import adapters, agentstate
from sandbox.confine import envfilter, spawn, sysview
from sandbox.confine.policy import DEFAULT_DENY_READ, Isolation, other_state_dirs

if TYPE_CHECKING:
    from sandbox.run.config import Config


@dataclass(frozen=True)
class Machine:
    """What the CLI read of this machine for confinement (the library reads no environment)."""

    #: The user's home (``HOME``): where ``~`` in the settings leads.
    home: str
    #: ``bwrap`` or ``seatbelt``, and its program (None: not installed).
    backend: str
    program: str | None
    #: Already inside a sandbox of ours (its variable is set): not confined again.
    inherited: bool = False
    #: The command uses the terminal.
    interactive: bool = False
    #: What must stay visible wherever it is installed: the sandbox's interpreter, the agent's executable.
    installed: tuple[str, ...] = ()
    #: The data directory (runs' homes): other repositories' run state in it is hidden.
    data_root: str = ""
    #: The account's own home (``HOME`` may point elsewhere while its toolchains stay there).
    account_home: str = ""
    #: The user's git identity (name, email), from the global git configuration.
    identity: tuple[str, str] | None = None
    #: The variables that may move an agent's model hosts (its ``BASE_URL``), for the allowlist.
    environ: Mapping[str, str] = field(default_factory=dict)


def network_mode(cfg: Config, command: str, network: str | None, backend: str) -> str:
    """``on``, ``off`` or ``allow``: the flag, else the settings for ``command``."""
    if command == "run":
        mode = cfg.network_run if network is None else network
    else:
        mode = ("on" if cfg.network_exec else "off") if network is None else network
    if mode == "allow" and backend == "seatbelt":
        mode = "on"  # no network namespace to put the agent in: Seatbelt cannot route it to the proxy
    return mode


def decide(
    cfg: Config,
    machine: Machine,
    user_workdir: str | None,
    command: str,
    isolate: str | None,
    network: str | None,
    agent: tuple[str, str | None] | None = None,
    argv: Sequence[str] = (),
) -> Isolation:
    """The confinement asked for by the flags (``isolate``, ``network``), else by the settings ``cfg``,
    else the defaults, on ``machine``, for the repository of ``user_workdir``.

    ``agent``: the command and ``--hooks`` adapter of ``sandbox run``, whose model endpoints (and
    base-URL variable's host) start the allowlist of ``--network allow``. ``argv``: the agent
    ``sandbox run`` starts (its variables pass, and its executable stays visible). Raises
    :class:`~sandbox.confine.proxy.AllowlistError` for an entry of ``[network] allow`` it cannot read.
    """
    enabled = cfg.isolate if isolate is None else isolate == "on"
    mode = network_mode(cfg, command, network, machine.backend)
    net = mode == "on"
    allow = _allowlist(cfg.network_allow, agent, machine.environ) if mode == "allow" else None
    if machine.inherited and isolate is None:
        return Isolation(False, net, machine.program, machine.backend, inherited=True)
    home = machine.home
    writable = agentstate.state_paths(_writable_entries(cfg, command, agent, argv), home)
    settings, private = agentstate.config_paths(agentstate.AGENT_CONFIG, agentstate.AGENT_PRIVATE, writable, home)
    allowed = [_expand(p, home) for p in cfg.allow_read]
    masked = [p for p in (_expand(e, home) for e in (*DEFAULT_DENY_READ, *cfg.deny_read)) if p not in allowed]
    # Default deny: the home is hidden inside but for its allowlist (sandbox.confine.homeview).
    user_home = home if os.path.isabs(home) and os.path.realpath(home) != "/" else None
    readable = [p for p in allowed if os.path.exists(p)] + list(machine.installed)
    started = adapters.by_program(argv[0]) if argv else None
    common_dir = os.path.join(user_workdir, ".git") if user_workdir else ""
    hidden = other_state_dirs(os.path.realpath(machine.data_root), common_dir) if enabled else []
    return Isolation(
        enabled,
        net,
        machine.program,
        machine.backend,
        tuple(writable),
        machine.interactive,
        tuple(dict.fromkeys(readable)),
        config=tuple(settings),
        private=tuple(private),
        allow=allow,
        masked=tuple(masked),
        hidden=tuple(hidden),
        env_allow=(*envfilter.DEFAULT_ENV_ALLOW, *(started.ENV if started else ()), *cfg.env_allow),
        unix_sockets=tuple(_expand(p, home) for p in cfg.unix_sockets),
        limits=limits_of(cfg, command),
        user_home=user_home,
        toolchain_homes=_toolchain_homes(user_home, machine.account_home),
        identity=machine.identity if user_home else None,
        system_cache=os.path.join(machine.data_root, sysview.CACHE_FILE) if machine.data_root else None,
    )


def _writable_entries(
    cfg: Config, command: str, agent: tuple[str, str | None] | None, argv: Sequence[str]
) -> list[str]:
    """The settings entries a command may write: only ``sandbox run`` gives an agent its state (and a
    home of its own, :mod:`sandbox.agent.agenthome`), by default only the started agent's own (another
    agent's, or npm's cache, would be a plant for your next unconfined use of it; ``[isolation]
    agent_state`` says otherwise); any other confined command keeps the agents' state in your home
    read-only and creates nothing there. Then ``[isolation] writable``."""
    hooked = adapters.agent(agent[1]).PROGRAM if agent and agent[1] in adapters.names() else None
    starting = (argv[0] if argv else None, hooked)
    state = agentstate.state_of(starting) if cfg.agent_state is None else cfg.agent_state
    return (list(state) if command == "run" else []) + list(cfg.writable)


def _allowlist(
    extra: Sequence[str], agent: tuple[str, str | None] | None, environ: Mapping[str, str]
) -> tuple[str, ...]:
    """The agent's model endpoints, its base URL's host (from ``environ``) and ``[network] allow``."""
    who = adapters.agent_of(*agent) if agent else None
    return tuple(adapters.default_allowlist(who, environ, extra))


def _toolchain_homes(home: str | None, account: str) -> tuple[str, ...]:
    """Where the user's toolchains are looked for: ``HOME`` and the account's own home (``HOME`` may
    have been pointed elsewhere while ``python3`` still comes from the account's ``~/.pyenv``)."""
    found = [h for h in (home, account) if h and os.path.isabs(h) and os.path.realpath(h) != "/"]
    return tuple(dict.fromkeys(found))


def limits_of(cfg: Config, command: str = "run") -> spawn.Limits:
    """The :class:`~sandbox.confine.policy.Limits` the settings ask for (defaults for what they leave).

    ``exec`` gets the memory bound where it is free (a v1 memory cgroup joined through ``tasks``, or
    the v2 cgroup made for the processes bound anyway), and everywhere when ``max_memory`` is set:
    a move through v2's ``cgroup.procs`` costs every short command several milliseconds (it waits
    for an RCU grace period), while a ``run`` session pays it once.
    """
    names = {
        "tmpfs_size": "tmpfs_bytes",
        "max_processes": "max_processes",
        "max_open_files": "max_open_files",
        "max_file_size": "max_file_bytes",
        "max_memory": "max_memory",
        "max_call_size": "max_call_bytes",
    }
    given = {names[k]: v for k, v in cfg.limits.items() if k in names}
    return spawn.Limits(**given, memory_if_free=command != "run" and "max_memory" not in given)


def _expand(entry: str, home: str) -> str:
    """A settings entry as an absolute path (the settings refuse relative entries)."""
    return os.path.abspath(agentstate.expand_home(entry, home))
