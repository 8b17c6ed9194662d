"""What ``list``, ``status`` and ``log`` show of a run, built from its fold as JSON data.

Standard library only. Both read paths build their rows here, so the two cannot drift apart: the
full one (the ledger read and folded through :mod:`sandbox.run.run`, its state dumped as JSON data)
and the fast one (:mod:`sandbox.fast.foldcache`: the sealed fold cache read without pygit2 or
pydantic). ``state`` is always ``LedgerState.model_dump(mode="json")`` (what the cache stores), and
an entry ``LedgerEntry.model_dump(mode="json")``, typed as :mod:`sandbox.fast.foldjson` says.
"""

from __future__ import annotations

import datetime
import os

from sandbox.store import layout
from sandbox.store.fsutil import disk_usage_upto

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from sandbox.fast.foldjson import AgentGitJson, EntryJson, FetchedJson, RefusalJson, RunRowJson, StateJson


def parse_time(text: str) -> datetime.datetime:
    """A stored time (pydantic's JSON: ISO 8601, ``Z`` for UTC) as an aware datetime."""
    when = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


def iso_time(when: datetime.datetime) -> str:
    """``when`` as the JSON outputs write times: ISO 8601 in UTC with the zone (``Z``), as pydantic does."""
    return when.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def entries(state: StateJson) -> list[EntryJson]:
    """The run's calls in the order they were first recorded."""
    calls = state["calls"]
    return [calls[c] for c in state["order"]]


def partial_paths(state: StateJson) -> dict[str, list[str]]:
    """Per call, the paths of the user's tree that hold only some of its hunks (``apply --hunks``),
    by path order (as ``log`` marks its rows)."""
    found: dict[str, list[str]] = {}
    for path, record in sorted(state["data"]["user_paths"].items()):
        partial = record.get("partial")
        for call_id in partial["calls"] if partial else []:
            found.setdefault(call_id, []).append(path)
    return found


def partly_applied(state: StateJson) -> list[str]:
    """Calls of which only some hunks are in the user's tree and that are not undone, in ledger order."""
    found = partial_paths(state)
    calls = state["calls"]
    return [c for c in state["order"] if c in found and c in calls and not calls[c]["undone"]]


def in_flight(state: StateJson) -> list[str]:
    """Calls that started and did not finish (a crash, or running now)."""
    return [e["call_id"] for e in entries(state) if e["status"] in ("started", "uncertain")]


def worktree_exists(place: layout.Place) -> bool:
    """True when the worktree directory is there and its ``.git`` names an existing git dir."""
    return os.path.isfile(os.path.join(place.worktree, ".git")) and os.path.isdir(place.git_dir)


def fetched_from(common_dir: str, run_id: str) -> FetchedJson | None:
    """Where the run was last fetched from, as stored (None: made here, never fetched, or unreadable)."""
    from sandbox.fast import fastjson

    try:
        with open(layout.fetched_file(common_dir, run_id), encoding="utf-8") as fh:
            found = fastjson.loads(fh.read())
    except (OSError, ValueError):
        return None
    stored: FetchedJson = found  # as the model dumps it (tests/fast/test_foldjson.py)
    return stored if isinstance(found, dict) else None


#: The first line of a conflict section ``apply --3way`` writes (its labels: yours, base, agent).
MARKER = b"<<<<<<< yours"


def conflict_markers(state: StateJson, common_dir: str) -> list[str]:
    """Paths of this clone's tree where ``apply --3way`` wrote conflict markers that are still there.

    A path the sandbox wrote with a state other than the agent's (and not some hunks of it) was a
    3-way merge; it needs attention while its file still holds a ``<<<<<<< yours`` line.
    """
    recorded = state["run"]["user_workdir"]
    found = layout.common_dir_of(recorded) if os.path.isdir(recorded) else None
    if found is not None and os.path.realpath(found) == common_dir:
        workdir = recorded
    else:
        workdir = os.path.dirname(common_dir)
    out = []
    for path, r in sorted(state["data"].get("user_paths", {}).items()):
        if r.get("partial") or (r.get("mode"), r.get("oid")) == (r.get("target_mode"), r.get("target_oid")):
            continue
        try:
            with open(os.path.join(workdir, path), "rb") as fh:
                if any(line.startswith(MARKER) for line in fh):
                    out.append(path)
        except OSError:
            continue  # gone or not a file: nothing to resolve there
    return out


#: The most entries of a run's home ``status`` (and ``list``, and ``sandbox ui``'s runs page, per run)
#: counts for its disk use unless asked for all (``--disk``): a whole-tree walk on every status grows
#: with the repository (on every list, with runs x repository).
STATUS_DISK_ENTRIES = 10_000


