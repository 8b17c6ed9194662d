"""sandbox: run coding agents in isolated git worktrees without putting the user's work at risk.

The library never prints, exits or reads the environment; the CLI in :mod:`sandbox.cli` does.
Kept free of heavy imports so that ``sandbox hook`` starts fast; import from the submodules.
"""

__version__ = "0.1.0"
