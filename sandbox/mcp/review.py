"""The review tools of ``sandbox mcp``: ``show_log``, ``show_diff``, ``checkpoint``, ``resume_report``.

``show_log`` and ``show_diff`` read the run's evidence (its ledger and its patch) and record
nothing; the resources ``sandbox://run/...`` and ``sandbox://runs/{run_id}/...`` answer the same
text (:meth:`ReviewTools.run_text` for a run that is not the open one). ``checkpoint`` writes a
checkpoint; ``resume_report`` runs the conservative resume (its fence and ``uncertain`` marks are
its events). Neither of those two is open to a server inside the sandbox of ``sandbox run``, where
only the host writes the ledger.

Nothing here applies, undoes or drops: those act on the user's tree or throw work away, and stay
with the user's CLI.
"""

from __future__ import annotations

import json
from typing import Literal, TypedDict

from sandbox.mcp.state import MAX_OUTPUT_CHARS, WorkspaceState
from sandbox.run.run import Run


class ResumeAnswer(TypedDict):
    """What ``resume_report`` answers: the fields of :class:`sandbox.models.ResumeReport` a client acts on."""

    run_id: str
    note: str
    next_step: str
    #: Each an :class:`sandbox.models.UncertainCall` as JSON.
    uncertain: list[dict[str, object]]
    do_not_replay: list[str]
    may_replay: list[str]
    ask_first: list[str]
    #: Each a :class:`sandbox.models.DriftPath` as JSON.
    drift: list[dict[str, object]]
    last_completed_step: str | None
    checkpoint: str | None
    messages: object
    state: object
    problems: list[str]


class Checkpointed(TypedDict):
    """What ``checkpoint`` answers."""

    checkpoint_id: str
    name: str
    label: str | None
    step_id: str | None


class ReviewTools(WorkspaceState):
    """The review tools (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    def show_log(self, call_id: str | None = None) -> str:
        """The run's calls in order (one line each, with files), or one call in full."""
        with self.lock:  # the run's repository is shared with the recording tools
            return _log_text(self.require_run(), call_id)

    def show_diff(self, call_id: str | None = None, stat_only: bool = False) -> str:
        """The run's patch against its base (or one call's), or its ``--stat`` summary; bounded."""
        with self.lock:
            text = _diff_text(self.require_run(), call_id, stat_only)
        return _bounded_diff(text)

    def run_text(self, run_id: str, what: Literal["diff", "log"]) -> str:
        """The diff or log of any run of the repository (the resources name it), without opening it; only
        its own run's for a server pinned to one (another agent's run is not the model's to read)."""
        with self.lock:  # the project's repository is shared with the recording tools
            run = Run.open(self.project, self.resolve_own(run_id))
            if what == "log":
                return _log_text(run, None)
            text = _diff_text(run, None, False)
        return _bounded_diff(text)

    def resume_report(self) -> ResumeAnswer:
        """Resume the run conservatively and report: the note for you, what must not be replayed,
        which calls are uncertain (and what they may have changed), and the latest checkpoint's
        messages and state."""
        from sandbox.recovery.resume import resume

        with self.lock:
            run = self.require_run()
            self.refuse_if_hosted("resume_report", f"sandbox resume {run.run_id}")
            report = resume(run)
            return {
                "run_id": report.run_id,
                "note": report.note,
                "next_step": report.next_step,
                "uncertain": [u.model_dump(mode="json") for u in report.uncertain],
                "do_not_replay": report.do_not_replay,
                "may_replay": report.may_replay,
                "ask_first": report.ask_first,
                "drift": [d.model_dump(mode="json") for d in report.drift],
                "last_completed_step": report.last_completed_step,
                "checkpoint": report.checkpoint.name if report.checkpoint else None,
                "messages": report.messages,
                "state": report.run_state,
                "problems": report.problems,
            }

    def checkpoint(
        self,
        label: str | None = None,
        step_id: str | None = None,
        messages: object = None,
        state: object = None,
    ) -> Checkpointed:
        """Save a checkpoint with the messages and state the client passes."""
        with self.lock:
            run = self.require_run()
            self.refuse_if_hosted("checkpoint", f"sandbox checkpoint {run.run_id}")
            ckpt = run.checkpoint(label, step_id=step_id, messages=messages, run_state=state)
            return {"checkpoint_id": ckpt.id, "name": ckpt.name, "label": label, "step_id": step_id}


def _diff_text(run: Run, call_id: str | None, stat_only: bool) -> str:
    from sandbox.merge.preview import diff_text, preview_range
    from sandbox.run.names import resolve_call_id

    call = resolve_call_id(run, call_id) if call_id is not None else None
    return diff_text(run, preview_range(run, call), stat=stat_only, color=False)


def _bounded_diff(text: str) -> str:
    if not text:
        return "No changes."
    if len(text) > MAX_OUTPUT_CHARS:
        return text[:MAX_OUTPUT_CHARS] + (
            f"\n[... {len(text) - MAX_OUTPUT_CHARS} more characters; use stat_only, or call_id for one call]"
        )
    return text


def _log_text(run: Run, call_id: str | None) -> str:
    if call_id is not None:
        from sandbox.run.names import resolve_call_id

        return _call_text(run, resolve_call_id(run, call_id))
    entries = run.entries()
    if not entries:
        return f"Run {run.run_id} has no calls yet."
    out = []
    for e in entries:
        flags = (" [undone]" if e.undone else "") + (" [applied]" if e.applied else "")
        out.append(f"{e.seq:>3}  {e.call_id}  {e.status.value}  {e.tool_name}{flags}")
        if e.summary:
            out.append(f"       {e.summary[:200]}")
        if e.error:
            out.append(f"       error: {e.error.strip().splitlines()[0][:300] if e.error.strip() else e.error}")
        for f in e.files:
            kind = "A" if f.before_hash is None else "D" if f.after_hash is None else "M"
            out.append(f"       {kind} {f.path}")
    return "\n".join(out)


def _call_text(run: Run, call_id: str) -> str:

    entry = run.entry(call_id)
    lines = [
        f"call:    {entry.call_id} (#{entry.seq})",
        f"tool:    {entry.tool_name}",
        f"status:  {entry.status.value}",
    ]
    if entry.summary:
        lines.append(f"summary: {entry.summary}")
    if entry.input is not None:
        lines.append("input:   " + json.dumps(entry.input, ensure_ascii=False)[:2000])
    if entry.result is not None:
        lines.append("result:  " + json.dumps(entry.result, ensure_ascii=False)[:2000])
    if entry.commit:
        lines.append(f"commit:  {entry.commit}")
    lines.extend(f"file:    {f.path}" for f in entry.files)
    error = run.error_text(entry)
    if error:
        lines.append("error:")
        lines.extend(f"  {line}" for line in error.splitlines() or [error])
    return "\n".join(lines)
