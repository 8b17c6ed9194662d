"""Launching an agent on a run holding anything from another clone (``sandbox run RUN -- PROGRAM``,
``resume`` and ``rewind --continue``): one rule, :func:`sandbox.recovery.continue_.foreign_launch`.

Whoever wrote such a run chose its worktree, its agent settings among it (hooks, MCP servers): they
are not loaded (masked inside the confinement for any program, :mod:`sandbox.confine.foreign`; the
agent's own switches too), and the user's login is copied into the run's agent home only when the user
says so (``--yes`` for scripts).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from sandbox.cli import escape

if TYPE_CHECKING:
    from sandbox.run.run import Run

#: ``ctx.meta`` key: the worktree paths masked inside the confinement (a foreign run's agent settings,
#: :func:`sandbox.confine.foreign.settings_paths`).
MASKED = "sandbox.continue.masked"
#: ``ctx.meta`` key: the user's login is not seeded into the run's agent home (a foreign run, the user said no).
NO_LOGIN = "sandbox.continue.no_login"
#: ``ctx.meta`` key: the launch already went through :func:`sandbox.recovery.continue_.foreign_launch`.
GUARDED = "sandbox.continue.guarded"


def guard_foreign(
    ctx: click.Context, run: Run, command: tuple[str, ...], yes: bool, subdir: str, login_for: str | None
) -> tuple[str, ...]:
    """``sandbox run RUN -- PROGRAM`` on a run holding anything from elsewhere: the same rule as ``resume
    --continue`` (:func:`sandbox.recovery.continue_.foreign_launch`), whatever the program (an agent, a
    wrapper of one): the worktree's agent settings masked (down to ``subdir``, where it starts), the
    agent's own switches added when it is one we know, and the login of ``login_for`` (the agent whose
    home in the run is seeded) given only when asked. The command, with those switches."""
    from sandbox.agent import sessions
    from sandbox.recovery import continue_

    agent = sessions.for_command(list(command))
    guard = continue_.foreign_launch(run, agent, subdir=subdir)
    if guard is None:
        return command
    if login_for is not None:
        ctx.meta[NO_LOGIN] = not may_give_login(run, login_for, guard.where, yes)
    for message in guard.messages:
        click.echo(f"sandbox: {escape.text(message)}", err=True)
    ctx.meta[MASKED] = tuple(guard.masked)
    return (*command, *guard.untrusted)


def may_give_login(run: Run, agent: str, where: str | None, yes: bool) -> bool:
    """Whether the user's login for ``agent`` is copied into the run's agent home: always for a run of
    this clone's own (``where`` None); for one holding anything from elsewhere only when the user says so
    (``yes``, or at the terminal), refused in one line without a terminal; nothing to ask without a login."""
    from sandbox.agent import adapters
    from sandbox.errors import UsageError

    if yes or where is None or not login_files(adapters.agent(agent)):
        return True
    if not sys.stdin.isatty():
        raise UsageError(
            f"Run {run.run_id} was {where}, and your {agent} login is copied into its agent's home only if "
            "you say so: answer at a terminal, or pass --yes."
        )
    given = click.confirm(
        f"sandbox: run {run.run_id} was {where}; copy your {agent} login into its agent's home (the agent, "
        "confined, reads it there)?",
        default=False,
        err=True,
    )
    if not given:
        click.echo("sandbox: your login is not given to the agent; it may ask you to log in.", err=True)
    return given


def login_files(adapter: Any) -> list[str]:
    """The user's login files an agent's adapter seeds into a run (its ``LOGIN``) that exist."""
    home = os.path.expanduser("~")
    names = [str(n) for n in getattr(adapter, "LOGIN", ())]
    user_dir = getattr(adapter, "user_dir", None)
    if user_dir is not None:  # Codex: CODEX_HOME, else ~/.codex
        base = user_dir(os.environ, home)
        paths = [os.path.join(base, os.path.basename(n)) for n in names]
    else:
        paths = [os.path.join(home, n[2:] if n.startswith("~/") else n) for n in names]
    return [p for p in paths if os.path.exists(p)]
