"""Recovery of a run: conservative resume, rollback to a checkpoint, compensation.

Independent of :mod:`sandbox.merge`. Keep this file empty of imports.
"""
