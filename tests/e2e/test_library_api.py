"""The library entry points an agent runtime uses."""

from __future__ import annotations

from pathlib import Path

import pytest

import sandbox
from sandbox.errors import SandboxError, UnknownRunError


def test_start_and_open_run(repo: Path) -> None:
    run = sandbox.start_run(str(repo), label="lib")
    with run.tool_call("write_file", {"path": "a.py"}, idempotency="idempotent", replay="auto") as call:
        call.write("a.py", "print('hi')\n")
    again = sandbox.open_run(str(repo), run.run_id[:4])
    assert [f.path for f in again.entries()[-1].files] == ["a.py"]
    assert sandbox.open_run(run.worktree).run_id == run.run_id
    with pytest.raises(SandboxError):
        sandbox.start_run(run.worktree)
    with pytest.raises(UnknownRunError):
        sandbox.open_run(str(repo), "ffffffff")