def summary(
    run_id: str,
    state: StateJson,
    *,
    common_dir: str,
    place: layout.Place,
    changed_paths: int,
    fetched: FetchedJson | None,
    renamed_paths: int = 0,
    disk: bool = False,
    disk_limit: int | None = None,
) -> RunRowJson:
    """A run as ``list`` and ``status`` show it (``status`` adds ``agent_git``, ``in_flight``, ``host``).

    ``changed_paths``: how many paths the run's head changes from its base, a rename counted once
    as ``diff --stat`` counts it (``renamed_paths`` of them renames); ``fetched``: the
    remote it was fetched from (:func:`fetched_from`, as its model dumps it); ``disk``: sum the
    bytes its home uses, at most ``disk_limit`` entries of it (``disk_complete`` False when there
    were more: the figure is a lower bound).
    """
    info = state["run"]
    counts: dict[str, int] = {}
    for entry in state["calls"].values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    exists = worktree_exists(place)
    # A run fetched from elsewhere has no worktree here until a command needs one: none to show.
    here = exists or layout.has_place(common_dir, run_id)
    # In the run's files and not in the user's tree: an undo in the user's tree leaves the call in the
    # run; an undo in the run or a rollback --files takes it out (issue 21).
    out = {i["call_id"] for i in state["data"].get("undo_stack", []) if (i.get("target") or "sandbox") == "sandbox"}
    unapplied = [
        e
        for e in state["calls"].values()
        if e["commit"] and not e["applied"] and e["call_id"] not in out and not e.get("rolled_back")
    ]
    partly = partly_applied(state)
    used, complete = disk_usage_upto(place.home or place.worktree, disk_limit) if disk and exists else (0, True)
    return {
        "run": run_id,
        "label": info["label"],
        "created_at": iso_time(parse_time(info["created_at"])),
        "worktree": place.worktree if here else None,
        "git_dir": place.git_dir if here else None,
        "worktree_exists": exists,
        "base": info["base"],
        "user_head": info["head"],
        "run_head": state["head"],
        "calls": len(state["calls"]),
        "by_status": counts,
        "changed_paths": changed_paths,
        "renamed_paths": renamed_paths,
        "unapplied_calls": len(unapplied),
        "partly_applied_calls": partly,
        # How 'log' numbers the calls the row names (#N), for the words people read.
        "call_numbers": {c: state["calls"][c]["seq"] for c in [*partly, *in_flight(state)] if c in state["calls"]},
        "uncertain_calls": [e["call_id"] for e in entries(state) if e["status"] == "uncertain"],
        "conflict_markers": conflict_markers(state, common_dir),
        "epoch": state["epoch"],
        # Where it came from: the machine it was started on, and the remote this clone fetched it from.
        "made_on": info["host"],
        "fetched_from": fetched,
        # A home holds the worktree and the run's own git dir (its index, the agent's objects).
        "disk_bytes": used,
        "disk_complete": complete,
    }


def agent_git_changed(g: AgentGitJson) -> bool:
    """True when the agent did anything with git beyond editing files on the starting branch."""
    return bool(g.get("branches") or g.get("tags") or g.get("stash") or g.get("commits"))


def describe_agent_git(g: AgentGitJson) -> list[str]:
    """Lines for people, from :meth:`sandbox.fast.agentgit.GitActivity.to_json` data: a summary, then
    the newest commits."""
    head = str(g.get("head") or "none")
    where = f"on branch {g['branch']}" if g.get("branch") else f"detached at {head[:12]}"
    parts = [where]
    count = int(g.get("commit_count") or 0)
    stash = int(g.get("stash") or 0)
    branches = sorted(g.get("branches") or {})
    tags = sorted(g.get("tags") or {})
    if count:
        parts.append(f"{count} commit(s) by the agent")
    if branches:
        parts.append("branches: " + ", ".join(branches[:8]))
    if tags:
        parts.append("tags: " + ", ".join(tags[:8]))
    if stash:
        parts.append(f"{stash} stash entr{'y' if stash == 1 else 'ies'}")
    lines = [f"{'; '.join(parts)} (in the run's own repository; 'apply' applies files only)"]
    commits = g.get("commits") or []
    for commit in commits[:5]:
        lines.append(f"{str(commit['id'])[:10]} {commit['subject']}")
    return lines


def network_refusals(notes: Sequence[Mapping[str, Any]]) -> list[RefusalJson]:
    """Connections the run's allowlist proxy refused, oldest first, from the fold's ``note`` events'
    data (``state["data"]["note"]``): ``host``, ``port``, ``at``, ``call_id`` (the call running then,
    None between calls), ``session`` (see :class:`sandbox.models.NetworkRefusal`)."""
    out: list[RefusalJson] = []
    for note in notes:
        item = note.get("network_refused")
        if isinstance(item, dict) and isinstance(item.get("host"), str):
            out.append(
                {
                    "host": item["host"],
                    "port": item.get("port"),
                    "at": item.get("at") or note.get("at"),
                    "method": item.get("method"),
                    "call_id": item.get("call_id"),
                    "session": item.get("session"),
                }
            )
    return out
