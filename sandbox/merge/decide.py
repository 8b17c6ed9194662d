"""The per-path verdict of an apply, undo or redo: the one place that sets it.

:func:`decide` reads one path's evidence (the user's file as probed, the chain of the selected
calls' states, the ``user_paths`` record of what the sandbox wrote there before) and sets its
``action``:

* the user's file equal to the agent's end state: ``skip`` (already applied);
* equal to the start of the chain (or to a state the sandbox itself wrote earlier): ``write``;
* anything else: ``conflict``, with a reason that says whose change it is and a hint.

Later steps of planning only ever turn a verdict into a stricter one, and do it through the
functions below, so every verdict a user can see is set in this module: an obstacle in the tree
(:func:`obstacle`, found by :mod:`sandbox.merge.obstacles`), a clean or marked 3-way merge
(:func:`merged`, :mod:`sandbox.merge.threeway`), a rename that takes the user's edit along
(:func:`renamed`, :mod:`sandbox.merge.renames`), a path a choice of hunks leaves out, takes in
part or places on the user's edited file (:func:`left_out`, :func:`taken_in_part`, :func:`onto_yours`,
:mod:`sandbox.merge.partial`), a path an undo or
redo may not move (:func:`conflict`). :func:`explain_dependencies` and :func:`whose_change` refine the reason of a
conflict (calls not selected; an uncommitted edit in the run's base).
"""

from __future__ import annotations

from sandbox.merge.planned import PlannedPath, partial_of, state_record
from sandbox.merge.select import dependencies
from sandbox.models import LedgerEntry, LedgerState, PartialApply, UserPathRecord
from sandbox.run.run import Run
from sandbox.store import journal, objects
from sandbox.store.journal import State

#: The reason :func:`decide` gives a user's edit; :func:`whose_change` refines it.
YOUR_EDIT = "your file differs from the version the agent started from"


def decide(p: PlannedPath, prior: UserPathRecord | None) -> None:
    """Set the action of one path from the user's state, the chain and what the sandbox wrote before."""
    if _unusable(p):
        return
    written = written_state(prior)
    if _already_there(p, prior, written):
        return
    partial = partial_of(prior)
    if partial is not None and written == p.user.state:
        _continue_partial(p, prior, partial)
        return
    if _write_from_chain(p, prior, written):
        return
    _explain_conflict(p)


def _unusable(p: PlannedPath) -> bool:
    """A user's path that cannot be compared at all (unreadable, excluded, not a file): decided here."""
    user = p.user
    if user.kind == "unreadable":
        where = f" ({user.blocker!r})" if user.blocker else ""
        p.reason = f"it cannot be read in your tree{where}: {user.unreadable}"
        p.hint = "make it readable (chmod u+r), or leave this path out (--exclude PATH)"
        p.obstacle = True
        return True
    if user.kind == "excluded":
        if user.entry == p.agent:
            p.action, p.reason = "skip", "already there (outside your sparse checkout)"
            return True
        p.obstacle = True
        p.reason = "it is outside your sparse checkout (not checked out, not deleted)"
        p.hint = (
            "add its directory to your checkout ('git sparse-checkout add DIR') and apply again, "
            "or leave it out (--exclude PATH)"
        )
        return True
    if not user.known:
        p.reason = "it is neither a file nor a symlink in your tree (a fifo or socket)"
        p.hint = "move it away, then apply again"
        p.obstacle = True
        return True
    return False


def _already_there(p: PlannedPath, prior: UserPathRecord | None, written: State) -> bool:
    """The agent's change is in the user's file already, or there is nothing of it to take: skip."""
    if journal.matches(p.user, p.agent):
        p.action, p.reason = "skip", "already applied"
        # Carried only when the sandbox itself wrote this state: an undo must never take back a
        # change the user made (even one equal to the agent's).
        if prior is not None and written == p.user.state:
            prior_calls = list(prior.calls)
            p.record = state_record(written, p.agent, prior_calls + [c for c in p.calls if c not in prior_calls])
        return True
    if p.base == p.agent:
        p.action, p.reason = "skip", "the agent's calls leave it as it was; yours is kept"
        return True
    if prior is not None and _target_state(prior) == p.agent:
        p.action, p.reason = "skip", "applied earlier; your later changes to it are kept"
        return True
    return False


def _broken(p: PlannedPath, start: int = 0) -> bool:
    """True when a call of the chain (from ``start`` on) builds on a state no selected call made."""
    steps = p.steps
    return any(steps[j].after != steps[j + 1].before for j in range(start, len(steps) - 1))


