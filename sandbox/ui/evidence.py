"""A call's output on the page: the tails of the streams its command wrote (:mod:`sandbox.run.output`).

Loaded when the call is opened (a 500-call page does not carry them). Every byte is the command's: it
is shown escaped twice over, control, bidi and zero-width characters as visible escapes
(:func:`sandbox.run.output.shown`), then HTML-escaped.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from sandbox.models import LedgerEntry
from sandbox.run import output
from sandbox.run.run import Run

_SAID = {"stdout": "stdout", "stderr": "stderr", "output": "stdout and stderr"}


def output_src(run: Run, e: LedgerEntry) -> str:
    """The address of the call's output, or "" when none was kept (or the call wrote nothing)."""
    if not any(t["bytes"] for t in output.tails(e.result).values()):
        return ""
    return f"/run/{quote(run.run_id)}/call/{quote(e.call_id)}/output"


def output_html(run: Run, call_id: str) -> str:
    """Each stream's tail of the call, escaped, with how much of it was kept."""
    from sandbox.run.names import resolve_call

    entry = resolve_call(run, call_id)
    out = []
    for name, (tail, raw) in output.read(run, entry).items():
        if not tail["bytes"]:
            continue
        note = output.cut_note(tail)
        cut = f"<p class='muted'>{escape(note)}</p>" if note else ""
        out.append(
            f"<div class='output' data-stream='{name}'><h4>{_SAID.get(name, name)} "
            f"<span class='muted'>({tail['bytes']} bytes)</span></h4>{cut}"
            f"<pre class='output'>{escape(output.shown(raw))}</pre></div>"
        )
    return "".join(out) or "<p class='muted'>No output was kept for this call.</p>"
