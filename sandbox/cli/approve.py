"""``sandbox approve``: approve a planned call, or lift a denial."""

from __future__ import annotations

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_call, run_then
from sandbox.cli.jsonout import dump, emit_json


@click.command()
@click.argument("run_id", required=False, metavar="[RUN]")
@click.argument("call_id", required=False, metavar="CALL")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger entry as JSON.")
@click.pass_context
def approve(ctx: click.Context, run_id: str | None, call_id: str | None, as_json: bool) -> None:
    """Approve CALL of RUN; 'sandbox call start --call-id ID' (its whole id) then runs it.

    For a denied call this lifts the denial: the same tool and input may run again.
    """
    refuse_inside_sandbox("approve")
    run_id, call = run_then(run_id, call_id, "CALL")
    run, call_id = open_call(ctx, run_id, call)
    was_denied = _denied(run.entry(call_id).approval)
    entry = run.approve(call_id)
    if as_json:
        emit_json(dump(entry))
    else:
        lifted = "; its denial is lifted: the same tool and input may run again" if was_denied else ""
        click.echo(escape.text(f"{entry.call_id} ({entry.tool_name}) approved{lifted}"))


def refuse_inside_sandbox(command: str) -> None:
    """Refuse ``approve``/``deny`` in a confined process: an agent must not answer for its own calls."""
    import os

    from sandbox.confine.envfilter import CONFINED_ENV
    from sandbox.confine.spawn import inside_sandbox
    from sandbox.errors import SandboxError

    if inside_sandbox(os.environ.get(CONFINED_ENV)):
        raise SandboxError(
            f"'sandbox {command}' is refused inside a sandbox: approving or denying calls is the user's, "
            "not the agent's; run it from your own shell."
        )


def _denied(approval: object) -> bool:
    return getattr(approval, "value", None) == "denied"
