"""The messages of the sandbox's own commits: a subject, an optional body, then ``Sandbox-*`` trailers.

Every commit the sandbox writes (a snapshot, a call, an undo, a rollback, a transcript, the
checkpoint store, an exported branch) names what it belongs to in git trailers, so ``git log``
and ``git interpret-trailers`` can read them: ``Sandbox-Run: <run id>``, and per kind of commit
the call, its sequence number and status, the undone call, the checkpoint... One builder, so the
keys are spelled once and the layout (a blank line, then one trailer per line, a final newline)
is the same everywhere. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

RUN = "Sandbox-Run"
RUNS = "Sandbox-Runs"
CALL = "Sandbox-Call"
SEQ = "Sandbox-Seq"
STATUS = "Sandbox-Status"
CHECKPOINT = "Sandbox-Checkpoint"
DRIFT = "Sandbox-Drift"
UNDO = "Sandbox-Undo"
REDO = "Sandbox-Redo"


def message(subject: str, trailers: Sequence[tuple[str, object]], body: str = "") -> str:
    """``subject``, a blank line, ``body`` and a blank line when given, then ``key: value`` per trailer.

    Values are written as ``str()`` gives them; the message ends with a newline, as git writes one.
    """
    parts = [subject, ""]
    if body:
        parts += [body, ""]
    parts += [f"{key}: {value}" for key, value in trailers]
    return "\n".join(parts) + "\n"
