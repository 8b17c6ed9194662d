"""What the agent wrote, made safe to show on a terminal: :mod:`sandbox.escape`, the one place."""

from __future__ import annotations

from sandbox.escape import lines, message, path, suspicious, terminal, text

__all__ = ["lines", "message", "path", "suspicious", "terminal", "text"]
