"""Every ``sandbox`` command: its name and where its click command is (``module:attribute``).

The group (:mod:`sandbox.cli.app`) imports a command's module only when that command runs (or
``--help`` lists it), so each command pays only for its own imports. A new command is one module
in this package and one line in each dict here.
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
    "comment": "sandbox.cli.comment:comment",
    "comments": "sandbox.cli.comments:comments",
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


#: Each command's first sentence, as ``sandbox --help`` lists it: the list is printed from here, so
#: ``--help`` imports none of the command modules (all of them cost ~25 ms). tests/cli/test_cli_conventions.py
#: holds each line equal to its command's help.
SUMMARIES = {
    "start": "Snapshot your working tree (with uncommitted and untracked files) into a new run.",
    "list": "List the runs of this repository with their calls, changed paths and disk use.",
    "status": "Show RUN: where it came from, its calls by status, its changed paths, its disk use.",
    "path": "Print the absolute path of RUN's worktree (made first for a run fetched from elsewhere).",
    "drop": "Remove RUN: its worktree, its refs and its ledger.",
    "gc": "Remove what dropped or interrupted runs left behind; live runs are never touched.",
    "call": "Record tool calls from any runtime: start before the tool runs, finish after.",
    "write": "Write stdin to PATH in RUN's worktree as one recorded write_file call.",
    "exec": "Run COMMAND in RUN's worktree as one recorded call; its exit code is passed through.",
    "log": "List RUN's calls in order: when, how long, status, tool, command, commit and changed files.",
    "diff": "Show the agent's patch against the base snapshot (or the patch of some calls with --call).",
    "schema": 'Print JSON Schemas: {"formats": persisted formats, "commands": each command\'s --json output}.',
    "completion": (
        "Print the shell completion script for SHELL; it completes commands, options, run ids, labels and calls."
    ),
    "demo": "Build a throwaway repository, let a scripted agent work in a run, and show the evidence.",
    "apply": "Apply RUN's changes to your working tree where your files still equal what the agent started from.",
    "undo": "Take back your last apply or redo of RUN in your tree, exactly as your files were before it.",
    "redo": "Redo RUN's newest undo: an apply taken back from your tree, or one call (in your tree or the run).",
    "conflicts": "Explain each path 'sandbox apply RUN' would refuse: base, agent and yours, diff3 style.",
    "branch": "Make branch NAME from RUN: one commit per call that changed files, on your HEAD at start.",
    "checkpoint": "Save a checkpoint of RUN: messages, state and budget, with the ledger and files as of now.",
    "checkpoints": "List RUN's checkpoints, newest last; damaged ones are reported, never shown as valid.",
    "approve": "Approve CALL of RUN; 'sandbox call start --call-id ID' (its whole id) then runs it.",
    "deny": "Deny CALL of RUN: it never runs, nor does the same tool with the same input.",
    "resume": "Resume RUN: fence old writers, mark unfinished calls uncertain, verify, and write a note.",
    "rollback": "Roll RUN back to a checkpoint: --files (worktree) or --session (messages and state).",
    "rewind": "Rewind RUN to just before a call: its files (a forward event) and the agent's conversation (a fork).",
    "compensate": "Undo CALL's external effect with the compensation it registered, if it registered one.",
    "repair": "Restore RUN's ledger ref to the tip the run last acknowledged (after checking it reads back).",
    "run": "Run AGENT in a run's worktree; every tool call (or quiet-point change) is recorded.",
    "hook": "Record an agent's tool call from its hook (JSON on stdin); see hooks/README.md.",
    "hooks": "Set up agents' hooks so each tool call becomes one recorded call.",
    "serve": "Host the hooks, watcher and sessions of every run of this repository: fast hooks, exact Bash calls.",
    "ui": "Review runs in a local page: calls, diffs, best-of-N and approvals; apply, undo and approve there.",
    "mcp": "Serve the sandbox's tools to any MCP client (Claude Code, Codex, Cursor, ...) on stdio.",
    "doctor": (
        "Show what an agent of RUN (or of any run here) may read, write and reach, its limits,"
        " and what this machine cannot enforce."
    ),
    "push": "Push RUN's refs (ledger, head, base, checkpoints) to REMOTE.",
    "fetch": "Fetch runs (all of REMOTE's, or the RUNs named: ids or unique prefixes) and list what arrived.",
    "adopt": "Count every event of RUN's ledger as recorded by this clone.",
    "fork": "Start a new run from RUN's state: same snapshot of your tree, a worktree of its own.",
    "comment": "Leave a review comment on PATH (at LINE) of RUN's changes.",
    "comments": "List RUN's review comments: where, what, the call they are about, and whether they were sent.",
    "compare": (
        "Compare RUNs: calls (failed, interrupted, violations), files and lines changed, and where they disagree."
    ),
}