def _continue_partial(p: PlannedPath, prior: UserPathRecord | None, partial: PartialApply) -> None:
    """The user's file is an earlier partial apply (``--hunks``): write the rest on top, or refuse."""
    prior_calls: list[str] = list(prior.calls) if prior else []
    if journal.entry_state(partial.base_mode, partial.base_oid) == p.steps[0].before and not _broken(p):
        # Only some hunks were taken before: the rest is written on top of what the sandbox wrote.
        p.action, p.write, p.partial_from = "write", p.agent, partial
        kept = [c for c in prior_calls if c not in partial.calls]
        p.record = state_record(p.agent, p.agent, kept + [c for c in p.calls if c not in kept])
        return
    p.reason = f"only some hunks of {', '.join(partial.calls)} were taken into it (apply --hunks)"
    p.hint = "take the rest of them first (apply those calls), or undo that apply ('sandbox undo')"


def _write_from_chain(p: PlannedPath, prior: UserPathRecord | None, written: State) -> bool:
    """The user's file is at a state of the chain this apply may move on from: write the agent's."""
    user, steps = p.user, p.steps
    ours = prior is not None and written == user.state
    for i in range(len(steps) - 1, -1, -1):
        if not journal.matches(user, steps[i].before) or _broken(p, i):
            continue
        if i > 0 and not ours:
            continue
        p.action, p.write = "write", p.agent
        carried = list(prior.calls) if prior is not None and ours else []
        p.record = state_record(p.agent, p.agent, carried + [c for c in p.calls if c not in carried])
        return True
    return False


def _explain_conflict(p: PlannedPath) -> None:
    """The reason and hint of a conflict: whose change is in the way, and what to do about it."""
    steps, user = p.steps, p.user
    gaps = [steps[j + 1].call_id for j in range(len(steps) - 1) if steps[j].after != steps[j + 1].before]
    if gaps:
        p.reason = f"call(s) {', '.join(gaps)} build on changes to it by calls that are not selected"
        p.hint = "select those calls too (--call), or apply the whole run"
    elif user.kind == "dir":
        p.reason = "it is a directory in your tree"
        p.hint = "move the directory away to take the agent's version, or leave this path out (--exclude PATH)"
    elif user.entry is None:
        p.reason = "you deleted it; the agent changed it"
        p.hint = "restore your file to take the agent's change, or leave this path out (--exclude PATH)"
    else:
        p.reason = YOUR_EDIT
        p.hint = (
            "see base, agent and yours with 'sandbox conflicts', then merge by hand, use --3way, "
            "or leave it out (--exclude PATH)"
        )


def written_state(record: UserPathRecord | None) -> State:
    """The state the sandbox wrote at a path (None: no record)."""
    return None if record is None else journal.entry_state(record.mode, record.oid)


def _target_state(record: UserPathRecord | None) -> State:
    """The agent's state a path's record stands for (None: no record)."""
    return None if record is None else journal.entry_state(record.target_mode, record.target_oid)


# -- verdicts changed after the first decision ------------------------------------------------


def obstacle(p: PlannedPath, reason: str, hint: str) -> None:
    """Turn ``p`` into a conflict caused by an obstacle in the tree (see :mod:`sandbox.merge.obstacles`)."""
    p.action, p.write, p.record, p.markers = "conflict", None, None, False
    p.reason, p.hint, p.obstacle = reason, hint, True


def merged(p: PlannedPath, write: State, markers: bool) -> None:
    """A conflict that a 3-way merge resolved into ``write`` (with conflict markers when ``markers``)."""
    p.action, p.write = "merge", write
    p.markers = markers
    p.reason = "merged with your changes; conflict markers need attention" if markers else "merged cleanly"
    p.record = state_record(write, p.agent, p.calls)


def renamed(p_old: PlannedPath, p_new: PlannedPath, write: State, markers: bool) -> None:
    """A path the user edited and the agent renamed (``apply --3way``, :mod:`sandbox.merge.renames`):
    the user's edit merged into the new path's ``write``, the old path deleted as the agent did."""
    p_old.action, p_old.write, p_old.markers = "write", None, False
    p_old.reason = f"renamed to {p_new.path!r} by the agent; your edit went with it"
    p_old.record = state_record(None, None, p_old.calls)
    p_new.action, p_new.write, p_new.markers = ("merge" if markers else "write"), write, markers
    p_new.reason = f"renamed from {p_old.path!r}; merged with your edit of it" + (
        "; conflict markers need attention" if markers else ""
    )
    p_new.record = state_record(write, p_new.agent, p_new.calls)


