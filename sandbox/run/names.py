"""Names for runs and calls on the command line: one resolver for each, used by every command.

RUN, in the order tried:

- omitted: the run whose worktree (or any directory below it) we are in, else the only run;
- its whole id (``1a2b3c4d``);
- its label, as given to ``sandbox start --label`` (``try-env``), when one run has it;
- a unique prefix of its id (``1a2``).

A label never shadows an id: one that reads as an id is refused at ``start`` and ``fetch``, and a
label that is also a prefix of another run's id (a run labelled elsewhere) is refused as ambiguous.

CALL, in the order tried:

- the whole call id (``call_3f2a9c01d4e5``, or an id the agent chose, such as ``toolu_01...``);
- ``@`` is the last call in the ledger (the bottom line of ``sandbox log``); ``@~N`` is the call N
  lines above it (``@~1`` or ``@~`` the one before the last). ``@`` reads as "here" (git accepts it
  for HEAD, jj for the working-copy commit) and, unlike ``HEAD~N``, cannot be mistaken for the
  user's HEAD, which the run also records;
- a ledger sequence number as ``sandbox log`` prints it: ``5`` or ``#5`` (a name of digits only is
  a sequence number, never an id prefix);
- a unique prefix of a call id, with or without the ``call_`` prefix (``call_3f2``, ``3f2``).

An unknown or ambiguous name raises :class:`~sandbox.errors.UnknownRunError` /
:class:`~sandbox.errors.UnknownCallError` with one sentence that lists the candidates (for an unknown
name, the close ones: "did you mean ...?").
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from sandbox.errors import UnknownCallError, UnknownRunError

if TYPE_CHECKING:
    from sandbox.models import LedgerEntry
    from sandbox.run.run import Run
    from sandbox.store.project import Project

#: ``@``, ``@~``, ``@~N``: counted back from the last call.
RELATIVE_RE = re.compile(r"^@(?:~(\d*))?$")
#: ``5`` or ``#5``: a ledger sequence number.
SEQ_RE = re.compile(r"^#?(\d+)$")
CALL_PREFIX = "call_"


def did_you_mean(word: str, candidates: Iterable[str], limit: int = 3) -> str:
    """`` did you mean 'x' or 'y'?`` for the candidates close to ``word``, or ``""`` when none is."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=limit, cutoff=0.6)
    if not close:
        return ""
    quoted = [f"'{c}'" for c in close]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" Did you mean {listed}?"


# -- runs ----------------------------------------------------------------------------------------------


def run_labels(project: Project, run_ids: Sequence[str] | None = None) -> dict[str, str]:
    """Every run's label (runs without one, or whose ledger cannot be read, are left out)."""
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run

    labels: dict[str, str] = {}
    for run_id in project.run_ids() if run_ids is None else run_ids:
        try:
            run = Run.open(project, run_id)
            label = run.info.label
            run.seal_cache()  # read whole anyway: the next name is resolved without git (sandbox.fast.foldcache)
        except SandboxError:
            continue
        if label:
            labels[run_id] = label
    return labels


def empty_run_name(given: str) -> UnknownRunError:
    """The refusal of a run name that is empty or blank (it names no run; left out, RUN would)."""
    return UnknownRunError(
        f"The run name {given!r} is empty; name a run by its id, label or id prefix (see 'sandbox list'), "
        "or leave RUN out."
    )


