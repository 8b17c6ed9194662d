"""Operations on whole runs: runs that travel (remote: push and fetch; materialize: a fetched run's
worktree), runs that multiply (many: start --count and fork; compare), a run exported as a branch
(export), summaries for list and status (summary), and reclaiming leftovers (gc, relocate).

Above :mod:`sandbox.run` (each acts on one or more :class:`~sandbox.run.run.Run`) and below merge-back
and recovery, which read where a run was fetched from and recreate a fetched run's worktree. Keep
this file empty of imports.
"""
