"""Writing a plan into a tree: journaled, atomic per file, all or nothing.

Every apply, undo and redo writes through :func:`execute`: the journal first (fsync'd,
:mod:`sandbox.store.journal`), then each file atomically, then the operation's ledger event, then
the journal is removed; each step is a fault point (``apply.after_journal`` ...) the crash tests
kill at. A failed write or ledger append puts back what was written; where even that fails, the
journal stays and :func:`continue_pending` (``sandbox apply --continue``) finishes the operation.
The user's index, HEAD, refs and stash are never touched.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Sequence

import pygit2

from sandbox import faults
from sandbox.errors import SandboxError
from sandbox.merge import validate
from sandbox.merge.planned import PlannedPath
from sandbox.models import ApplyJournal, ApplyReport, JournalEntry
from sandbox.run.run import Run
from sandbox.store import convert, journal, objects, repository
from sandbox.store.project import Project

OPS = ("apply", "undo", "redo")
STEPS = ("after_lock", "after_journal", "after_file", "before_ledger", "after_ledger", "after_journal_remove")
faults.POINTS.update(f"{op}.{step}" for op in OPS for step in STEPS)
faults.POINTS.update({"continue.after_file", "rollback.after_file"})


def journal_entries(repo: pygit2.Repository, root: str, writes: list[PlannedPath]) -> list[JournalEntry]:
    """Journal entries for the planned writes, in the bytes on disk (as checkout would write them).

    Planning compares blobs (cleaned); the journal and the writes deal in the bytes on disk, so each
    state goes through the tree's conversion (:mod:`sandbox.store.convert`): identity in most trees.
    """
    conv = convert.for_tree(root)
    out = []
    for p in writes:
        before = conv.on_disk(p.path, p.user.state)
        after = conv.to_disk(p.path, p.write, repo)
        out.append(
            JournalEntry(
                path=p.path,
                before_mode=before.mode if before else None,
                before_oid=before.oid if before else None,
                after_mode=after.mode if after else None,
                after_oid=after.oid if after else None,
            )
        )
    return out


def execute(
    run: Run, j: ApplyJournal, keep: list[str] | None = None, progress: Callable[[str], None] | None = None
) -> list[str]:
    """Carry out a journaled operation: journal, files, ledger event, journal removal (each a fault point).

    Returns the paths written; ``progress`` is told each one ("Writing files: 3/120"). An OS error
    (disk full, I/O error, read-only file system) or a failed ledger append rolls the written paths
    back and raises :class:`journal.WriteFailedError` saying so; where the roll-back fails too, the
    journal is kept and the error names the commands that finish or reverse the operation.
    """
    project, op = run.project, j.op
    validate.check(run.repo, j.entries)  # the whole plan, before the journal: nothing half-applies
    if j.target == "user":
        # What goes into your tree is yours: its blobs in your store, not only in the run's (repository.give_to_user).
        give_to_user(run, op, [e.after_oid for e in j.entries if e.after_mode != objects.MODE_GITLINK])
    if j.token is None:
        j.token = journal.new_token()
    temps = journal.temps_of(project, j)
    journal.clear_temps(project, None, j.target_dir)  # a staging area emptied by an earlier crash's recovery
    try:
        journal.save(project, j)
    except OSError as exc:
        with contextlib.suppress(OSError):
            journal.remove(project, j.target_dir)
        raise journal.WriteFailedError(
            f"The {op} of run {run.run_id} could not write its journal ({journal.describe(exc)}); nothing was "
            f"written. {remedy(exc)}, then run '{_again(j)}' again."
        ) from exc
    faults.point(f"{op}.after_journal")
    written: list[str] = []
    total = len(j.entries)

    def wrote(path: str) -> None:
        written.append(path)
        if progress is not None:
            done = ", done." if len(written) == total else ""  # git's way: the last count always shows
            progress(f"Writing files: {len(written)}/{total}{done}")

    try:
        journal.play(run.repo, j.target_dir, j.entries, f"{op}.after_file", on_write=wrote, temps=temps)
    except OSError as exc:
        where = _where(j.target_dir, exc)
        raise _roll_back_failed(run, j, temps, written, f"writing {where}", exc) from exc
    except SandboxError as exc:  # the tree changed under the write (a path in the way): put back what was written
        raise _roll_back_failed(run, j, temps, written, "writing your tree", exc) from exc
    faults.point(f"{op}.before_ledger")
    try:
        run.record_event(j.event, keep=keep or ())
    except (OSError, pygit2.GitError, SandboxError) as exc:
        raise _roll_back_failed(run, j, temps, written, "recording it in the run's ledger", exc) from exc
    faults.point(f"{op}.after_ledger")
    if j.target == "sandbox":
        run.head()  # moves refs/sandbox/<run>/head to the event's commit
    try:
        journal.remove(project, j.target_dir)
    except OSError as exc:
        raise journal.WriteFailedError(
            f"The {op} of run {run.run_id} is complete and recorded, but its journal could not be removed "
            f"({journal.describe(exc)}); run 'sandbox apply --continue {run.run_id}' to clear it."
        ) from exc
    faults.point(f"{op}.after_journal_remove")
    return written


def give_to_user(run: Run, op: str, oids: Sequence[str | None]) -> None:
    """Copy the blobs an operation writes into your tree into your own store (:func:`repository.give_to_user`),
    before anything is written; a full disk (or any write error) there is a refusal that names it."""
    try:
        repository.give_to_user(run.repo, [oid for oid in oids if oid])
    except OSError as exc:
        raise journal.WriteFailedError(
            f"The {op} of run {run.run_id} could not store the files it writes in your repository's objects "
            f"({journal.describe(exc)}); nothing was written. {remedy(exc)}, then run 'sandbox {op} {run.run_id}' "
            "again."
        ) from exc


def _where(root: str, exc: OSError) -> str:
    if not exc.filename:
        return "your tree"
    rel = os.path.relpath(os.fsdecode(exc.filename), root)
    return "a file" if rel.startswith("..") else repr(rel.replace(os.sep, "/"))


def remedy(exc: OSError | Exception) -> str:
    """What the user does about ``exc`` before trying again ("Free some space", ...)."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or code == errno.EDQUOT:
        return "Free some space"
    if code == errno.EROFS:
        return "Make the file system writable"
    if code in (errno.EACCES, errno.EPERM):
        return "Fix the permissions"
    return "Fix the cause"


