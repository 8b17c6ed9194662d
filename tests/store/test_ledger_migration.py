"""Ledgers written before the persisted state was typed still read the same (issue 14).

``fixtures/ledger-v1`` holds a run written by the sandbox of that time (see its make_fixture.py)
and what that code observed when reading it back: status, log, the fold, the undo stack, the apply
plan's decisions, the resume decisions, and what an undo then did. Today's code must observe exactly
the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import sandbox_cmd
from tests.ledger_fixture import EXPECTED, observe, restore


def in_todays_vocabulary(expected: dict[str, Any]) -> None:
    """The CLI's JSON renamed keys since (issue 12: ``head`` -> ``run_head``, ``call`` -> ``call_id``,
    times with ``Z``): the same facts under today's names. Decisions are compared as they were."""
    from sandbox.cli.jsonout import RENAMES

    for name in ("status", "undo", "apply_dry"):
        output = expected[name]["output"]
        if isinstance(output, dict):
            output = {RENAMES.get(k, k): v for k, v in output.items()}
            if isinstance(output.get("created_at"), str):
                output["created_at"] = output["created_at"].replace("+00:00", "Z")
        else:  # a JSON document followed by the one-line refusal: top-level keys are indented by two
            for old, new in RENAMES.items():
                output = output.replace(f'\n  "{old}": ', f'\n  "{new}": ')
        expected[name]["output"] = output


def test_a_ledger_written_before_typed_state_reads_the_same(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    in_todays_vocabulary(expected)
    # Written before the fold dropped empty bookkeeping (see observe): absent and empty are the same.
    data = expected["fold"]["data"]
    expected["fold"]["data"] = {k: v for k, v in data.items() if v not in ({}, [])}
    # Added to `status --json` after the fixture was written: the repository's host (null: none runs).
    expected["status"]["output"].setdefault("host", None)
    # Added to status and list with issue 21: files where apply --3way left conflict markers (none here).
    expected["status"]["output"].setdefault("conflict_markers", [])
    # Added when status began to bound its disk count (10,000 entries): this small run is counted whole.
    expected["status"]["output"].setdefault("disk_complete", True)
    # Restored by a plain git fetch: foreign until adopted (issue 33), as the clone that wrote it would
    # have adopted it on its first use of this version.
    repo = restore(tmp_path / "repo")
    adopted = sandbox_cmd("adopt", "--json", cwd=repo)
    assert adopted.returncode == 0 and json.loads(adopted.stdout)["adopted_events"] > 0, adopted.stderr
    seen = json.loads(json.dumps(observe(repo), sort_keys=True))
    # Fields added since (runs that travel, issue 13) read as None from an old ledger: the same as absent.
    added = [(seen["fold"], "clone")] + [(seen["fold"]["run"], k) for k in ("host", "group", "forked_from")]
    added += [(seen["status"]["output"], k) for k in ("made_on", "fetched_from")]
    for where, key in added:
        if where.get(key, "present") is None:
            del where[key]
    # Added with the network allowlist (issue 20): an old ledger has no refusals.
    if seen["status"]["output"].get("network_refused") == []:
        del seen["status"]["output"]["network_refused"]
    # Added with issue 21: the calls 'rollback --files' took out of the run, and a dry run's would_apply.
    rolled = {c for c, e in seen["fold"]["calls"].items() if e.get("rolled_back")}
    assert rolled == {"call_8b3c8797c244"}  # d.txt, written after a checkpoint the files went back to
    for calls in (seen["fold"]["calls"].values(), seen["entries"], seen["log"]["output"]):
        for entry in calls:
            entry.pop("rolled_back", None)
            # Added with issue 33 (only the session that started a call ends it): none recorded then.
            if entry.get("session", "present") is None:
                del entry["session"]
    # Added to status with issue 34: renames counted once (none here), and how log numbers the calls it names.
    status_out = seen["status"]["output"]
    if status_out.get("renamed_paths") == 0:
        del status_out["renamed_paths"]
    numbers = status_out.pop("call_numbers", {})
    uncertain = status_out.pop("uncertain_calls", [])
    assert uncertain == [c for c in status_out["in_flight"] if seen["fold"]["calls"][c]["status"] == "uncertain"]
    assert all(numbers[c] == seen["fold"]["calls"][c]["seq"] for c in numbers)
    dry = seen["apply_dry"]["output"]
    if isinstance(dry, str):
        seen["apply_dry"]["output"] = dry.replace(',\n  "would_apply": []', "")
    # What the old code got wrong (issue 21 item 1): it applied the rolled-back call's d.txt.
    expected["plan"] = [p for p in expected["plan"] if p["path"] != "d.txt"]
    expected["apply_dry"]["output"] = expected["apply_dry"]["output"].replace('    "call_8b3c8797c244",\n', "")
    expected["status"]["output"]["unapplied_calls"] -= 1  # nor does status count it as unapplied work
    if isinstance(seen["undo"]["output"], dict):
        seen["undo"]["output"].pop("would_apply", None)
    # The fixture's run has no worktree in the restored clone: status says none (issue 13) where it
    # used to show the legacy path the run would have had.
    status = seen["status"]["output"]
    if status["worktree"] is None and status["git_dir"] is None:
        status["worktree"], status["git_dir"] = (
            expected["status"]["output"]["worktree"],
            expected["status"]["output"]["git_dir"],
        )
    # Added with issue 33 (the events from elsewhere counted): none, the fixture's own events were adopted.
    assert seen["fold"].pop("foreign") == 0
    # Added with issue 34 (a killed call's changes booked to it at resume): an old drift was booked to none.
    for drift in seen["fold"]["data"].get("drift", []):
        if drift.get("booked_to", "present") is None:
            del drift["booked_to"]
    for key in sorted(expected):
        assert seen[key] == expected[key], key
    assert sorted(seen) == sorted(expected)
