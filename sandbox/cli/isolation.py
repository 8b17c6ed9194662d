"""``--isolate`` and ``--network``: the CLI side of OS confinement (see :mod:`sandbox.agent.confine`).

The library reads no environment: this module finds the bubblewrap program on ``PATH``, expands
``~`` with ``HOME``, looks at the terminal, reads the user's settings, and hands the library one
:class:`~sandbox.agent.confine.Isolation`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from sandbox.agent.confine import Isolation

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
) -> Isolation:
    """The confinement asked for by the flags, else by the user's settings, else the defaults.

    ``agent``: the command and ``--hooks`` adapter of ``sandbox run``, whose model endpoints (and
    base-URL variable's host) start the allowlist of ``--network allow``.
    """
    from sandbox.agent import confine
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
    state = confine.DEFAULT_AGENT_STATE if cfg.agent_state is None else cfg.agent_state
    # Only 'sandbox run' gives an agent its state (and a home of its own, sandbox.agent.agenthome): any
    # other confined command keeps the agents' state in your home read-only and creates nothing there.
    entries = (list(state) if command == "run" else []) + cfg.writable
    home = os.path.expanduser("~")
    writable = confine.state_paths(entries, home)
    if sys.platform == "darwin":
        backend, program = "seatbelt", SEATBELT if os.access(SEATBELT, os.X_OK) else None
    else:
        backend, program = "bwrap", shutil.which("bwrap")
    try:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        interactive = False
    readable = (home,) if os.path.isabs(home) and home != "/" else ()
    if isolate is None and confine.inside_sandbox(os.environ.get(confine.CONFINED_ENV)):
        return confine.Isolation(False, net, program, backend, inherited=True)
    settings, private = confine.config_paths(confine.AGENT_CONFIG, confine.AGENT_PRIVATE, writable, home)
    return confine.Isolation(
        enabled,
        net,
        program,
        backend,
        tuple(writable),
        interactive,
        readable,
        config=tuple(settings),
        private=tuple(private),
        allow=allow,
    )


def _allowlist(extra: list[str], agent: tuple[str, str | None] | None) -> tuple[str, ...]:
    """The agent's model endpoints, its base URL's host (from the environment) and ``[network] allow``."""
    from sandbox.agent import netproxy
    from sandbox.run.config import ConfigError

    who = netproxy.agent_of(*agent) if agent else None
    try:
        return tuple(netproxy.default_allowlist(who, os.environ, extra))
    except netproxy.AllowlistError as exc:
        raise ConfigError(f"[network] allow in your settings: {exc}; write host, host:port or *.domain.") from None


def resolver(command: str, isolate: str | None, network: str | None) -> Callable[[str | None], Isolation]:
    """:func:`resolve` for a user working tree found later (``sandbox exec``'s fast path)."""
    return lambda user_workdir: resolve(user_workdir, command, isolate, network)
