"""``sandbox run [RUN | --new [--label L]] -- AGENT ARGS...``: run a coding agent in a run's worktree."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import base_dir, ensure_worktree, open_project, seal_when_done
from sandbox.cli.foreign import GUARDED, MASKED, NO_LOGIN
from sandbox.cli.group import AgentChoice, wants_json
from sandbox.cli.isolation import isolation_options, resolve
from sandbox.cli.jsonout import stdout_to_stderr

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sandbox.agent.adapter import AgentAdapter
    from sandbox.agent.early import Started, Where
    from sandbox.agent.launch import SessionResult
    from sandbox.confine.spawn import Isolation
    from sandbox.run.run import Run
    from sandbox.store.project import Project

#: Seconds a host started by a session exits after its last request when autostart is off.
SESSION_HOST_IDLE = 30.0


class _RunCommand(click.Command):
    """Splits ``[RUN] -- AGENT...`` itself, as ``sandbox exec`` does."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        cut = args.index("--") if "--" in args else len(args)
        super().parse_args(ctx, args[:cut])
        if ctx.resilient_parsing:  # shell completion: RUN is completed while no '--' was typed
            ctx.meta["sandbox.command_started"] = "--" in args
            return []
        rest = list(ctx.params.pop("rest", ()))
        if len(rest) > 1:
            raise click.UsageError("Put '--' before the agent: sandbox run [RUN] -- AGENT ARGS...")
        if rest and not rest[0].strip():
            from sandbox.run.names import empty_run_name

            raise empty_run_name(rest[0])  # "$RUN" unset: not a new run, nor the only one
        ctx.params["run_id"] = rest[0] if rest else None
        ctx.params["command"] = tuple(args[cut + 1 :])
        if not ctx.params["command"]:
            raise click.UsageError("No agent command given: sandbox run [RUN] -- AGENT ARGS...")
        return []


def _fast_where(ctx: click.Context, run_id: str | None) -> tuple[Where, str, int] | None:
    """The run named, found as the fast read path finds it (:mod:`sandbox.fast.foldcache`, no pygit2 or
    pydantic): (where it lives, your working tree, its calls so far); None: take the full path."""
    from sandbox.agent.early import Where
    from sandbox.fast import foldcache, views
    from sandbox.store import layout

    if run_id is None or os.environ.get("GIT_DIR") or os.environ.get("GIT_WORK_TREE"):
        return None  # a new run, the run of the worktree you are in, or a repository named by git's variables
    try:
        repo, workdir, _cwd_run = foldcache.discover(base_dir(ctx))
        if workdir is None:
            return None
        found = repo.resolve(run_id, None)
        state = repo.state(found)
    except foldcache.Miss:
        return None
    if state.get("foreign") != 0:
        return None  # events from elsewhere (or not counted): the full path decides what its agent may load
    place = repo.place(found)
    if place.legacy or not views.worktree_exists(place):
        return None  # the ref guard, or the worktree to make first: the full path
    run_dir = layout.run_dir(repo.common_dir, found)
    where = Where(repo.common_dir, found, run_dir, place.worktree, workdir, legacy=False)
    return where, workdir, len(state["order"])


def _open_or_start(
    project: Project, workdir: str | None, cwd_run: str | None, run_id: str | None, new: bool, label: str | None
) -> Run:
    """The run named (or the one you are in), or a new one: the full path."""
    from sandbox.errors import UsageError
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run

    if run_id or (cwd_run and not new):
        run = Run.open(project, resolve_run(project, run_id, cwd_run))
    elif workdir is None:
        raise UsageError("You are inside a run's worktree; run 'sandbox run --new' from your own tree.")
    else:
        run = Run.start(project, workdir, label)
        click.echo(f"sandbox: started run {run.run_id} in {run.worktree}", err=True)
        report = run.include_report
        if report is not None:
            if report.copied:
                copied = ", ".join(escape.path(p) for p in report.copied)
                click.echo(f"sandbox: copied into the worktree: {copied}", err=True)
            for warning in report.warnings:
                click.echo(f"sandbox: warning: {escape.text(warning)}", err=True)
    seal_when_done(run)  # the session's calls are read without git by the next status (sandbox.fast.foldcache)
    made = ensure_worktree(run)  # a run fetched from elsewhere gets its worktree here first
    if made:
        click.echo(f"sandbox: {made}", err=True)
    if not run.worktree_exists():
        raise UsageError(f"The worktree of run {run.run_id} is missing; see 'sandbox status {run.run_id}'.")
    return run


