"""A run and what a call is: recording, approvals, checkpoints, settings, what a new worktree gets,
names, and the ledger checked against its commits.

Imports only :mod:`sandbox.store` (and the leaf modules); operations on whole runs live a floor up,
in :mod:`sandbox.runs`. Keep this file empty of imports.
"""
