"""Codex: no hooks of its own the sandbox reads; it records through ``sandbox mcp`` (the
README's Codex section), and :mod:`sandbox.agent.sessions` continues its sessions. What the registry
(:mod:`sandbox.agent.adapters`) needs to start it confined: its variables, model hosts and
configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NAME = "codex"
PROGRAM = "codex"
ENV = ("OPENAI_*", "CODEX_*")
ENDPOINTS = ("api.openai.com", "chatgpt.com", "auth.openai.com")
BASE_URL = ("OPENAI_BASE_URL",)
#: What your own Codex obeys, read-only in the sandbox: its settings, instructions, prompts, and its
#: execution rules (``rules/default.rules``: commands it runs without asking, outside any sandbox).
CONFIG = ("~/.codex/config.toml", "~/.codex/AGENTS.md", "~/.codex/prompts/", "~/.codex/rules/")
PRIVATE: tuple[str, ...] = ()
#: The options ``resume --continue`` keeps from a command line recorded in another clone (a fetched
#: run), with the values each may take (``*``: any plain word; none: no value): model and output
#: choices, features turned off, Codex's own sandbox and approvals where they do not widen. ``-c``
#: overrides (any MCP server, any command), ``--enable``, ``--add-dir``, ``--profile``,
#: ``--dangerously-bypass-approvals-and-sandbox`` and the like are dropped.
CARRY_OVER: dict[str, tuple[str, ...]] = {
    "-m": ("*",),
    "--model": ("*",),
    "--color": ("always", "never", "auto"),
    "--json": (),
    "--strict-config": (),
    "--skip-git-repo-check": (),
    "--disable": ("*",),
    "-s": ("read-only", "workspace-write"),
    "--sandbox": ("read-only", "workspace-write"),
    "-a": ("untrusted", "on-failure", "on-request"),
    "--ask-for-approval": ("untrusted", "on-failure", "on-request"),
}
#: Its sessions: found, forked and continued by :class:`sandbox.agent.sessions.Codex`.
SESSIONS = "Codex"


def session_homes(environ: Mapping[str, str], home: str, run_dir: str) -> list[str]:
    """Where its sessions are: ``CODEX_HOME`` or ``~/.codex`` (a run gives Codex no home of its own)."""
    return [environ.get("CODEX_HOME") or os.path.join(home, ".codex")]
