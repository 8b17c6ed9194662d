"""``--isolate`` and ``--network``: the CLI side of OS confinement (see :mod:`sandbox.confine.spawn`).

The library reads no environment: this module finds the bubblewrap program on ``PATH``, expands
``~`` with ``HOME``, looks at the terminal, reads the user's settings, and hands the library one
:class:`~sandbox.confine.spawn.Isolation`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from sandbox.confine.spawn import Isolation

F = TypeVar("F", bound=Callable[..., Any])
ON_OFF = click.Choice(["on", "off"])
SEATBELT = "/usr/bin/sandbox-exec"


#: ``sandbox run``'s network modes: ``allow`` goes through the run's allowlist proxy.
NETWORK_MODES = click.Choice(["allow", "on", "off"])


def isolation_options(network_default: str) -> Callable[[F], F]:
    """``--isolate on|off`` and ``--network on|off`` (defaults from ``[isolation]`` in the settings);
    ``--network allow|on|off`` where the default is ``allow`` (``sandbox run``)."""

    def decorate(func: F) -> F:
        modes = NETWORK_MODES if network_default == "allow" else ON_OFF
        more = "; allow: only the agent's model endpoints and [network] allow" if network_default == "allow" else ""
        func = click.option(
            "--network",
            type=modes,
            default=None,
            help=f"Network inside the sandbox (default {network_default}; [isolation] in .sandbox.toml{more}).",
        )(func)
        func = click.option(
            "--isolate",
            type=ON_OFF,
            default=None,
            help="OS confinement with bubblewrap (default on): only the run's worktree and git dir are writable.",
        )(func)
        return func

    return decorate


def resolve(
    user_workdir: str | None,
    command: str,
    isolate: str | None,
    network: str | None,
    agent: tuple[str, str | None] | None = None,
    argv: Sequence[str] = (),
) -> Isolation:
    """The confinement asked for by the flags, else by the user's settings, else the defaults.

    ``agent``: the command and ``--hooks`` adapter of ``sandbox run``, whose model endpoints (and
    base-URL variable's host) start the allowlist of ``--network allow``. ``argv``: the agent
    ``sandbox run`` starts (its variables pass, and its executable stays visible).
    """
    from sandbox.agent import adapters, agentstate
    from sandbox.confine import envfilter, spawn
    from sandbox.confine.policy import DEFAULT_DENY_READ, other_state_dirs
    from sandbox.run import config

    cfg = config.load(user_workdir) if user_workdir else config.Config()
    enabled = cfg.isolate if isolate is None else isolate == "on"
    if command == "run":
        mode = cfg.network_run if network is None else network
    else:
        mode = ("on" if cfg.network_exec else "off") if network is None else network
    if mode == "allow" and sys.platform == "darwin":
        mode = "on"  # no network namespace to put the agent in: Seatbelt cannot route it to the proxy
    net = mode == "on"
    allow = _allowlist(cfg.network_allow, agent) if mode == "allow" else None
    # By default only the started agent's own state (another agent's, or npm's cache, would be a plant
    # for your next unconfined use of it); [isolation] agent_state says otherwise.
    hooked = adapters.agent(agent[1]).PROGRAM if agent and agent[1] in adapters.names() else None
    starting = (argv[0] if argv else None, hooked)
    state = agentstate.state_of(starting) if cfg.agent_state is None else cfg.agent_state
    # Only 'sandbox run' gives an agent its state (and a home of its own, sandbox.agent.agenthome): any
    # other confined command keeps the agents' state in your home read-only and creates nothing there.
    entries = (list(state) if command == "run" else []) + cfg.writable
    home = os.path.expanduser("~")
    writable = agentstate.state_paths(entries, home)
    backend, program = backend_program()
    try:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        interactive = False
    if isolate is None and spawn.inside_sandbox(os.environ.get(envfilter.CONFINED_ENV)):
        return spawn.Isolation(False, net, program, backend, inherited=True)
    settings, private = agentstate.config_paths(agentstate.AGENT_CONFIG, agentstate.AGENT_PRIVATE, writable, home)
    allowed = [_expand(p, home) for p in cfg.allow_read]
    deny_read = (*DEFAULT_DENY_READ, *cfg.deny_read)
    masked = [p for p in (_expand(e, home) for e in deny_read) if p not in allowed]
    # Default deny: the home is hidden inside but for its allowlist (sandbox.confine.homeview).
    user_home = home if os.path.isabs(home) and os.path.realpath(home) != "/" else None
    readable = [p for p in allowed if os.path.exists(p)] + installed_paths(argv)
    started = adapters.by_program(argv[0]) if argv else None
    env_allow = (*envfilter.DEFAULT_ENV_ALLOW, *(started.ENV if started else ()), *cfg.env_allow)
    from sandbox.cli.finding import data_root

    root = os.path.realpath(data_root(user_workdir))
    hidden = other_state_dirs(root, _common_dir(user_workdir)) if enabled else []
    if enabled and command == "run" and backend == "bwrap":
        say_gaps_once(root)
    return spawn.Isolation(
        enabled,
        net,
        program,
        backend,
        tuple(writable),
        interactive,
        tuple(dict.fromkeys(readable)),
        config=tuple(settings),
        private=tuple(private),
        allow=allow,
        masked=tuple(masked),
        hidden=tuple(hidden),
        env_allow=env_allow,
        unix_sockets=tuple(_expand(p, home) for p in cfg.unix_sockets),
        limits=limits_of(cfg, command),
        user_home=user_home,
        toolchain_homes=_toolchain_homes(user_home),
        identity=git_identity(home) if user_home else None,
    )


def _toolchain_homes(home: str | None) -> tuple[str, ...]:
    """Where the user's toolchains are looked for: ``HOME`` and the account's own home (``HOME`` may
    have been pointed elsewhere while ``python3`` still comes from the account's ``~/.pyenv``)."""
    import pwd

    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account = ""
    found = [h for h in (home, account) if h and os.path.isabs(h) and os.path.realpath(h) != "/"]
    return tuple(dict.fromkeys(found))


def git_identity(home: str) -> tuple[str, str] | None:
    """The user's ``user.name`` and ``user.email`` from the global git configuration files (the
    variables that name other files, ``GIT_CONFIG_GLOBAL`` and ``XDG_CONFIG_HOME``, are read here)."""
    from sandbox.confine.homeview import git_identity as parse

    given = os.environ.get("GIT_CONFIG_GLOBAL")
    if given:
        return parse([given])
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return parse([os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")])


def backend_program() -> tuple[str, str | None]:
    """This machine's confinement backend and its program (None: not installed)."""
    if sys.platform == "darwin":
        return "seatbelt", SEATBELT if os.access(SEATBELT, os.X_OK) else None
    return "bwrap", shutil.which("bwrap")


def _allowlist(extra: list[str], agent: tuple[str, str | None] | None) -> tuple[str, ...]:
    """The agent's model endpoints, its base URL's host (from the environment) and ``[network] allow``."""
    from sandbox.agent.adapters import agent_of, default_allowlist
    from sandbox.confine.proxy import AllowlistError
    from sandbox.run.config import ConfigError

    who = agent_of(*agent) if agent else None
    try:
        return tuple(default_allowlist(who, os.environ, extra))
    except AllowlistError as exc:
        raise ConfigError(f"[network] allow in your settings: {exc}; write host, host:port or *.domain.") from None


GAPS_FILE = "confinement-gaps"


def say_gaps_once(data_root: str) -> None:
    """What this machine cannot enforce, on stderr once (again only when it changes); ``sandbox doctor``
    says it every time. The last words said are kept in the data directory."""
    from sandbox.confine import hardening

    gaps = "; ".join(hardening.probe().missing)
    path = os.path.join(data_root, GAPS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            said = fh.read()
    except OSError:
        said = ""
    if gaps == said:
        return
    if gaps:
        click.echo(f"sandbox: note: confinement here cannot enforce: {gaps} (see 'sandbox doctor').", err=True)
    try:
        os.makedirs(data_root, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(gaps)
    except OSError:
        pass  # said again next time


def limits_of(cfg: Any, command: str = "run") -> Any:
    """The :class:`~sandbox.confine.spawn.Limits` the settings ask for (defaults for what they leave).

    ``exec`` gets the memory bound where it is free (a v1 memory cgroup joined through ``tasks``, or
    the v2 cgroup made for the processes bound anyway), and everywhere when ``max_memory`` is set:
    a move through v2's ``cgroup.procs`` costs every short command several milliseconds (it waits
    for an RCU grace period), while a ``run`` session pays it once.
    """
    from sandbox.confine import spawn

    names = {
        "tmpfs_size": "tmpfs_bytes",
        "max_processes": "max_processes",
        "max_open_files": "max_open_files",
        "max_file_size": "max_file_bytes",
        "max_memory": "max_memory",
        "max_call_size": "max_call_bytes",
    }
    given = {names[k]: v for k, v in cfg.limits.items() if k in names}
    if command != "run" and "max_memory" not in given:
        given["memory_if_free"] = True
    return spawn.Limits(**given)


def installed_paths(argv: Sequence[str]) -> list[str]:
    """What must stay visible inside wherever it is installed (even under ``/tmp``): this sandbox's
    interpreter and package (its hooks run inside), and the agent's executable with its package."""
    import sandbox

    # The console script lies in the venv's bin, below sys.prefix.
    out = [sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sandbox.__file__)]
    out.append(sys.base_prefix)  # a venv's interpreter and standard library (pyenv's, under a hidden home)
    if argv:
        found = shutil.which(argv[0]) if "/" not in argv[0] else os.path.abspath(argv[0])
        for path in (found, os.path.realpath(found)) if found else ():
            folder = os.path.dirname(path)
            # A node agent needs its whole node_modules (its dependencies lie beside it).
            parts = folder.split(os.sep)
            if "node_modules" in parts:
                folder = os.sep.join(parts[: parts.index("node_modules") + 1])
            elif os.path.basename(folder) == "bin":
                folder = os.path.dirname(folder)
            out.append(folder)
        # A script the agent's interpreter runs (``python agent.py``, ``node cli.js``): the file alone,
        # never its directory, which may be your working tree.
        out += [a for a in argv[1:] if os.path.isabs(a) and os.path.isfile(a)]
    # As named (a link below /tmp must exist inside too); the sandbox binds where each leads as well.
    return [os.path.abspath(p) for p in out if p and os.path.isabs(p) and os.path.realpath(p) != "/"]


def _expand(entry: str, home: str) -> str:
    from sandbox.agent.agentstate import expand_home

    return os.path.abspath(expand_home(entry, home))  # absolute: the settings refuse relative entries


def _common_dir(user_workdir: str | None) -> str:
    return os.path.join(user_workdir, ".git") if user_workdir else ""


def resolver(command: str, isolate: str | None, network: str | None) -> Callable[[str | None], Isolation]:
    """:func:`resolve` for a user working tree found later (``sandbox exec``'s fast path)."""
    return lambda user_workdir: resolve(user_workdir, command, isolate, network)
