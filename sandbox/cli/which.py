"""The one line naming the run a command that writes acts on: its id, label and origin (issue 33).

A label or an id prefix can name a run the user did not mean (one that came from another clone, its
label set by whoever wrote its record), so ``apply``, ``undo``, ``drop`` and ``resume --continue``
say which run they act on (id, label, origin) whenever it was named so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sandbox.cli import escape

if TYPE_CHECKING:
    from sandbox.run.run import Run


def made_here(run: Run) -> bool:
    """True when this clone started the run (its first event is this clone's: :mod:`sandbox.store.provenance`)."""
    events = run.events_read()
    return bool(events) and events[0][1].own()


def describe(run: Run) -> str:
    """``RUN (label 'x', made here)``: the run's id, label and origin."""
    from sandbox.agent.transcripts import origin

    label = run.info.label
    named = f"label {escape.text(repr(label))}" if label else "no label"
    return f"{run.run_id} ({named}, {'made here' if made_here(run) else origin(run)})"


def say_which(run: Run, given: str | None) -> None:
    """Name the run on stderr when it was named by a label or an id prefix (its whole id, or none,
    names it already; ``list`` and ``status`` say where it came from)."""
    if given in (None, run.run_id):
        return
    click.echo(f"sandbox: acting on run {describe(run)}.", err=True)
