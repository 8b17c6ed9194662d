"""Comparing runs side by side (best-of-N): what each did, and where their results disagree.

Per run: its calls, failed (a failed check apart), interrupted, violation and uncertain calls, the paths
and lines its patch changes (its head against its base), and the outcome of a check command run in its
worktree (the caller runs it as a recorded call and passes the outcome in: the run layer does not start
processes; without one, the newest check the run recorded).
Across runs: every path some run changed, with each run's final state of it; a path where the runs
do not all end in the same state is a disagreement. Costs O(changed paths) per run: trees are
compared, never walked whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import pygit2

from sandbox.models import CallStatus, LedgerEntry
from sandbox.run.run import Run
from sandbox.store import objects


class CheckJSON(TypedDict):
    """A check's outcome in ``compare --json``."""

    call_id: str
    exit_code: int
    status: str


class RunFiguresJSON(TypedDict):
    """One run's side in ``compare --json``."""

    run: str
    label: str | None
    base: str
    run_head: str
    calls: int
    failed_calls: int
    uncertain_calls: int
    interrupted_calls: int
    violation_calls: int
    files_changed: int
    lines_added: int
    lines_removed: int
    check: CheckJSON | None


class DisagreementJSON(TypedDict):
    """A path the runs left in different states: {run id: its state there}."""

    path: str
    states: dict[str, str]


class ComparisonJSON(TypedDict):
    """``compare --json``."""

    same_base: bool
    runs: list[RunFiguresJSON]
    disagree: list[DisagreementJSON]
    agree: list[str]


@dataclass
class CheckOutcome:
    """The check command's result in one run (recorded as one of its calls)."""

    call_id: str
    returncode: int
    status: str

    def to_json(self) -> CheckJSON:
        """Plain data for ``--json``."""
        return {"call_id": self.call_id, "exit_code": self.returncode, "status": self.status}


@dataclass
class RunFigures:
    """One run's side of a comparison."""

    run_id: str
    label: str | None
    base: str
    head: str
    calls: int
    failed: int
    uncertain: int
    files: int
    added: int
    removed: int
    check: CheckOutcome | None = None
    #: Calls stopped while they ran (Ctrl-C, Esc): they changed what they changed, and did not end.
    interrupted: int = 0
    #: Calls the agent ran outside the hook protocol or against a refusal (never vouched for).
    violations: int = 0

    def to_json(self) -> RunFiguresJSON:
        """Plain data for ``--json``."""
        return {
            "run": self.run_id,
            "label": self.label,
            "base": self.base,
            "run_head": self.head,
            "calls": self.calls,
            "failed_calls": self.failed,
            "uncertain_calls": self.uncertain,
            "interrupted_calls": self.interrupted,
            "violation_calls": self.violations,
            "files_changed": self.files,
            "lines_added": self.added,
            "lines_removed": self.removed,
            "check": self.check.to_json() if self.check else None,
        }


@dataclass
class Comparison:
    """Runs side by side, and the paths where their results differ."""

    runs: list[RunFigures]
    #: path -> {run id: its final state there: a short blob id (``+x`` executable, ``@`` symlink),
    #: ``deleted``, or ``unchanged`` (the run left the snapshot's version)}.
    disagree: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Paths every run changed to the same state.
    agree: list[str] = field(default_factory=list)
    same_base: bool = True

    def to_json(self) -> ComparisonJSON:
        """Plain data for ``--json``."""
        return {
            "same_base": self.same_base,
            "runs": [r.to_json() for r in self.runs],
            "disagree": [{"path": p, "states": s} for p, s in sorted(self.disagree.items())],
            "agree": sorted(self.agree),
        }


def _state(entry: objects.Entry | None) -> str:
    if entry is None:
        return "deleted"
    suffix = "+x" if entry.mode == objects.MODE_EXEC else "@" if entry.mode == objects.MODE_LINK else ""
    return entry.oid[:10] + suffix


#: The tool name ``compare --check`` records its command under.
CHECK_TOOL = "check"


def recorded_check(entries: list[LedgerEntry]) -> CheckOutcome | None:
    """The newest finished check call of a run (``compare --check``), None when it has none."""
    for entry in reversed(entries):
        if entry.tool_name != CHECK_TOOL or entry.status.value not in ("succeeded", "failed"):
            continue
        result = entry.result if isinstance(entry.result, dict) else {}
        code = result.get("exit_code")
        return CheckOutcome(entry.call_id, code if isinstance(code, int) else -1, entry.status.value)
    return None


def figures(run: Run) -> tuple[RunFigures, dict[str, str]]:
    """A run's figures and its changed paths with their final states."""
    state = run.state()
    head = run.head()
    base = run.base
    base_tree, head_tree = objects.commit_tree(run.repo, base), objects.commit_tree(run.repo, head)
    changes = {c.path: _state(c.new) for c in objects.diff_trees(run.repo, base_tree, head_tree)}
    added = removed = 0
    if changes and base_tree is not None and head_tree is not None:
        old, new = run.repo[base_tree], run.repo[head_tree]
        assert isinstance(old, pygit2.Tree) and isinstance(new, pygit2.Tree)
        stats = old.diff_to_tree(new).stats
        added, removed = stats.insertions, stats.deletions
    entries = [state.calls[c] for c in state.order]
    calls = [e for e in entries if e.tool_name != CHECK_TOOL]  # a failed check is not a failed call
    return (
        RunFigures(
            run_id=run.run_id,
            label=run.info.label,
            base=base,
            head=head,
            calls=len(entries),
            failed=sum(1 for e in calls if e.status == CallStatus.failed),
            uncertain=sum(1 for e in entries if e.status == CallStatus.uncertain),
            files=len(changes),
            added=added,
            removed=removed,
            interrupted=sum(1 for e in entries if e.status == CallStatus.interrupted),
            violations=sum(1 for e in entries if e.status == CallStatus.violation),
            check=recorded_check(entries),
        ),
        changes,
    )


def compare(runs: list[Run], checks: dict[str, CheckOutcome] | None = None) -> Comparison:
    """Compare ``runs`` (their heads against their bases), oldest first; ``checks`` are outcomes by run id
    (a run not in it shows its newest recorded check, if any)."""
    rows: list[RunFigures] = []
    changed: dict[str, dict[str, str]] = {}
    for run in sorted(runs, key=lambda r: (r.info.created_at, r.run_id)):
        row, paths = figures(run)
        row.check = (checks or {}).get(run.run_id) or row.check
        rows.append(row)
        changed[run.run_id] = paths
    result = Comparison(rows, same_base=len({r.base for r in rows}) <= 1)
    every = sorted({p for paths in changed.values() for p in paths})
    for path in every:
        states = {r.run_id: changed[r.run_id].get(path, "unchanged") for r in rows}
        if len(set(states.values())) > 1:
            result.disagree[path] = states
        else:
            result.agree.append(path)
    return result
