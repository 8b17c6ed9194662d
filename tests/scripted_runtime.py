"""A scripted agent runtime (no model) running a multi-step task through the sandbox library.

    python tests/scripted_runtime.py REPO STATE_DIR COUNTER_FILE

The first invocation starts a run (its id goes to STATE_DIR/run_id); later ones resume it with
:func:`sandbox.recovery.resume.resume` (each report saved as STATE_DIR/resume-<n>.json) and follow the
report's advice: succeeded steps are not repeated, uncertain calls that must not be replayed are
not, idempotent ones are replayed, denied calls are not asked again. Steps: write two files, run a
command, send an "email" (an external counter file, non-idempotent), plan a dangerous call that the
scripted user denies (each ask is a line in STATE_DIR/asks.log), write a third file. It checkpoints
at the start and before and after every step. It arms ``SANDBOX_FAULT`` itself (it is not the
CLI); ``runtime.email_sent`` fires after the email was sent but before its result was recorded.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from sandbox import faults
from sandbox.models import CallStatus
from sandbox.recovery.resume import resume
from sandbox.run import approvals
from sandbox.run.run import Run
from sandbox.store.project import Project

faults.POINTS.add("runtime.email_sent")

STEPS = ["step_1", "step_2", "step_3", "step_4", "step_5", "step_6"]
FILES = {"step_1": ("src/a.txt", "alpha\n"), "step_2": ("src/b.txt", "beta\n"), "step_6": ("src/c.txt", "gamma\n")}
COMMAND = ["sh", "-c", "printf built > build.out"]
EMAIL = {"to": "team@example.com", "subject": "done"}
DANGER = {"argv": ["rm", "-rf", "/"]}


def send_email(counter: str) -> None:
    """The external side effect: a counter outside the repository."""
    try:
        with open(counter) as fh:
            n = int(fh.read().strip() or 0)
    except FileNotFoundError:
        n = 0
    with open(counter, "w") as fh:
        fh.write(str(n + 1))
        fh.flush()
        os.fsync(fh.fileno())


def do_step(run: Run, step: str, counter: str, state_dir: str, do_not_replay: set[str]) -> str:
    """Run one step, unless the ledger shows it already happened or must not be repeated."""
    mine = [e for e in run.entries() if e.step_id == step]
    if any(e.status == CallStatus.succeeded for e in mine):
        return "already done"
    if any(e.call_id in do_not_replay for e in mine):
        return "uncertain: not repeated"
    if step in FILES:
        path, text = FILES[step]
        with run.tool_call("write_file", {"path": path}, step_id=step, idempotency="idempotent", replay="auto") as call:
            call.write(path, text)
        return f"wrote {path}"
    if step == "step_3":
        with run.tool_call(
            "run_command", {"argv": COMMAND}, step_id=step, idempotency="idempotent", replay="auto"
        ) as c:
            c.shell(COMMAND)
        return "built"
    if step == "step_4":
        with run.tool_call(
            "send_email", EMAIL, step_id=step, idempotency="non_idempotent", replay="never", side_effects=["email"]
        ) as call:
            send_email(counter)
            faults.point("runtime.email_sent")
            call.result = {"sent": True}
        return "email sent"
    if step == "step_5":
        if approvals.is_denied(run, "delete_all", DANGER):
            return "denied earlier: not asked again"
        pending = [e for e in mine if e.status == CallStatus.planned]
        call_id = pending[0].call_id if pending else run.plan_call("delete_all", DANGER, step_id=step)
        with open(os.path.join(state_dir, "asks.log"), "a") as fh:
            fh.write(call_id + "\n")
        run.deny(call_id, "the user refused")
        return "denied"
    raise AssertionError(step)


def main(repo: str, state_dir: str, counter: str) -> int:
    faults.arm(os.environ.get("SANDBOX_FAULT"))
    project, workdir, _ = Project.discover(repo)
    id_file = os.path.join(state_dir, "run_id")
    messages: list[Any]
    do_not_replay: set[str] = set()
    if os.path.exists(id_file):
        with open(id_file) as fh:
            run = Run.open(project, fh.read().strip())
        report = resume(run)
        n = len([f for f in os.listdir(state_dir) if f.startswith("resume-")]) + 1
        with open(os.path.join(state_dir, f"resume-{n}.json"), "w") as fh:
            fh.write(report.model_dump_json())
        messages = list(report.messages or [])
        state = report.run_state or {"next": 0}
        do_not_replay = set(report.do_not_replay)
        messages.append({"role": "system", "content": report.note})
    else:
        assert workdir is not None
        run = Run.start(project, workdir, label="scripted")
        tmp = id_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(run.run_id)
        os.replace(tmp, id_file)
        messages = [{"role": "user", "content": "do the task"}]
        state = {"next": 0}
        run.checkpoint("start", messages=messages, run_state=state)
    for i in range(int(state["next"]), len(STEPS)):
        step = STEPS[i]
        previous = STEPS[i - 1] if i else None
        run.checkpoint(f"before {step}", step_id=previous, messages=messages, run_state={"next": i})
        outcome = do_step(run, step, counter, state_dir, do_not_replay)
        messages.append({"role": "tool", "step": step, "content": outcome})
        run.checkpoint(f"after {step}", step_id=step, messages=messages, run_state={"next": i + 1})
    with open(os.path.join(state_dir, "done"), "w") as fh:
        json.dump({"run": run.run_id, "messages": messages}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
