"""``sandbox log --call ID``: one call whole (its command, input, full error and the tails of its
output), for :mod:`sandbox.cli.log`."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

import click

from sandbox.cli import escape
from sandbox.cli.fmt import duration, local_time
from sandbox.cli.jsonout import dump, emit_json
from sandbox.cli.output import STATUS_COLORS, Output

if TYPE_CHECKING:
    from sandbox.models import LedgerEntry
    from sandbox.run.output import StreamTail
    from sandbox.run.run import Run


def show_call(run: Run, given: str, as_json: bool, patch: bool, out: Output) -> None:
    """One call whole: tool, status, local times, duration, command, input, files, the full error, the
    tails of its output (:mod:`sandbox.run.output`)."""
    from sandbox.run import output
    from sandbox.run.names import resolve_call

    entry = resolve_call(run, given)
    error = run.error_text(entry)
    streams = output.read(run, entry)
    if as_json:
        data = dump(entry)
        assert isinstance(data, dict)
        data["error_text"] = error
        data["output"] = {
            name: {**tail, "text": raw.decode("utf-8", "backslashreplace")} for name, (tail, raw) in streams.items()
        }
        emit_json(data)
        return
    out.page()
    status = entry.status.value
    click.echo(f"call:    {out.style(escape.text(entry.call_id), fg='yellow')} (#{entry.seq})")
    click.echo(f"tool:    {escape.text(entry.tool_name)}")
    click.echo(f"status:  {out.style(status, fg=STATUS_COLORS.get(status))}")
    if entry.approval is not None:
        reason = f" ({escape.text(entry.denial_reason)})" if entry.denial_reason else ""
        click.echo(f"answer:  {entry.approval.value}{reason}")
    for label, when in (("started", entry.started_at), ("ended", entry.finished_at)):
        if when is not None:
            click.echo(f"{label + ':':<9}{local_time(when)}")
    took = duration(entry.started_at, entry.finished_at)
    if took:
        from sandbox.agent.adapters import gemini

        untimed = entry.call_id.startswith(gemini.CALL_PREFIX) and entry.started_at == entry.created_at
        click.echo(f"took:    {took}" + (f" ({gemini.UNTIMED})" if untimed else ""))
    if entry.started_at is not None and (entry.started_at - entry.created_at).total_seconds() >= 0.5:
        click.echo(f"waited:  {duration(entry.created_at, entry.started_at)} at the agent's permission prompt")
    command = _full_command(entry.input)
    if command:
        click.echo("command: " + "\n         ".join(escape.lines(command) or [""]))
    if entry.summary:
        click.echo(f"summary: {escape.text(entry.summary)}")
    if entry.input is not None:
        click.echo("input:   " + "\n         ".join(escape.lines(_json(entry.input))))
    if entry.commit:
        click.echo(f"commit:  {out.style(entry.commit, fg='yellow')}")
    for f in entry.files:
        click.echo(f"file:    {escape.path(f.path)}")
    note = nested_note(entry.result)
    if note:
        click.echo(f"note:    {note}")
    if error:
        click.echo(out.style("error:", fg="red"))
        for line in escape.lines(error) or [escape.text(error)]:
            click.echo(f"  {line}")
    for name, (tail, raw) in streams.items():
        if tail["bytes"]:
            _stream(name, tail, raw, out)
    if patch and entry.commit and entry.parent_commit:
        patch_of(run, entry, out)


def nested_note(result: Any) -> str | None:
    """One escaped sentence naming the directories left out as repositories of their own, or None."""
    from sandbox.run.calls import nested_repositories

    found = nested_repositories(result)
    if not found:
        return None
    shown = ", ".join(escape.path(p + "/") for p in found)
    one = len(found) == 1
    return (
        f"{shown} {'holds a git repository' if one else 'hold git repositories'} of {'its' if one else 'their'} own "
        f"(a .git), so nothing in {'it' if one else 'them'} was recorded; remove that .git (or add it as a "
        "submodule in your repository) to record the files."
    )


def _stream(name: str, tail: StreamTail, raw: bytes, out: Output) -> None:
    """One stream's tail, each line escaped (a test's output may hold terminal escapes)."""
    from sandbox.run.output import cut_note

    said = "stdout and stderr" if name == "output" else name
    click.echo(out.style(f"{said}: ({tail['bytes']} bytes)", fg="cyan"))
    note = cut_note(tail)
    if note:
        click.echo(f"  {note}")
    text = raw.decode("utf-8", "surrogateescape")
    for line in escape.lines(text.removesuffix("\n")):
        click.echo(f"  {line}")


def _full_command(inputs: Any) -> str:
    if isinstance(inputs, dict):
        argv = inputs.get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            return shlex.join(argv)
        command = inputs.get("command")
        if isinstance(command, str):
            return command
    return ""


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else json.dumps(value, ensure_ascii=False, indent=2)


def patch_of(run: Run, e: LedgerEntry, out: Output) -> None:
    """The call's patch (parent..commit), after a blank line."""
    from sandbox.merge.preview import Range, diff_text

    assert e.commit and e.parent_commit
    text = diff_text(run, Range(e.parent_commit, e.commit, e.call_id), color=out.color)
    click.echo()
    click.echo(out.content(text), nl=not text.endswith("\n"))
