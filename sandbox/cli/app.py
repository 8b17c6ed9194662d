"""The ``sandbox`` click group; its commands are the lazily imported ``COMMANDS`` of :mod:`sandbox.cli.commands`."""

from __future__ import annotations

import click

from sandbox.cli.commands import COMMANDS, SUMMARIES
from sandbox.cli.group import SandboxGroup


class RootGroup(SandboxGroup):
    """The ``sandbox`` group: its ``--help`` lists the commands from :data:`SUMMARIES`, importing none."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with each command's first sentence whole (as :class:`SandboxGroup` shows it)."""
        names = sorted(set(self.commands) | set(self.lazy_commands))
        if any(name not in SUMMARIES for name in names):  # one not in the table: every command asked
            super().format_commands(ctx, formatter)
            return
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in names])


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-C",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Run as if started in DIR (like git -C).",
)
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON (any command; also after it).")
@click.option("-P", "--no-pager", "no_pager", is_flag=True, help="Do not pipe output into a pager (like git).")
@click.option("-p", "--paginate", is_flag=True, help="Pipe output into a pager even where a command does not.")
@click.option(
    "--color",
    "color",
    type=click.Choice(("auto", "always", "never")),
    default=None,
    help="Colour: auto, always, never (a bare --color means always; like git, also after the command).",
)
@click.option("--no-color", "no_color", is_flag=True, help="Never colour (same as --color=never).")
@click.version_option(package_name="sandbox", message="sandbox %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    directory: str | None,
    as_json: bool,
    no_pager: bool,
    paginate: bool,
    color: str | None,
    no_color: bool,
) -> None:
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
    ctx.obj["json"] = as_json
    ctx.obj["no_pager"] = no_pager
    ctx.obj["paginate"] = paginate
    ctx.obj["color"] = color
    ctx.obj["no_color"] = no_color


cli.lazy_commands.update(COMMANDS)
