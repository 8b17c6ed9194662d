"""The command-line interface: a thin click layer over the library.

Each command lives in its own module and is registered here (``COMMANDS``; the click group itself is
in :mod:`sandbox.cli.app`). Command modules import only click at module level and the library inside
their function, and this module imports nothing at all, so that fast paths (``sandbox hook``) do not
pay for imports they do not use.
"""

from __future__ import annotations

from typing import Any

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
    "conflicts": "sandbox.cli.conflicts:conflicts",
    "branch": "sandbox.cli.branch:branch",
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


def main() -> None:
    """Console-script entry point. ``sandbox hook AGENT`` takes a path without click (it is on
    every tool call of an agent: see :mod:`sandbox.cli.hookrun`)."""
    import sys

    from sandbox.cli.hookrun import fast_main

    code = fast_main(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from sandbox.cli.app import cli
    from sandbox.cli.common import run_main

    run_main(cli)


def __getattr__(name: str) -> Any:
    # ``from sandbox.cli import cli``: the click group, built on first use (app.py).
    if name == "cli":
        from sandbox.cli.app import cli

        return cli
    raise AttributeError(f"module 'sandbox.cli' has no attribute {name!r}")
