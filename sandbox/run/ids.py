"""Identities of a run and its calls: run ids, call ids, and the hash that recognises the same call.

Standard library only (and :mod:`sandbox.store.layout`'s canonical JSON): the recorder, approvals
and the run share these without importing one another.
"""

from __future__ import annotations

import os

from sandbox.store import layout

TYPE_CHECKING = False  # no typing, hashlib or secrets at run time: sandbox start's early part picks a run id
if TYPE_CHECKING:
    from typing import Any


def input_hash(tool_name: str, value: Any) -> str:
    """A stable hash of a tool name and its input, used to recognise the same call again."""
    import hashlib

    return "sha256:" + hashlib.sha256(tool_name.encode() + b"\0" + layout.canonical_json(value)).hexdigest()


def new_run_id() -> str:
    """A fresh run id (8 hex digits; any unique prefix names the run on the command line)."""
    return os.urandom(4).hex()  # what secrets.token_hex(4) returns


def new_call_id() -> str:
    """A fresh call id."""
    return "call_" + os.urandom(6).hex()
