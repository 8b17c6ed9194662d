"""``--isolate`` and ``--network``: the CLI side of OS confinement (see :mod:`sandbox.confine.spawn`).

The options live here; what they decide from (the machine, the user's settings) is read by
:mod:`sandbox.cli.machine`, which needs no click (``sandbox exec``'s quick path reads it too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sandbox.cli.machine import (
    GAPS_FILE,
    SEATBELT,
    backend_program,
    git_identity,
    installed_paths,
    read_machine,
    resolve,
    resolver,
    say_gaps_once,
)

# Read by the commands from here as before; they live in the click-free module.
__all__ = [
    "GAPS_FILE",
    "NETWORK_MODES",
    "ON_OFF",
    "SEATBELT",
    "backend_program",
    "git_identity",
    "installed_paths",
    "isolation_options",
    "read_machine",
    "resolve",
    "resolver",
    "say_gaps_once",
]

F = TypeVar("F", bound=Callable[..., Any])
ON_OFF = click.Choice(["on", "off"])


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
