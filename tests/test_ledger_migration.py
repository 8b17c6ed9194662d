"""Ledgers written before the persisted state was typed still read the same (issue 14).

``fixtures/ledger-v1`` holds a run written by the sandbox of that time (see its make_fixture.py)
and what that code observed when reading it back: status, log, the fold, the undo stack, the apply
plan's decisions, the resume decisions, and what an undo then did. Today's code must observe exactly
the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.ledger_fixture import EXPECTED, observe, restore


def test_a_ledger_written_before_typed_state_reads_the_same(tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())
    # Written before the fold dropped empty bookkeeping (see observe): absent and empty are the same.
    data = expected["fold"]["data"]
    expected["fold"]["data"] = {k: v for k, v in data.items() if v not in ({}, [])}
    seen = json.loads(json.dumps(observe(restore(tmp_path / "repo")), sort_keys=True))
    for key in sorted(expected):
        assert seen[key] == expected[key], key
    assert sorted(seen) == sorted(expected)
