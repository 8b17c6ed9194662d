"""Codex: no hooks of its own the sandbox reads; it records through ``sandbox mcp`` (the
README's Codex section), and :mod:`sandbox.agent.sessions` continues its sessions. What the registry
(:mod:`sandbox.agent.adapters`) needs to start it confined: its variables, model hosts and
configuration.
"""

from __future__ import annotations

NAME = "codex"
PROGRAM = "codex"
ENV = ("OPENAI_*", "CODEX_*")
ENDPOINTS = ("api.openai.com", "chatgpt.com", "auth.openai.com")
BASE_URL = ("OPENAI_BASE_URL",)
CONFIG = ("~/.codex/config.toml", "~/.codex/AGENTS.md", "~/.codex/prompts/")
PRIVATE: tuple[str, ...] = ()
