"""``sandbox completion bash|zsh|fish``: the shell completion script (names: :mod:`sandbox.cli.complete`)."""

from __future__ import annotations

import click

INSTALL = {
    "bash": 'eval "$(sandbox completion bash)"   # in ~/.bashrc',
    "zsh": 'eval "$(sandbox completion zsh)"    # in ~/.zshrc',
    "fish": "sandbox completion fish > ~/.config/fish/completions/sandbox.fish",
}


@click.command("completion")
@click.argument("shell", type=click.Choice(sorted(INSTALL)))
@click.option("--json", "as_json", is_flag=True, help="Print the script and how to install it as JSON.")
@click.pass_context
def completion(ctx: click.Context, shell: str, as_json: bool) -> None:
    """Print the shell completion script for SHELL; it completes commands, options, run ids, labels and calls.

    \b
    bash:  eval "$(sandbox completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(sandbox completion zsh)"    (in ~/.zshrc)
    fish:  sandbox completion fish > ~/.config/fish/completions/sandbox.fish
    """
    from click.shell_completion import get_completion_class

    from sandbox.cli.jsonout import emit_json

    cls = get_completion_class(shell)
    assert cls is not None
    script = cls(ctx.find_root().command, {}, "sandbox", "_SANDBOX_COMPLETE").source()
    if as_json:
        emit_json({"shell": shell, "script": script, "install": INSTALL[shell]})
    else:
        click.echo(script, nl=False)
