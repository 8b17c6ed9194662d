"""``sandbox hook <agent>``: the hook handler agents call before and after each tool call.

Reads the agent's hook JSON on stdin and records a call start or finish (or settles the calls an
agent moved on from). A call the sandbox refuses (a denial) is blocked with the agent's own deny
answer (its adapter's ``respond``; exit 2 with the reason on stderr for others). It never blocks the
agent because of its own failure unless asked to (``--strict`` or ``hooks.strict`` in the
settings): on any problem it prints one line on stderr and exits 1, which Claude Code and Gemini
CLI treat as a non-blocking error; with strict it exits 2, which blocks a PreToolUse/BeforeTool.
The work is in :mod:`sandbox.cli.hookrun` (standard library only): ``sandbox hook AGENT
[--strict]`` runs it before click is even imported (:func:`sandbox.cli.main`); this click command
is the same for ``--help`` and the test runner. When no process hosting the run (``sandbox run`` or
``sandbox serve``) answers, the event is recorded in this process and ``sandbox serve`` is spawned
in the background for the next ones.
"""

from __future__ import annotations

import sys

import click

from sandbox.cli.group import SandboxGroup

#: -C and --json, which every command takes, mean less here: the event names its own directory,
#: and the answer is the agent's hook protocol (JSON already).
SHARED_HELP = {
    "-C": "Taken by every command; a hook's run is found from the event's cwd, not from DIR.",
    "--json": "Taken by every command; a hook answers in the agent's hook protocol (JSON) anyway.",
}


class _HookGroup(SandboxGroup):
    """``sandbox hook``: one command per agent with hooks, made when asked for (the registry,
    :mod:`sandbox.agent.adapters`, is not imported by ``sandbox --help``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """``generic`` and every agent with hooks."""
        from sandbox.agent import adapters

        return sorted({*super().list_commands(ctx), *adapters.hook_names()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command of ``cmd_name``: ``generic``, or the hook of that agent."""
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        from sandbox.agent import adapters

        if cmd_name not in adapters.hook_names():
            return None
        command = _agent_command(cmd_name, str(adapters.load(cmd_name).HOOK_HELP))
        return super().get_command(ctx, command.name or cmd_name)


@click.group("hook", cls=_HookGroup)
def hook() -> None:
    """Record an agent's tool call from its hook (JSON on stdin); see hooks/README.md."""


def _run(agent: str, strict: bool) -> int:
    from sandbox.cli.hookrun import run

    return run(agent, strict, sys.stdin.buffer, _Echo(), _Echo(err=True))


class _Echo:
    """A text stream over click.echo, so click's test runner captures the hook's output."""

    def __init__(self, err: bool = False) -> None:
        self.err = err

    def write(self, text: str) -> int:
        click.echo(text, err=self.err, nl=False)
        return len(text)


_STRICT = click.option("--strict", is_flag=True, help="Block the tool call (exit 2) when it cannot be recorded.")


def _agent_command(name: str, help_text: str) -> click.Command:
    """``sandbox hook NAME``: one per agent with hooks (the registry, :mod:`sandbox.agent.adapters`)."""

    @_STRICT
    def command(strict: bool) -> None:
        sys.exit(_run(name, strict))

    made = hook.command(name, help=help_text)(command)
    made.shared_help = SHARED_HELP  # type: ignore[attr-defined]
    return made


@hook.command("generic")
@_STRICT
def generic(strict: bool) -> None:
    """The generic protocol: {"event": "start"|"finish", "cwd", "tool", "call_id", ...}."""
    sys.exit(_run("generic", strict))


generic.shared_help = SHARED_HELP  # type: ignore[attr-defined]
