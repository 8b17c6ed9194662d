"""Agents and their processes: the hook wire protocol, the host serving a run's hooks and watcher,
adapters for Claude Code and Gemini CLI, launching and confining the agent.

Keep this file empty of imports: the hook fast path imports single modules from here.
"""
