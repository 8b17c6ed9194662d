"""Taking the agent's work into the user's tree: plan, apply, preview, undo and redo.

Independent of :mod:`sandbox.recovery.actions`. Keep this file empty of imports.
"""