def _again(j: ApplyJournal) -> str:
    return f"sandbox {j.op} {j.run_id}"


def _roll_back_failed(
    run: Run, j: ApplyJournal, temps: journal.Temps, written: list[str], stage: str, exc: Exception
) -> journal.WriteFailedError:
    """Undo the files of a failed operation and its journal; the error that says what happened."""
    what = journal.describe(exc) if isinstance(exc, OSError) else str(exc).rstrip(".")
    head = f"The {j.op} of run {run.run_id} failed {stage} ({what})"
    try:
        journal.play(run.repo, j.target_dir, j.entries, "rollback.after_file", reverse=True, temps=temps)
        journal.clear_temps(run.project, j, j.target_dir)
        journal.remove(run.project, j.target_dir)
    except (OSError, SandboxError) as again:
        reason = journal.describe(again) if isinstance(again, OSError) else str(again).rstrip(".")
        return journal.WriteFailedError(
            f"{head} after writing {len(written)} path(s), and putting them back failed too ({reason}); the journal "
            f"is kept: {remedy(exc).lower()}, then run 'sandbox apply --continue {run.run_id}' to finish the "
            f"{j.op} or 'sandbox undo {run.run_id}' to reverse it."
        )
    done = f"the {len(written)} path(s) it had written were put back, so " if written else ""
    where = "your tree" if j.target == "user" else "the run's worktree"
    return journal.WriteFailedError(
        f"{head}; {done}nothing of {where} changed. {remedy(exc)}, then run '{_again(j)}' again."
    )


def keep_users_files(run: Run, root: str, writes: list[PlannedPath]) -> None:
    """Store the user's version of each path about to be written, so ``sandbox undo`` can put it back
    (an edit of theirs under a 3-way merge, a state the sandbox never wrote, is not in any object store).
    Stored in your own store: it is your content (and what an undo puts back in your tree). Where git
    converts a path, the blob ``git add`` would store for what the apply writes goes there too (the journal
    names the converted bytes, which :func:`execute` gives: :func:`repository.give_to_user`)."""
    repo = run.repo
    mine = repository.users_own(repo)
    conv = convert.for_tree(root)
    files = (objects.MODE_FILE, objects.MODE_EXEC)  # what git converts (links and gitlinks never)
    converted = [p.write.oid for p in writes if p.write and p.write.mode in files and conv.applies(p.path)]
    if converted:
        give_to_user(run, "apply", converted)
    with objects.git_writes():
        for p in writes:
            state = p.user.state
            if state is None or state.oid in repo:
                continue
            full = os.path.join(root, p.path)
            if p.user.kind == "link":
                data = os.fsencode(os.readlink(full))
            else:
                with open(full, "rb") as fh:
                    data = conv.clean_bytes(p.path, fh.read())
            objects.write_blob(mine, data)  # the apply's plan still checks the file against state.oid


def continue_pending(project: Project, workdir: str, lock_timeout: float = 30.0) -> ApplyReport | None:
    """Finish the interrupted apply, undo or redo journaled for ``workdir``; None when none is pending.

    Idempotent: each path is at its before or after state; those at before are written. A path at
    neither (changed since) stops it with nothing written and the journal kept.
    """
    with journal.tree_lock(project, workdir, lock_timeout):
        j = journal.load(project, workdir)
        if j is None:
            return None
        bad = journal.check(workdir, j.entries)
        if bad:
            raise journal.TreeChangedError(
                f"Cannot finish the interrupted {j.op}: {', '.join(bad[:5])} changed since; nothing was written. "
                "Put them back or roll the operation back with 'sandbox undo'."
            )
        run = Run.open(project, j.run_id)
        with run.lock(lock_timeout):
            state = run.state()
            recorded = j.event.event_id in state.event_ids
            if j.target == "sandbox" and not recorded and state.head != j.old_head:
                raise SandboxError(
                    f"Run {run.run_id} moved on since the interrupted {j.op}; roll it back with 'sandbox undo'."
                )
            written: list[str] = []
            try:
                journal.clear_temps(project, j, workdir)
                temps = journal.temps_of(project, j)
                journal.play(run.repo, workdir, j.entries, "continue.after_file", on_write=written.append, temps=temps)
                run.record_event(j.event, keep=[c for c in (j.old_head, j.new_head) if c])
                if j.target == "sandbox":
                    run.sync_head()
                journal.remove(project, workdir)
            except OSError as exc:
                raise journal.WriteFailedError(
                    f"Could not finish the interrupted {j.op} of run {run.run_id} ({journal.describe(exc)}); the "
                    f"journal is kept: {remedy(exc).lower()}, then run 'sandbox apply --continue {run.run_id}' "
                    f"again, or 'sandbox undo {run.run_id}' to reverse it."
                ) from exc
        return ApplyReport(
            op=j.op,
            run=j.run_id,
            target=j.target,
            target_dir=workdir,
            calls=j.calls,
            applied=written if j.op != "undo" else [],
            restored=written if j.op == "undo" else [],
            skipped=[e.path for e in j.entries if e.path not in written],
            recovered="continued",
        )
