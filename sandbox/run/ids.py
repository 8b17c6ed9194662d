"""Identities of a run and its calls: run ids, call ids, and the hash that recognises the same call.

Standard library only (and :mod:`sandbox.store.layout`'s canonical JSON): the recorder, approvals
and the run share these without importing one another.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from sandbox.store import layout


def input_hash(tool_name: str, value: Any) -> str:
    """A stable hash of a tool name and its input, used to recognise the same call again."""
    return "sha256:" + hashlib.sha256(tool_name.encode() + b"\0" + layout.canonical_json(value)).hexdigest()


def new_run_id() -> str:
    """A fresh run id (8 hex digits; any unique prefix names the run on the command line)."""
    return secrets.token_hex(4)


def new_call_id() -> str:
    """A fresh call id."""
    return "call_" + secrets.token_hex(6)
