"""``sandbox run``'s early start (:mod:`sandbox.agent.early`): what happens before the run is opened."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

from sandbox.agent.early import DeferredRefusals
from sandbox.agent.netproxy import Refusal
from sandbox.run.run import Run
from sandbox.store.project import Project


def refusal(port: int) -> Refusal:
    return Refusal("example.com", port, datetime.datetime.now(datetime.timezone.utc), "CONNECT")


def test_refusals_before_the_run_is_open_are_kept_and_handed_on_in_order() -> None:
    deferred = DeferredRefusals()
    deferred(refusal(1))
    deferred(refusal(2))
    seen: list[int] = []
    deferred.attach(lambda r: seen.append(r.port))
    assert seen == [1, 2]
    deferred(refusal(3))
    assert seen == [1, 2, 3]


def test_a_named_run_started_early_records_its_session_as_before(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.seal_cache()  # as 'sandbox start' leaves it: 'sandbox run RUN' takes the early start
    script = str(Path(sys.executable).parent / "sandbox")
    agent = ["sh", "-c", "echo early > early.txt; exit 3"]
    proc = subprocess.run(
        [script, "run", run.run_id, "--hooks", "none", "--", *agent],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr.decode()
    assert "1 call(s) recorded in this session" in proc.stderr.decode()
    again = Run.open(Project(project.common_dir), run.run_id)
    notes = again.state().data.note
    assert [n["agent_command"] for n in notes if "agent_command" in n] == [agent]
    assert [n["session"] for n in notes if "isolation" in n] == ["sandbox run"]
    entries = again.entries()
    assert [e.tool_name for e in entries] == ["agent_session"]
    assert "early.txt" in json.dumps(entries[0].model_dump(mode="json"))
