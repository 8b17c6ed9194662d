"""Agents and their processes: the hook protocol (hookproto), the host's wire protocol (wire), the
repository's host serving every run's hooks and watcher (host, inotify, changes), adapters for
Claude Code and Gemini CLI, launching and confining the agent.

Keep this file empty of imports: the hook fast path imports single modules from here.
"""
