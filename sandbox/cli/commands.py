"""Every ``sandbox`` command: its name and where its click command is (``module:attribute``).

The group (:mod:`sandbox.cli.app`) imports a command's module only when that command runs (or
``--help`` lists it), so each command pays only for its own imports. A new command is one module
in this package and one line here.
"""

from __future__ import annotations

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
    "completion": "sandbox.cli.completion:completion",
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
    "rewind": "sandbox.cli.rewind:rewind",
    "compensate": "sandbox.cli.compensate:compensate",
    "repair": "sandbox.cli.repair:repair",
    # wrapping agents
    "run": "sandbox.cli.run_agent:run_agent",
    "hook": "sandbox.cli.hook:hook",
    "hooks": "sandbox.cli.hooks_cmd:hooks",
    "serve": "sandbox.cli.serve:serve",
    "ui": "sandbox.cli.ui:ui",
    "mcp": "sandbox.cli.mcp:mcp",
    "doctor": "sandbox.cli.doctor:doctor",
    # runs that travel and multiply
    "push": "sandbox.cli.push:push",
    "fetch": "sandbox.cli.fetch:fetch",
    "adopt": "sandbox.cli.adopt:adopt",
    "fork": "sandbox.cli.fork:fork",
    "compare": "sandbox.cli.compare:compare",
}
