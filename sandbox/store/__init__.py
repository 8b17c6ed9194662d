"""Storage without domain words: git objects and packs, the ledger's bytes, refs and directory layout,
locks, durable file writes, worktrees, snapshots, scans and the write journal.

Nothing here imports from the run, merge, recovery or agent packages. Keep this file empty of imports.
"""
