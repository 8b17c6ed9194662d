"""``sandbox mcp``: serve a run's tools over the Model Context Protocol (stdio, or HTTP on 127.0.0.1)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from sandbox.cli.finding import base_dir, data_root, main_workdir
from sandbox.cli.isolation import isolation_options, resolver

if TYPE_CHECKING:
    import socket

    from sandbox.confine.spawn import Isolation
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project


@click.command("mcp")
@click.option("-C", "directory", type=click.Path(file_okay=False), default=None, help="The repository to use.")
@click.option("--run", "run_id", default=None, help="Work in this run from the start (id or unique prefix).")
@click.option("--new", "new", is_flag=True, help="Start a new run for the session (snapshot of your tree).")
@click.option("--label", default=None, help="Label of the run --new starts.")
@click.option(
    "--http",
    "port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve streamable HTTP on 127.0.0.1:PORT/mcp to clients with its bearer token (0: a free port).",
)
@click.option(
    "--headers-for",
    "headers_for",
    type=click.IntRange(1, 65535),
    default=None,
    help="Print the headers a client sends to the 'sandbox mcp --http PORT' of this machine, and exit "
    "(Claude Code's headersHelper: the token stays out of the client's config).",
)
@isolation_options(network_default="off")
@click.pass_context
def mcp(
    ctx: click.Context,
    directory: str | None,
    run_id: str | None,
    new: bool,
    label: str | None,
    port: int | None,
    headers_for: int | None,
    isolate: str | None,
    network: str | None,
) -> None:
    """Serve the sandbox's tools to any MCP client (Claude Code, Codex, Cursor, ...) on stdio.

    The client's model gets tools to start or open a run, read, write, edit, list and search its
    files, run confined commands, and read the run's log and diff. Each changing tool call is one
    recorded call in the run's ledger. Applying, undoing and dropping stay with you, on this CLI.
    Commands run as under 'sandbox exec' (--isolate, --network; network off by default).
    """
    from sandbox.errors import UsageError
    from sandbox.store.project import Project

    if headers_for is not None:
        from sandbox.cli.mcp_headers import headers_json

        click.echo(headers_json(headers_for))
        return
    if new and run_id:
        raise UsageError("Give --run RUN or --new, not both.")
    if port is not None and not (new or run_id):
        # Whoever holds the token (any local process may try) would otherwise open every run here.
        raise UsageError("--http serves one run: give --run RUN or --new.")
    if label and not new:
        raise UsageError("--label names the run that --new starts; add --new.")
    if directory and not os.path.isdir(directory) and os.environ.get("SANDBOX_RUN"):
        # Started by an agent of 'sandbox run' whose sandbox does not show the user's tree: the
        # current directory (the run's worktree, where the agent works) finds the repository.
        directory = None
    project, workdir, cwd_run = Project.discover(directory or base_dir(ctx))
    listening = None
    if port is not None:
        from sandbox.mcp.server import listen_http

        listening = listen_http(port)  # before a run starts: a port in use costs nothing
    project.data_root = data_root(workdir or main_workdir(project.common_dir))
    iso = resolver("exec", isolate, network)
    now = iso(workdir or main_workdir(project.common_dir))

    from sandbox.agent import procs
    from sandbox.confine import envfilter, spawn
    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace

    # Inside one of our sandboxes (an agent's under 'sandbox run') the run's ledger is read-only:
    # the calls are recorded by the repository's host, which 'sandbox run' keeps alive.
    boxed = spawn.inside_sandbox(os.environ.get(envfilter.CONFINED_ENV))
    settings = Settings(
        data_root=project.data_root,
        isolation=iso,
        command_env=dict(os.environ),
        on_open=None if boxed else _autostart_service,
        boot_id=procs.boot_id(),
        through_host=boxed,
    )
    ws = _workspace(Workspace(project, workdir, settings), run_id or cwd_run, new, label, now, boxed)
    net = now.network
    if ws.run is not None:  # stderr: the client's log (stdout is the protocol)
        click.echo(f"sandbox: serving run {ws.run.run_id} ({ws.run.worktree}) over MCP", err=True)
    _serve(ws, listening, net)


def _workspace(
    ws: Workspace, chosen: str | None, new: bool, label: str | None, now: Isolation, boxed: bool
) -> Workspace:
    """``ws`` with its run: the enclosing ``sandbox run``'s, a new one (--new) or the one chosen."""
    from sandbox.errors import SandboxError

    inside = os.environ.get("SANDBOX_RUN") if new else None
    if inside and _existing_run(ws.project, inside):
        # Started by an agent that 'sandbox run' runs (Codex passes SANDBOX_RUN with env_vars):
        # that run is the session's, so --new works on it instead of snapshotting another.
        ws.open_run(inside)
    elif new and boxed:
        raise SandboxError(
            "This MCP server runs inside the sandbox of 'sandbox run', where it cannot start a run; pass the "
            "session's run with env_vars = [\"SANDBOX_RUN\"] in the client's config, or --run RUN."
        )
    elif new:
        _check_isolation(now)  # before a run starts: a refusal costs nothing
        ws.start_run(label)
    elif chosen:
        ws.open_run(chosen)
    if ws.run is not None:
        ws.pin()  # the run chosen here is the only one the model works on
        if ws.hosted is None and not os.access(ws.run.dir, os.W_OK):
            # A read-only view of the run (EROFS, whatever the mode bits say): inside our sandbox
            # started by a client that passes on only the variables it is told (Codex), or another's.
            ws.record_through_host()
        _check_recordable(ws)
    if ws.hosted is None:
        # A server recording through the host runs its commands in the sandbox around it: it needs
        # no sandbox of its own (one nested in bubblewrap may not be possible there).
        _check_isolation(now)
    return ws