def _open_beside(ctx: click.Context, started: Started) -> Run:
    """The run of an agent that :func:`sandbox.agent.early.start` started, opened while it starts;
    should that fail, the agent is waited for (it is the user's session) before the error is raised."""
    from sandbox.agent.early import yielding

    def open_run() -> Run:
        # What the session imports next comes here too, at the same lower priority.
        import sandbox.agent.launch  # noqa: F401
        import sandbox.agent.netrecord  # noqa: F401
        from sandbox.run.run import Run

        project, _workdir, _cwd_run = open_project(ctx)
        return Run.open(project, started.where.run_id)

    try:
        run = yielding(open_run, started.look)  # beside the agent's start, on the CPU it leaves idle
    except BaseException:
        with contextlib.suppress(Exception):
            started.wait()
        started.release()
        started.stop_proxy()
        raise
    seal_when_done(run)  # the session's calls are read without git by the next status (sandbox.fast.foldcache)
    return run


def _is_foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except OSError:
        return False


@click.command("run", cls=_RunCommand)
@click.option("--new", is_flag=True, help="Start a new run from your working tree (the default outside a run).")
@click.option("--label", default=None, help="A label for the new run.")
@click.option(
    "--hooks",
    "hooks_for",
    type=AgentChoice(("auto", "none")),
    default="auto",
    help="Install this agent's hooks in the worktree first (auto: from the command's name).",
)
@click.option("--debounce", type=click.FloatRange(0.1, 600), default=2.0, help="Quiet seconds before a cut.")
@isolation_options(network_default="allow")
@click.option("--yes", is_flag=True, help="On a run from elsewhere: give its agent your login without asking.")
@click.argument("rest", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run_agent(
    ctx: click.Context,
    run_id: str | None,
    new: bool,
    label: str | None,
    hooks_for: str,
    debounce: float,
    isolate: str | None,
    network: str | None,
    command: tuple[str, ...],
    yes: bool = False,
) -> None:
    """Run AGENT in a run's worktree; every tool call (or quiet-point change) is recorded.

    Without RUN a new run is started, unless you are inside a run's worktree. The agent runs
    confined: it can write its worktree and its own state (Claude Code, Gemini CLI and Codex: a home
    of their own in the run, seeded from yours at each start), nothing of yours.
    Its network goes through an allowlist (its model endpoints and [network] allow in
    .sandbox.toml; --network on: all, off: none); each refused connection is in 'sandbox log'.
    It starts in the subdirectory you are in (of the worktree, or the same one as in your tree).
    Its exit code is passed through and the run is left for you to preview, apply or drop. A
    session stopped with Ctrl-C is recorded as interrupted (its last changes as a failed call).
    On a run holding anything from another clone the worktree's own agent settings (hooks, MCP
    servers) are not loaded, and your login is copied in only if you say so (--yes for scripts).

    With --json the agent's output goes to stderr and stdout carries only the session's summary.
    """
    from sandbox.errors import UsageError
    from sandbox.run.include import add_private
    from sandbox.store.paths import subdir_in_run

    as_json = wants_json(ctx)
    # Start-up (issue #26): a run named from your tree is found without pygit2 and pydantic, and its
    # agent starts before they are imported; the run is opened while the agent draws its first screen.
    fast = None if new or as_json else _fast_where(ctx, run_id)
    run: Run | None = None
    workdir: str | None
    if fast is not None:
        where, workdir, before = fast
        common_dir = where.common_dir
    else:
        project, workdir, cwd_run = open_project(ctx)
        common_dir = project.common_dir
    if run_id and new:
        raise UsageError("Give either RUN or --new, not both.")
    here = base_dir(ctx)
    isolation = _isolation(here, workdir, common_dir, hooks_for, isolate, network, command)
    if fast is None:
        run = _open_or_start(project, workdir, cwd_run, run_id, new, label)
        if not ctx.meta.get(GUARDED):  # resume/rewind --continue planned the same already
            from sandbox.cli.foreign import guard_foreign

            starts_in = subdir_in_run(here, run.worktree, run.user_workdir)
            command = guard_foreign(ctx, run, command, yes, starts_in, _seeded(command, hooks_for))
        from sandbox.agent.launch import where_of

        where = where_of(run)
        before = len(run.state().order)  # the exit summary speaks of this session's calls only
    env, home_for = _agent_env(where, command, hooks_for, add_private, login=not ctx.meta.get(NO_LOGIN, False))
    isolation = _masked(ctx, _with_home(isolation, home_for), where)
    subdir = subdir_in_run(here, where.worktree, where.user_workdir)
    began = time.time()
    run, result = _session(ctx, run, where, command, env, subdir, debounce, isolation, as_json)
    from sandbox.cli.agenthomes import store_transcripts

    result.notes.extend(store_transcripts(run, "session end"))  # the conversation belongs to the run
    _say_what_happened(run, result, before)
    if as_json:
        _json_summary(run, result, before, isolation)
    else:
        _hint_and_summary(run, result, before, home_for, command, began)
    sys.exit(result.returncode)


def _hint_and_summary(
    run: Run, result: SessionResult, before: int, home_for: AgentAdapter | None, command: tuple[str, ...], began: float
) -> None:
    """How to go on with the session inside the sandbox, and what it did, on stderr."""
    rid = run.run_id
    again = home_for.resume_args(run.dir, began) if home_for is not None else None
    if again:  # the agent's own hint ("claude --resume ID") would leave the sandbox
        shown = " ".join(shlex.quote(a) for a in [os.path.basename(command[0]), *again])
        click.echo(
            escape.text(f"sandbox: to go on with this session inside the sandbox: sandbox run {rid} -- {shown}"),
            err=True,
        )
    calls, paths = len(run.entries()[before:]), len(run.changed_paths())
    ended = f"it was interrupted ({result.interrupted.partition(': ')[2]})" if result.interrupted else ""
    click.echo(
        f"sandbox: run {rid}: {calls} call(s) recorded in this session, {paths} path(s) changed in the run; "
        + (ended or f"the agent exited {result.returncode}")
        + ".\n"
        f"  preview: sandbox diff {rid}\n  apply:   sandbox apply {rid}\n  undo:    sandbox undo {rid}",
        err=True,
    )


def _json_summary(run: Run, result: SessionResult, before: int, isolation: Isolation) -> None:
    """The session's summary on stdout (``--json``)."""
    from sandbox.cli.jsonout import emit_json

    entries = run.entries()[before:]
    emit_json(
        {
            "run": run.run_id,
            "worktree": run.worktree,
            "exit_code": result.returncode,
            "interrupted": result.interrupted,
            "calls": len(entries),
            "changed_paths": len(run.changed_paths()),
            "unfinished": result.unfinished,
            "not_run": [e.call_id for e in entries if e.status.value == "not_run"],
            "stopped_processes": result.stopped,
            "notes": result.notes,
            "network": isolation.network_mode if isolation.enabled else "on",
            "network_allow": list(isolation.allow) if isolation.enabled and isolation.allow is not None else None,
            "network_refused": result.network_refused,
        }
    )


def _auto_hooks(command: str) -> str | None:
    """The agent with hooks a command starts by its exact name (``claude``, ``gemini``), or None."""
    from sandbox.agent import adapters

    name = os.path.basename(command)
    return next((n for n in adapters.hook_names() if name == adapters.agent(n).PROGRAM), None)


def _isolation(
    here: str,
    workdir: str | None,
    common_dir: str,
    hooks_for: str,
    isolate: str | None,
    network: str | None,
    command: tuple[str, ...],
) -> Isolation:
    """How the agent is confined, checked before a run is started for nothing; the state in your home
    of an agent with a home in the run stays read-only, another's is made (it hangs without it)."""
    from sandbox.agent import adapters, agentstate
    from sandbox.agent.hosted import cannot_start, user_workdir_of
    from sandbox.confine import spawn

    unstartable = cannot_start(command, here)
    if unstartable is not None:  # before a run is started or anything recorded
        raise unstartable
    hooks_named = hooks_for if hooks_for not in ("auto", "none") else None
    isolation = resolve(
        workdir or user_workdir_of(common_dir),
        "run",
        isolate,
        network,
        agent=(command[0], hooks_named),
        argv=command,
    )
    spawn.check(isolation)  # before a run is started for nothing
    user_home = os.path.expanduser("~")
    # Agents with a home in the run keep nothing in yours: it stays read-only, nothing is created there.
    replaced = [p for name in adapters.names() for p in adapters.agent(name).REPLACES]
    isolation = agentstate.without_state(isolation, agentstate.state_paths(replaced, user_home))
    family = adapters.family_of(command[0])  # claude, gemini, ...
    homed = {adapters.agent(n).PROGRAM for n in adapters.names()}  # every known agent has a home in the run
    if isolation.enabled and family and family not in homed:
        # Only this agent's state paths are created (it hangs or fails without them, read-only).
        mine = [p for p in isolation.writable if family in os.path.basename(p.rstrip("/"))]
        agentstate.prepare_state(mine, writable=isolation.writable)  # another agent may be writing them
    return isolation


def _masked(ctx: click.Context, isolation: Isolation, where: Where) -> Isolation:
    """``isolation`` with a foreign run's agent settings masked (:mod:`sandbox.confine.foreign`), if any;
    refused under ``--isolate off``."""
    from sandbox.confine import foreign

    masked = list(ctx.meta.get(MASKED, ()))
    masking = foreign.mask(isolation, masked, where.worktree, where.run_id)
    assert masking is not None
    return masking


def _seeded(command: tuple[str, ...], hooks_for: str) -> str | None:
    """The agent whose home in the run :func:`_agent_env` makes, seeded with your login: the one named
    by ``--hooks``, else the one ``command`` starts by its exact name; None for any other program."""
    from sandbox.agent import adapters

    if hooks_for not in ("auto", "none"):
        return hooks_for
    name = os.path.basename(command[0])
    return next((n for n in adapters.names() if name == adapters.agent(n).PROGRAM), None)


def _homed(command: str) -> AgentAdapter | None:
    """The agent without hooks that ``command`` starts by its exact name and that has a home in the run
    (Codex), or None."""
    from sandbox.agent import adapters

    name = os.path.basename(command)
    return next((adapters.agent(n) for n in adapters.names() if name == adapters.agent(n).PROGRAM), None)


def _with_home(isolation: Isolation, home_for: AgentAdapter | None) -> Isolation:
    """Only the started agent's home in the run is writable for it (the one its session was pointed at)."""
    from sandbox.agent import agentstate

    return agentstate.with_home(isolation, home_for.HOME_NAME if home_for is not None else None)


def _agent_env(
    where: Where,
    command: tuple[str, ...],
    hooks_for: str,
    add_private: Callable[[str, list[str]], object],
    login: bool = True,
) -> tuple[dict[str, str], AgentAdapter | None]:
    """The agent's environment, with its home in the run (Claude Code, Gemini CLI, Codex) or its hooks in
    the worktree; and the adapter that knows how to continue its session (None: none does)."""
    from sandbox.agent import adapters
    from sandbox.cli.hooks_cmd import hook_command

    known = _auto_hooks(command[0])
    name = known if hooks_for == "auto" else hooks_for
    env = dict(os.environ)
    adapter = adapters.load(name) if name and name != "none" else None
    # Claude Code, Gemini CLI and Codex keep their state in the run's home for them, hooks or not (their
    # state in your home is read-only in the sandbox: see REPLACES above).
    hooked = adapter if adapter is not None else adapters.load(known) if known else None
    home_for = hooked if hooked is not None else _homed(command[0])
    if hooked is not None:
        add_private(where.run_dir, [hooked.SETTINGS_PATH])  # the agent's own per-run rules: never in the patch
        if adapters.uninstall(hooked, where.worktree):  # where 'hooks install' (or older versions) put them
            click.echo(
                f"sandbox: the sandbox's hooks left the worktree's {hooked.SETTINGS_PATH} for the run's own "
                f"agent home ('sandbox hooks install' puts them back for an agent you start by hand).",
                err=True,
            )
        hooks = hook_command(name) if adapter is not None and name else None
        env.update(hooked.session_env(where.run_dir, where.worktree, os.path.expanduser("~"), hooks, login=login))
    elif home_for is not None:  # an agent without hooks (Codex): its own home is yours unless its variable moves it
        user_dir = getattr(home_for, "user_dir", None)
        mine = {"user_codex": user_dir(os.environ, os.path.expanduser("~"))} if user_dir is not None else {}
        seed: Any = home_for.session_env  # Codex's also takes the user's own home of it
        env.update(seed(where.run_dir, where.worktree, os.path.expanduser("~"), None, login=login, **mine))
    return env, home_for


def _session(
    ctx: click.Context,
    run: Run | None,
    where: Where,
    command: tuple[str, ...],
    env: dict[str, str],
    subdir: str,
    debounce: float,
    isolation: Isolation,
    as_json: bool,
) -> tuple[Run, SessionResult]:
    """Run the agent's session: started early (before the run is opened) when ``run`` is None."""
    from sandbox.agent import early
    from sandbox.cli.hooks_cmd import autostart_allowed, spawn_service

    # The session needs the repository's host (a confined agent records only through it). With
    # autostart turned off (tests, benchmarks) the one started here exits soon after the session.
    idle = None if autostart_allowed() else SESSION_HOST_IDLE
    with stdout_to_stderr(as_json):
        started = None
        if run is None:
            started = early.start(
                where,
                command,
                env=env,
                subdir=subdir,
                isolation=isolation,
                start_host=lambda: spawn_service(where.run_id, where.worktree, idle),
                is_foreground=_is_foreground,
            )
            run = _open_beside(ctx, started)
        _mark_gone_sessions(run, started.token if started is not None else None)
        from sandbox.agent import launch as agent

        result = agent.run_session(
            run,
            command,
            env=env,
            subdir=subdir,
            debounce=debounce,
            is_foreground=_is_foreground,
            isolation=isolation,
            start_host=lambda: spawn_service(where.run_id, where.worktree, idle),
            started=started,
        )
    return run, result


def _mark_gone_sessions(run: Run, current: str | None) -> None:
    """Calls a killed session left started become uncertain before this session's (one line when any)."""
    from sandbox.agent.settle import mark_gone_sessions

    marked = mark_gone_sessions(run, current)
    if marked:
        shown = escape.text(", ".join(marked[:5])) + (", ..." if len(marked) > 5 else "")
        click.echo(
            f"sandbox: {len(marked)} call(s) left started by a sandbox session that is gone are now uncertain "
            f"({shown}); 'sandbox resume {run.run_id}' decides them.",
            err=True,
        )


def _say_what_happened(run: Run, result: SessionResult, before: int) -> None:
    """The session's leftovers, notes, refusals and unfinished or stopped calls, on stderr."""
    if result.stopped:
        shown = ", ".join(f"{p.get('pid')} ({p.get('cmd') or '?'})" for p in result.stopped[:5])
        more = f" and {len(result.stopped) - 5} more" if len(result.stopped) > 5 else ""
        click.echo(
            f"sandbox: the agent left {len(result.stopped)} process(es) running; they were stopped: {shown}{more}.",
            err=True,
        )
    for note in result.notes:
        click.echo(f"sandbox: note: {note}", err=True)
    if result.network_refused:
        click.echo(
            f"sandbox: the network allowlist refused {result.network_refused} connection(s); "
            f"'sandbox log {run.run_id}' shows where to and when ([network] allow in .sandbox.toml adds a host).",
            err=True,
        )
    for call_id in result.unfinished:
        click.echo(f"sandbox: call {call_id} never finished; 'sandbox resume {run.run_id}' sorts it out.", err=True)
    entries = run.entries()[before:]
    not_run = [e for e in entries if e.status.value == "not_run"]
    if not_run:
        click.echo(f"sandbox: {len(not_run)} call(s) did not run (refused or skipped by the agent):", err=True)
        for e in not_run[:10]:
            click.echo(escape.text(f"  {e.call_id} {e.tool_name}: {e.error or 'no reason recorded'}"), err=True)
    for e in [e for e in entries if e.status.value in ("interrupted", "violation")][:10]:
        why = (e.error or "").removeprefix(f"{e.status.value}: ")
        click.echo(escape.text(f"sandbox: call {e.call_id} {e.tool_name} {e.status.value}: {why}"), err=True)
