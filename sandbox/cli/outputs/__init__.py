"""What every command prints with ``--json``: one pydantic model per command, one vocabulary.

The commands build their JSON as plain data (no pydantic on their fast paths); these models
document it (``sandbox schema``), and tests/e2e/test_json_vocabulary.py checks every command's real
output against them, with unknown keys refused, so the two cannot drift apart. The models live by
command group (runs, calls, recovery, agents); :data:`COMMANDS` names each command's.

The vocabulary, the same in every command:

- ``run``: the run's id (at the top level; persisted records nested inside keep ``run_id``);
- ``call_id`` / ``calls``: one call's id / several;
- ``user_head``: the user's HEAD when the run started; ``run_head``: the run's head commit (its
  last recorded change); ``base``: the snapshot the run started from;
- ``exit_code``: a command's exit status, as a shell reports it (127: could not start);
- times: ISO 8601 in UTC with the zone, ``2026-11-30T16:11:04.103445Z`` (``Z`` is offset +00:00);
- paths: relative to the worktree / your tree, ``/``-separated.
"""

from __future__ import annotations

from typing import Any

from sandbox import models
from sandbox.cli.outputs import agents, calls, recovery, runs

#: Each command's ``--json`` output (a model, or a list of one). ``hook`` answers in the agent's hook
#: protocol (hooks/README.md); ``schema`` prints JSON Schema documents.
COMMANDS: dict[str, type[Any]] = {
    "start": runs.StartOutput,
    "list": list[runs.RunRow],
    "status": runs.StatusOutput,
    "path": runs.PathOutput,
    "drop": runs.DropOutput,
    "adopt": runs.AdoptOutput,
    "drop --all-but": runs.DropAllButOutput,
    "start --count": runs.StartManyOutput,
    "push": runs.TransferOutput,
    "fetch": runs.TransferOutput,
    "fork": runs.ForkOutput,
    "compare": runs.CompareOutput,
    "conflicts": runs.ConflictsOutput,
    "branch": runs.BranchOutput,
    "gc": runs.GcOutput,
    "repair": runs.RepairOutput,
    "log": list[models.LedgerEntry],
    "log --call": calls.CallDetail,
    "diff": calls.DiffOutput,
    "exec": calls.ExecOutput,
    "write": models.LedgerEntry,
    "call start": models.LedgerEntry,
    "call plan": models.LedgerEntry,
    "call finish": models.LedgerEntry,
    "call resolve": models.LedgerEntry,
    "approve": models.LedgerEntry,
    "deny": models.LedgerEntry,
    "comment": calls.CommentOutput,
    "comments": list[calls.CommentOutput],
    "apply": calls.ApplyOutput,
    "undo": calls.UndoOutput,
    "redo": calls.UndoOutput,
    "checkpoint": models.Checkpoint,
    "checkpoints": recovery.CheckpointsOutput,
    "resume": recovery.ResumeOutput,
    "rollback --files": recovery.RollbackFilesOutput,
    "rollback --session": recovery.RollbackSessionOutput,
    "rewind": recovery.RewindOutput,
    "compensate": recovery.CompensateOutput,
    "run": agents.RunAgentOutput,
    "serve": agents.ServeOutput,
    "hooks install": agents.HooksInstallOutput,
    "demo": agents.DemoOutput,
    "completion": agents.CompletionOutput,
    "doctor": agents.DoctorOutput,
    # A JSON Schema document, or {"formats": ..., "commands": ...} of them: any JSON object.
    "schema": dict[str, object],
}


def schema_of(command: str) -> dict[str, object]:
    """The JSON Schema of ``command``'s ``--json`` output."""
    from pydantic import TypeAdapter

    schema: dict[str, object] = TypeAdapter(COMMANDS[command]).json_schema(by_alias=True)
    return schema


def check(command: str, data: Any) -> Any:
    """Validate ``data`` (a command's parsed ``--json`` output) against its model; raises on a mismatch."""
    from pydantic import TypeAdapter

    return TypeAdapter(COMMANDS[command]).validate_python(data)