def _serve(ws: Workspace, listening: socket.socket | None, net: bool) -> None:
    """Serve ``ws`` over HTTP (``--port``) or stdio until the client goes away."""
    from sandbox.mcp import server

    if listening is not None:
        import secrets

        bound = listening.getsockname()[1]
        # Yours to give the client; SANDBOX_MCP_TOKEN sets it (a client config that stays the same).
        from sandbox.cli import mcp_headers
        from sandbox.confine import envfilter

        token = os.environ.get(envfilter.MCP_TOKEN_ENV) or secrets.token_urlsafe(32)
        click.echo(f"sandbox: MCP server on http://127.0.0.1:{bound}/mcp", err=True)
        # Kept where no sandbox sees it; a client asks for it with --headers-for (never stored in its config).
        mcp_headers.store_token(bound, token)
        click.echo(f"sandbox: clients get their header from 'sandbox mcp --headers-for {bound}'", err=True)
        try:
            server.serve_http(ws, listening, token, network=net)
        finally:
            mcp_headers.forget_token(bound, token)
        return
    abandoned = server.serve_stdio(ws, network=net)
    if abandoned:
        run = ws.run.run_id if ws.run is not None else "RUN"
        click.echo(
            f"sandbox: the client went away during {', '.join(abandoned)}; left unfinished: "
            f"'sandbox resume {run}' reports it uncertain.",
            err=True,
        )


def _check_isolation(isolation: object) -> None:
    """Refuse at start (one line) when the confinement asked for cannot be had here."""
    from sandbox.confine import spawn

    assert isinstance(isolation, spawn.Isolation)
    if isolation.enabled:
        spawn.check(isolation)


def _autostart_service(run: object) -> None:
    from sandbox.cli.hooks_cmd import autostart_host
    from sandbox.run.run import Run

    assert isinstance(run, Run)
    autostart_host(run)


def _existing_run(project: Project, run_id: str) -> bool:
    """True when ``run_id`` is a run of ``project`` (``SANDBOX_RUN`` from an enclosing ``sandbox run``)."""
    from sandbox.errors import SandboxError
    from sandbox.run.names import resolve_run

    try:
        return resolve_run(project, run_id) == run_id
    except SandboxError:
        return False


def _check_recordable(ws: Workspace) -> None:
    """Refuse at start (one line) when the run's ledger is read-only here and no host answers for it."""
    from sandbox.errors import SandboxError

    assert ws.run is not None
    run = ws.run.run_id
    if ws.hosted is not None and not ws.hosted.reachable():
        raise SandboxError(
            f"This MCP server sees run {run}'s ledger read-only (it runs inside a sandbox) and the repository's "
            f"host, through which it would record, does not answer; start the agent with 'sandbox run {run} -- "
            "AGENT ...', which keeps the host running."
        )
