"""Where the agents keep their sessions on this machine: the CLI reads the environment for the library."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.run.run import Run


def homes(run: Run) -> dict[str, list[str]]:
    """Each agent's candidate configuration homes for ``run`` (the run's own agent state first)."""
    from sandbox.agent.sessions import config_homes

    return config_homes(os.environ, os.path.expanduser("~"), run.dir)


def store_transcripts(run: Run, reason: str) -> list[str]:
    """Store the run's agent transcripts (see :mod:`sandbox.agent.transcripts`); notes for the user.

    Never fails the command it is part of: a transcript that cannot be stored is said, not raised.
    """
    from sandbox.agent import transcripts
    from sandbox.errors import SandboxError

    try:
        transcripts.capture(run, homes(run), reason)
    except (SandboxError, OSError) as exc:
        return [f"the agent's conversation was not stored with the run: {exc}"]
    return []