def left_out(p: PlannedPath, reason: str) -> None:
    """A write that a choice of hunks (``apply --hunks``) leaves out: skipped, nothing recorded."""
    p.action, p.write, p.record = "skip", None, None
    p.reason = reason


def taken_in_part(p: PlannedPath, write: State, record: UserPathRecord, taken: list[str], reason: str) -> None:
    """A write that takes only some of the agent's hunks: ``write`` (the base with them), ``record``
    carrying the partial apply, ``taken`` the ids (see :mod:`sandbox.merge.partial`)."""
    p.write, p.record, p.taken, p.reason = write, record, taken, reason


def onto_yours(
    p: PlannedPath, write: State, record: UserPathRecord, taken: list[str] | None, reason: str, markers: bool
) -> None:
    """A file the user edited, with chosen hunks placed on it where their context still matches
    (``apply --hunks``; with conflict markers when ``markers``, under ``--3way``); see
    :mod:`sandbox.merge.partial`. The user's edit stays; undo puts their file back as it was."""
    p.action = "merge" if markers else "write"
    p.write, p.record, p.taken, p.markers = write, record, taken, markers
    p.reason = reason + ("; conflict markers need attention" if markers else "")


def conflict(p: PlannedPath, reason: str | None = None, hint: str | None = None) -> None:
    """Refuse a write an undo or redo may not make (the reason and hint kept unless given)."""
    p.action, p.write = "conflict", None
    if reason is not None:
        p.reason = reason
    if hint is not None:
        p.hint = hint


# -- reasons refined --------------------------------------------------------------------------


def whose_change(run: Run, planned: list[PlannedPath]) -> None:
    """Say whose change a conflict is when the run's base carries an uncommitted edit (issue 21).

    The base snapshot holds the uncommitted files of the tree the run started in; in a clone that
    fetched the run, or after the user put the file back, the user's file may be exactly the
    committed version: then the difference is that edit, not theirs.
    """
    mine = [p for p in planned if p.action == "conflict" and p.reason == YOUR_EDIT]
    if not mine or not run.info.head:
        return
    from sandbox.runs.remote import fetched_from

    head_tree = objects.commit_tree(run.repo, run.info.head)
    where = "in the clone where the run started" if fetched_from(run.project, run.run_id) else "in your tree"
    for p in mine:
        committed = objects.lookup(run.repo, head_tree, p.path)
        if committed != p.base and journal.matches(p.user, committed):
            p.reason = (
                f"your file is as committed; the agent started from an uncommitted edit of it made {where} "
                "when the run started"
            )
            p.hint = (
                "see that edit and the agent's with 'sandbox conflicts'; take both with --3way, or leave it out "
                "(--exclude PATH)"
            )


def explain_dependencies(run: Run, state: LedgerState, selected: list[LedgerEntry], planned: list[PlannedPath]) -> None:
    """Name the unselected calls a conflicting path needs first, instead of blaming the user.

    Where the user's file is at a state before those calls (the agent's earlier, unapplied call
    changed it first), the conflict says which calls to add (``--call N`` or ``--with-deps``);
    only a file at none of those states is reported as the user's change.
    """
    deps = dependencies(state, [e.call_id for e in selected], lambda path: not run.is_private(path))
    by_path: dict[str, list[LedgerEntry]] = {}
    for dep in deps:
        for path in dep.paths:
            by_path.setdefault(path, []).append(dep.call)
    for p in planned:
        needed = sorted(by_path.get(p.path, []), key=lambda e: e.seq)
        if p.action != "conflict" or p.obstacle or not needed:
            continue
        p.needs = [e.call_id for e in needed]
        earlier = [
            journal.entry_state(f.before_mode, f.before_hash) for e in needed for f in e.files if f.path == p.path
        ]
        names = ", ".join(f"#{e.seq} ({e.tool_name})" for e in needed)  # as log numbers them; ids in needs
        flags = " ".join(f"--call {e.seq}" for e in needed)
        one = len(needed) == 1
        if any(journal.matches(p.user, s) for s in earlier) or p.reason.startswith("call(s) "):
            p.reason, p.waits = f"{names} changed this file first", True
            p.hint = f"apply {'it' if one else 'them'} too with '{flags}', or use --with-deps"
        else:
            p.hint += f"; the selected calls also build on {names} (--with-deps adds {'it' if one else 'them'})"
