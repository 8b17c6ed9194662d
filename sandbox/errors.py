"""The one user-error base class, and the errors shared by several modules.

Every error a user can cause or fix is a :class:`SandboxError` whose message is a whole sentence
saying what is wrong and what to do. The CLI maps them to exit codes; the library only raises.
Errors that belong to one module live next to the code that raises them.
"""

from __future__ import annotations


class SandboxError(Exception):
    """A refused operation or a user error, with a whole-sentence message.

    ``exit_code`` is what the CLI exits with: 1 for a refusal or conflict, 2 for bad usage.
    """

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def damaged_object(exc: Exception) -> str:
    """The sentence a user or a model reads for a missing or garbled git object that no command turned
    into its own refusal (``exc`` says which object, e.g. ``sandbox.store.objects.DamagedObjectError``)."""
    text = str(exc)
    return f"{text[:1].upper()}{text[1:]}: the repository's object store is damaged ('git fsck' names what is damaged)."


class UsageError(SandboxError):
    """The arguments are malformed (bad JSON, unknown status, bad path syntax)."""

    exit_code = 2


class NotARepositoryError(SandboxError):
    """The directory is not inside a git working tree (or the repository is bare)."""

    exit_code = 2


class UnknownRunError(SandboxError):
    """No run with that id exists in this repository."""

    exit_code = 2


class UnknownCallError(SandboxError):
    """No call with that id exists in the run's ledger."""

    exit_code = 2


class PathRefusedError(SandboxError):
    """A path leads outside the worktree, into `.git`, or through a symlink."""

    exit_code = 1


class CorruptionError(SandboxError):
    """Stored sandbox state failed an integrity check; it is reported, never read as valid."""

    exit_code = 1


class LockedError(SandboxError):
    """Another process holds a lock this operation needs."""

    exit_code = 1


class StaleWriterError(SandboxError):
    """This process's lease on the run was superseded (the run was resumed elsewhere)."""

    exit_code = 1
