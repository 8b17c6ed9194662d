"""Relaunching a run's agent on its conversation: shared by ``resume --continue`` and ``rewind --continue``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sandbox.cli import escape
from sandbox.cli.isolation import NETWORK_MODES, ON_OFF

if TYPE_CHECKING:
    from sandbox.models import ResumeReport
    from sandbox.run.run import Run


F = TypeVar("F", bound=Callable[..., Any])


#: ``ctx.meta`` key: ``--yes`` was given (a foreign run's agent gets the user's login without asking).
YES = "sandbox.continue.yes"


def continue_options(func: F) -> F:
    """``--isolate``, ``--network`` and ``--yes`` of a command whose ``--continue`` relaunches the agent."""
    func = click.option(
        "--yes",
        is_flag=True,
        expose_value=False,
        callback=lambda ctx, _param, value: ctx.meta.__setitem__(YES, value),
        help="With --continue: give a run from elsewhere's agent your login without asking.",
    )(func)
    func = click.option(
        "--network",
        type=NETWORK_MODES,
        default=None,
        help="With --continue: the network inside (default: as the agent's session ran).",
    )(func)
    return click.option(
        "--isolate",
        type=ON_OFF,
        default=None,
        help="With --continue: OS confinement on or off (default: as the agent's session ran).",
    )(func)


def check_continue_args(
    continue_: bool, as_json: bool, isolate: str | None, network: str | None, extra: Sequence[str], usage: str
) -> None:
    """Refuse (usage) what only goes with ``--continue``, and ``--json`` with it; ``usage``: ``resume RUN``..."""
    from sandbox.errors import UsageError

    if extra and not continue_:
        raise UsageError(f"Extra agent arguments need --continue: sandbox {usage} --continue -- ARGS...")
    if (isolate or network) and not continue_:
        raise UsageError("--isolate and --network go with --continue (they confine the relaunched agent).")
    if continue_ and as_json:
        raise UsageError("--json cannot go with --continue (the agent runs here); 'sandbox log RUN --json' records it.")


def continue_agent(
    ctx: click.Context,
    run: Run,
    report: ResumeReport | None,
    extra: Sequence[str],
    prompt: str | None = None,
    isolate: str | None = None,
    network: str | None = None,
) -> None:
    """Plan the relaunch (:mod:`sandbox.recovery.continue_`) and run it as ``sandbox run`` does; exits.

    ``isolate``/``network``: the user's override of the confinement the session ran with.
    """
    from sandbox.agent import sessions, transcripts
    from sandbox.cli.agenthomes import homes
    from sandbox.cli.foreign import GUARDED, MASKED, NO_LOGIN, may_give_login
    from sandbox.cli.run_agent import run_agent
    from sandbox.recovery import continue_

    if isolate is None:
        _check_recorded(run)  # before anything is planned, blocked or started
    recorded = transcripts.agent_command(run)
    agent = sessions.for_command(recorded.argv) if recorded is not None else None
    where = (recorded.foreign if recorded is not None else None) or continue_.foreign_origin(run)
    # Asked before anything is planned (nothing to continue: plan says so).
    ctx.meta[NO_LOGIN] = agent is not None and not may_give_login(run, agent.name, where, bool(ctx.meta.get(YES)))
    plan = continue_.plan(
        run,
        report,
        homes(run),
        extra,
        subdir=start_subdir(ctx, run),
        prompt=prompt,
        isolate=isolate,
        network=network,
        search_path=os.environ.get("PATH", "").split(os.pathsep),  # where a fetched run's agent is found
    )
    for problem in report.problems if report is not None else []:
        click.echo(f"sandbox: {escape.text(problem)}", err=True)
    for message in plan.messages:
        click.echo(f"sandbox: {escape.text(message)}", err=True)
    ctx.meta[MASKED] = tuple(plan.masked)  # the worktree's settings of a run from elsewhere
    ctx.meta[GUARDED] = True  # the plan went through continue_.foreign_launch
    assert run_agent.callback is not None
    # The callback itself: 'sandbox run' splits its own arguments (RUN -- AGENT...), which are given here.
    ctx.invoke(
        run_agent.callback,
        run_id=run.run_id,
        new=False,
        label=None,
        hooks_for="auto",
        debounce=2.0,
        isolate=plan.isolate,
        network=plan.network,
        command=tuple(plan.argv),
    )


def start_subdir(ctx: click.Context, run: Run) -> str:
    """Where in the worktree ``sandbox run`` will start the agent from here (its session is looked up there)."""
    from sandbox.cli.finding import base_dir
    from sandbox.store.paths import subdir_in_run

    return subdir_in_run(base_dir(ctx), run.worktree, run.user_workdir)


def _check_recorded(run: Run) -> None:
    """Refuse, in one line, when the confinement the session ran with cannot be had on this machine."""
    from sandbox.cli.isolation import backend_program
    from sandbox.confine import spawn
    from sandbox.recovery.continue_ import CannotContinueError, confinement_of, trusted_isolation

    phrase = trusted_isolation(run)  # a fetched run's record chooses no confinement: the settings do
    was_isolate, _was_network = confinement_of(phrase)
    if was_isolate != "on":
        return
    backend, program = backend_program()
    try:
        # What spawn.check decides from (the program, user namespaces): not the whole settings,
        # which 'sandbox run' resolves once more right after (bench/cases/transcripts.py).
        spawn.check(spawn.Isolation(True, False, program, backend))
    except spawn.ConfinementError as exc:
        raise CannotContinueError(
            f"Run {run.run_id}'s agent session ran confined ({phrase}), which this machine cannot give it now: "
            f"{exc.message}"
        ) from None
