"""The command-line interface: a thin click layer over the library.

Each command lives in its own module and is registered here. Command modules import only click at
module level and the library inside their function, so that fast paths (``sandbox hook``) do not
pay for imports they do not use.
"""

from __future__ import annotations

import click

from sandbox.cli.common import SandboxGroup, run_main


@click.group(cls=SandboxGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-C",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Run as if started in DIR (like git -C).",
)
@click.version_option(package_name="sandbox", message="sandbox %(version)s")
@click.pass_context
def cli(ctx: click.Context, directory: str | None) -> None:
    """Run coding agents in isolated git worktrees, with a durable ledger of every tool call.

    \b
    Typical session:
      sandbox start                  # snapshot your tree into a new run
      sandbox exec -- make fmt       # a recorded call in the run's worktree
      sandbox log; sandbox diff      # what the agent did
      sandbox apply                  # bring the changes into your tree
      sandbox undo                   # take the last change back out
    """
    ctx.ensure_object(dict)
    ctx.obj["directory"] = directory


COMMANDS = {
    "start": "sandbox.cli.start:start",
    "list": "sandbox.cli.list_runs:list_runs",
    "status": "sandbox.cli.status:status",
    "path": "sandbox.cli.path:path",
    "drop": "sandbox.cli.drop:drop",
    "gc": "sandbox.cli.gc:gc",
    "call": "sandbox.cli.call:call",
    "write": "sandbox.cli.write:write",
    "exec": "sandbox.cli.exec_cmd:exec_cmd",
    "log": "sandbox.cli.log:log",
    "diff": "sandbox.cli.diff:diff",
    "schema": "sandbox.cli.schema:schema",
    "demo": "sandbox.cli.demo:demo",
    # merge-back and undo
    "apply": "sandbox.cli.apply:apply",
    "undo": "sandbox.cli.undo:undo",
    "redo": "sandbox.cli.redo:redo",
    # checkpoints, approvals, resume and recovery
    "checkpoint": "sandbox.cli.checkpoint:checkpoint",
    "checkpoints": "sandbox.cli.checkpoints:checkpoints",
    "approve": "sandbox.cli.approve:approve",
    "deny": "sandbox.cli.deny:deny",
    "resume": "sandbox.cli.resume:resume",
    "rollback": "sandbox.cli.rollback:rollback",
    "compensate": "sandbox.cli.compensate:compensate",
    "repair": "sandbox.cli.repair:repair",
    # wrapping agents
    "run": "sandbox.cli.run_agent:run_agent",
    "hook": "sandbox.cli.hook:hook",
    "hooks": "sandbox.cli.hooks_cmd:hooks",
    "serve": "sandbox.cli.serve:serve",
}
cli.lazy_commands.update(COMMANDS)


def main() -> None:
    """Console-script entry point."""
    run_main(cli)
