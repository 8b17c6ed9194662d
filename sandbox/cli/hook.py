"""``sandbox hook <agent>``: the hook handler agents call before and after each tool call.

Reads the agent's hook JSON on stdin and records a call start or finish (or settles the calls an
agent moved on from). A call the sandbox refuses (a denial) is blocked with the agent's own deny
answer (its adapter's ``respond``; exit 2 with the reason on stderr for others). It never blocks the
agent because of its own failure unless asked to (``--strict`` or ``hooks.strict`` in the
settings): on any problem it prints one line on stderr and exits 1, which Claude Code and Gemini
CLI treat as a non-blocking error; with strict it exits 2, which blocks a PreToolUse/BeforeTool.
Only click and the standard library are imported on the way to the process hosting the run
(``sandbox run`` or ``sandbox serve``); when none answers, the event is recorded in this process
and ``sandbox serve`` is spawned in the background for the next ones.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from sandbox import hookproto

EXIT_ERROR = 1
EXIT_BLOCK = 2


@click.group("hook")
def hook() -> None:
    """Record an agent's tool call from its hook (JSON on stdin); see hooks/README.md."""


def _run(agent: str, strict: bool) -> int:
    from sandbox import hookproto
    from sandbox.errors import SandboxError

    success_stdout = ""
    respond: Any = None
    payload: Any = None
    outcome: hookproto.Outcome
    try:
        payload = hookproto.read_payload(sys.stdin.buffer)
        if agent == "generic":
            event: hookproto.HookEvent | None = hookproto.HookEvent.from_dict(payload)
        else:
            from sandbox import adapters

            adapter = adapters.load(agent)
            success_stdout = str(adapter.SUCCESS_STDOUT)
            respond = getattr(adapter, "respond", None)
            event = adapter.to_event(payload)
        if event is None:
            outcome = hookproto.Outcome(True)
        else:
            from sandbox.cli.hooks_cmd import autostart_allowed  # click and the standard library only

            outcome = hookproto.handle(event, _autostart if autostart_allowed() else None)
    except SandboxError as exc:
        outcome = hookproto.Outcome(False, exc.message)
    except Exception as exc:  # the hook must never crash the agent's tool call with a traceback
        outcome = hookproto.Outcome(False, f"unexpected error: {type(exc).__name__}: {exc}")
    if outcome.ok and respond is not None:
        stdout, code = respond(outcome, payload)  # the agent's own answer (e.g. a deny with its reason)
        if stdout or success_stdout:
            click.echo(stdout or success_stdout)
        return int(code)
    if outcome.ok and outcome.decision == "deny":
        # An agent without its own answer format: exit 2 blocks the call, the reason on stderr.
        click.echo(f"sandbox: {outcome.reason}", err=True)
        return EXIT_BLOCK
    if outcome.ok:
        if success_stdout:
            click.echo(success_stdout)
        return 0
    click.echo(f"sandbox: {outcome.message}", err=True)
    return EXIT_BLOCK if strict or outcome.strict else EXIT_ERROR


def _autostart(loc: hookproto.Location) -> None:
    """Called only when no process hosts the run: spawn ``sandbox serve`` for the next events."""
    from sandbox.cli.hooks_cmd import spawn_service

    spawn_service(loc.run_id, loc.worktree)


_STRICT = click.option("--strict", is_flag=True, help="Block the tool call (exit 2) when it cannot be recorded.")


@hook.command("claude-code")
@_STRICT
def claude_code(strict: bool) -> None:
    """Claude Code's PreToolUse / PostToolUse / PostToolUseFailure / Stop / SessionEnd ... hook."""
    sys.exit(_run("claude-code", strict))


@hook.command("gemini")
@_STRICT
def gemini(strict: bool) -> None:
    """Gemini CLI's BeforeTool / AfterTool hook."""
    sys.exit(_run("gemini", strict))


@hook.command("generic")
@_STRICT
def generic(strict: bool) -> None:
    """The generic protocol: {"event": "start"|"finish", "cwd", "tool", "call_id", ...}."""
    sys.exit(_run("generic", strict))