def resolve_run(project: Project, given: str | None, cwd_run: str | None = None) -> str:
    """The id of the run ``given`` names (see the module docstring), or the run we are in when omitted
    (``None``). An empty or blank name is refused: ``sandbox drop "$RUN"`` with RUN unset must not
    mean the only run."""
    if given is not None and not given.strip():
        raise empty_run_name(given)
    if given and project.has_ledger(given):
        return given  # a whole id: the common case, without listing every run
    ids = project.run_ids()
    if given is None:
        if cwd_run:
            return cwd_run
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise UnknownRunError("This repository has no sandbox runs; start one with 'sandbox start'.")
        raise UnknownRunError(
            f"This repository has {len(ids)} runs; name one (see 'sandbox list') or run from its worktree."
        )
    if given in ids:
        return given
    if not ids:
        raise UnknownRunError(f"No run {given!r}: this repository has no sandbox runs; start one with 'sandbox start'.")
    labels = run_labels(project, ids)
    labelled = [rid for rid, label in labels.items() if label == given]
    shadowed = [rid for rid in ids if rid.startswith(given) and rid not in labelled]
    if len(labelled) == 1 and shadowed:  # a label that reads as another run's id: name the one meant
        raise UnknownRunError(
            f"Run name {given!r} is ambiguous: it is the label of run {labelled[0]} and a prefix of the id of run "
            f"{', '.join(shadowed)}; name the one you mean by its whole id."
        )
    if len(labelled) == 1:
        return labelled[0]
    if labelled:
        raise UnknownRunError(
            f"{len(labelled)} runs are labelled {given!r}: {', '.join(labelled)}; name one by its id."
        )
    matches = [rid for rid in ids if rid.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(rid + (f" ({labels[rid]})" if rid in labels else "") for rid in matches)
        raise UnknownRunError(f"Run name {given!r} is ambiguous: {shown}; give more of the id.")
    group = sorted(
        label for label in labels.values() if label.startswith(given + "-") and label[len(given) + 1 :].isdigit()
    )
    if group:  # 'start --count 3 --label try' labels its runs try-1, try-2, try-3
        raise UnknownRunError(
            f"No run is labelled {given!r}; {len(group)} runs of one 'start --count' are: {', '.join(group)}. "
            f"Name one of them, or compare them with 'sandbox compare {' '.join(group)}'."
        )
    hint = did_you_mean(given, [*ids, *labels.values()])
    raise UnknownRunError(f"No run {given!r} in this repository.{hint} See 'sandbox list'.")


# -- calls ---------------------------------------------------------------------------------------------


def resolve_call(run: Run, given: str) -> LedgerEntry:
    """The ledger entry of the call ``given`` names in ``run`` (see the module docstring)."""
    return find_call(run.entries(), given, run.run_id)


def resolve_call_id(run: Run, given: str) -> str:
    """The id of the call ``given`` names in ``run``."""
    return resolve_call(run, given).call_id


def find_call(entries: Sequence[LedgerEntry], given: str, run_id: str) -> LedgerEntry:
    """The entry among ``entries`` (ledger order) that ``given`` names; the pure core of :func:`resolve_call`."""
    name = given.strip()
    if not entries:
        raise UnknownCallError(f"Run {run_id} has no calls yet, so {given!r} names none.")
    for entry in entries:
        if entry.call_id == name:  # a whole id wins, even one of digits an agent chose
            return entry
    rel = RELATIVE_RE.match(name)
    if rel is not None:
        back = int(rel.group(1)) if rel.group(1) else (1 if "~" in name else 0)
        if back >= len(entries):
            raise UnknownCallError(
                f"Run {run_id} has {len(entries)} call(s), so {given!r} names none; "
                f"the first is @~{len(entries) - 1} (#1)."
            )
        return entries[len(entries) - 1 - back]
    seq = SEQ_RE.match(name)
    if seq is not None:
        number = int(seq.group(1))
        for entry in entries:
            if entry.seq == number:
                return entry
        raise UnknownCallError(
            f"Run {run_id} has no call #{number}: its calls are #{entries[0].seq} to #{entries[-1].seq}; "
            "see 'sandbox log'."
        )
    if name:
        matches = [e for e in entries if e.call_id.startswith(name) or e.call_id.startswith(CALL_PREFIX + name)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(f"{e.call_id} (#{e.seq})" for e in matches[:6]) + (", ..." if len(matches) > 6 else "")
            raise UnknownCallError(f"Call name {given!r} is ambiguous in run {run_id}: {shown}; give more of the id.")
    hint = did_you_mean(name, [e.call_id for e in entries])
    raise UnknownCallError(f"Run {run_id} has no call {given!r}.{hint} See 'sandbox log'.")
