"""``sandbox hooks install AGENT [RUN]``: put an agent's hooks in a run's worktree."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from sandbox.cli.finding import ensure_worktree, open_run
from sandbox.cli.group import AgentChoice, SandboxGroup, wants_json
from sandbox.cli.hookrun import AUTOSTART_ENV, autostart_allowed, spawn_service
from sandbox.cli.hookrun import beside as _beside
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.run.run import Run

__all__ = ["AUTOSTART_ENV", "autostart_allowed", "hook_command", "hooks", "spawn_service"]


@click.group("hooks", cls=SandboxGroup)
def hooks() -> None:
    """Set up agents' hooks so each tool call becomes one recorded call."""


def hook_command(agent: str) -> str:
    """The shell command that runs this sandbox's hook handler for ``agent``.

    For Claude Code, which waits for a hook on every tool call, the interpreter is started without
    ``site`` (``-I -S``: no site-packages scan, no ``.pth`` processing, no working directory on the
    path) and imports the package from where it is installed: ~15-40 ms less per hook here. The hook
    needs nothing from site-packages while a process hosts the run; when none does, it runs the
    ordinary ``sandbox hook`` (see :mod:`sandbox.cli.hookrun`).
    """
    import json
    import shlex
    import shutil

    import sandbox

    beside = _beside()
    exe = beside if os.access(beside, os.X_OK) else shutil.which("sandbox") or "sandbox"
    if agent != "claude-code" or not os.access(sys.executable, os.X_OK):
        return f"{shlex.quote(exe)} hook {agent}"
    src = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    # The comment keeps "sandbox hook <agent>" in the command: a later install recognises it as ours.
    code = f"import sys; sys.path.insert(0, {json.dumps(src)}); from sandbox.cli import main; main()"
    code += f"  # sandbox hook {agent}"
    return f"{shlex.quote(sys.executable)} -I -S -c {shlex.quote(code)} hook {agent}"


@hooks.command("install")
@click.argument("agent", type=AgentChoice())
@click.argument("run_id", required=False)
@click.option("--print", "print_only", is_flag=True, help="Print the settings instead of writing them.")
@click.pass_context
def install(ctx: click.Context, agent: str, run_id: str | None, print_only: bool) -> None:
    """Write AGENT's hooks into RUN's worktree (never into your repository).

    Claude Code: .claude/settings.local.json; Gemini CLI: .gemini/settings.json. Existing
    settings are kept. The file is on the run's private list, so it is never part of the patch.
    """
    import json

    from sandbox.agent import adapters
    from sandbox.run.include import add_private

    adapter = adapters.load(agent)
    command = hook_command(agent)
    if print_only:
        click.echo(json.dumps({"hooks": adapter.hook_settings(command)}, indent=2))
        return
    run = open_run(ctx, run_id)
    made = ensure_worktree(run)
    if made:
        click.echo(f"sandbox: {made}", err=True)
    add_private(run.dir, [adapter.SETTINGS_PATH])  # before the file exists: no cut can catch it
    path = adapters.install(adapter, run.worktree, command)
    as_json = wants_json(ctx)
    if not as_json:
        click.echo(f"sandbox: {agent} hooks written to {path} (private to run {run.run_id}, never in its patch).")
    extra_env = getattr(adapter, "agent_env", None)
    env = dict(extra_env(run.dir, run.worktree)) if extra_env is not None else {}
    if env and not as_json:  # Gemini CLI runs hooks (and -p at all) only in a folder it trusts
        import shlex

        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        click.echo(f"sandbox: start it in the worktree as: {assignments} {agent} ...  (or use 'sandbox run').")
    from sandbox.agent import wire
    from sandbox.run import config

    spawned = False
    if autostart_allowed() and config.load(run.user_workdir).autostart and wire.claim_spawn(run.project.common_dir):
        spawn_service(run.run_id, run.worktree)
        spawned = True
        if not as_json:
            click.echo("sandbox: starting the repository's host in the background ('sandbox serve').")
    if as_json:
        emit_json({"run": run.run_id, "agent": agent, "settings": path, "env": env, "service_started": spawned})


#: What a command that started the host in the background says, once, on stderr.
HOST_STARTED = (
    "started this repository's host in the background (it records the next calls faster and exits after "
    "15 idle minutes; 'sandbox serve --stop' stops it, '[hooks] autostart = false' in .sandbox.toml keeps it off)."
)


def autostart_host(run: Run) -> bool:
    """Spawn the repository's host (``sandbox serve``: the watcher) for the next calls when none runs.

    This call scans the worktree (correct, O(repository)); later ones ask the host's watcher
    (O(changed paths)). The host exits by itself after 15 idle minutes. Off with
    SANDBOX_HOOK_AUTOSTART=0 or ``[hooks] autostart = false``. True when this call started one
    (the caller says so: a git user does not expect a daemon).
    """
    from sandbox.agent import wire

    if not autostart_allowed():
        return False
    from sandbox.errors import SandboxError
    from sandbox.run.config import load as load_config

    try:
        if not load_config(run.user_workdir).autostart:
            return False
    except SandboxError:  # a broken settings file must not stop the command; start reports it
        return False
    if wire.claim_spawn(run.project.common_dir):
        spawn_service(run.run_id, run.worktree)
        return True
    return False
