"""A run and what a call is: recording, approvals, checkpoints, settings, what a new worktree gets,
summaries and reclaiming leftovers.

Imports only :mod:`sandbox.store` (and the leaf modules). Keep this file empty of imports.
"""
