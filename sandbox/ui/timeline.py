"""The call timeline of ``sandbox ui``: each call, and under it what the confinement recorded about it.

A call's row says its tool, command, status, duration and files; the rows under it say what went
wrong: its error, a denial, an uncertain end (the call started and its end was never recorded: it
may or may not have run, and ``sandbox resume`` decides), and each connection the run's network
allowlist refused while it ran (``note`` events with a :class:`sandbox.models.NetworkRefusal`,
read through :func:`sandbox.fast.views.network_refusals`, as ``sandbox log`` reads them).

What happened outside any call (a refusal between calls, refusals past the recorder's limit, an
outage of the repository's host, processes an agent left running that were stopped) is a row of
its own at the point in time it happened, between the calls. Everything shown is escaped: it was
written by the agent or names what it asked for.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from sandbox.fast import views
from sandbox.models import LedgerEntry, LedgerState
from sandbox.run.run import Run
from sandbox.ui import names, recovery
from sandbox.ui.evidence import output_src
from sandbox.ui.recovery import Rewind, Rewinds, moment

STATUS_CLASS = {
    "succeeded": "ok",
    "failed": "bad",
    "uncertain": "warn",
    "started": "warn",
    "planned": "info",
    "approved": "info",
    "not_run": "muted",
    "interrupted": "warn",
    "violation": "bad",
}
COLUMNS = 8
RELAUNCHED = (
    "<span class='badge info'>relaunched</span> <code>sandbox run</code> started the agent again here (for itself, or "
    "for <code>resume --continue</code> or <code>rewind --continue</code>)"
)


def when(value: Any) -> str:
    """A time as the user's local time (the ledger stores UTC)."""
    found = moment(value)
    return "" if found is None else str(found.astimezone().strftime("%Y-%m-%d %H:%M:%S %z"))


def took(entry: LedgerEntry) -> str:
    """How long the call ran ("" while it runs or when never started), and apart from it the wait at
    the agent's permission prompt before the tool started (as ``sandbox log`` shows it)."""
    if not entry.started_at or not entry.finished_at:
        return ""
    ran = _seconds((entry.finished_at - entry.started_at).total_seconds())
    asked, began = moment(entry.created_at), moment(entry.started_at)
    waited = (began - asked).total_seconds() if asked is not None and began is not None else 0.0
    return ran + (f" <span class='waited'>(+{_seconds(waited)} at the agent's prompt)</span>" if waited >= 0.5 else "")


def _seconds(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def command(entry: LedgerEntry) -> str:
    """What the call ran, whole (the page wraps it): an argv quoted for the shell, a command, a path."""
    inputs = entry.input
    if isinstance(inputs, dict):
        argv = inputs.get("argv")
        if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
            return shlex.join(argv)
        for key in ("command", "path", "file_path"):
            value = inputs.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return entry.summary or ""


# -- what the confinement and the host recorded ------------------------------------------------------


def events(
    notes: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, list[str]], list[tuple[datetime.datetime | None, str]]]:
    """The run's notes as timeline rows: (per call id, the rows under that call; the rows of no
    call, with their time). Each row is HTML."""
    by_call: dict[str, list[str]] = {}
    loose: list[tuple[datetime.datetime | None, str]] = []
    for item in views.network_refusals(notes):
        where = escape(f"{item['host']}:{item['port']}")
        how = f" ({escape(str(item['method']))})" if item.get("method") and item["method"] != "CONNECT" else ""
        text = (
            f"<span class='badge bad'>refused</span> network <code>{where}</code>{how} at {escape(when(item['at']))}"
            " (not in the run's network allowlist)"
        )
        if item["call_id"]:
            by_call.setdefault(item["call_id"], []).append(text)
        else:
            session = f" during agent session {escape(str(item['session']))}" if item.get("session") else ""
            loose.append((moment(item["at"]), text + f", outside any call{session}"))
    for note in notes:
        at = moment(note.get("at"))
        dropped = note.get("network_refused_unrecorded")
        if isinstance(dropped, int) and dropped > 0:
            session = f" of agent session {escape(str(note['session']))}" if note.get("session") else ""
            loose.append(
                (
                    at,
                    f"<span class='badge bad'>refused</span> {dropped} more network connection(s){session}: "
                    "past the first refusals of a session they are counted, not recorded one by one",
                )
            )
        outage = note.get("host_outage")
        if isinstance(outage, dict):
            pid = escape(str(outage.get("previous_pid", "?")))
            since = escape(when(outage.get("previous_started_at")))
            back = escape(when(outage.get("restarted_at") or note.get("at")))
            loose.append(
                (
                    at,
                    f"<span class='badge warn'>host outage</span> the repository's host (pid {pid}, up since "
                    f"{since}) had died; hooks recorded in their own processes until it was restarted at {back}",
                )
            )
        stopped = note.get("stopped_processes")
        if isinstance(stopped, list) and stopped:
            exit_code = note.get("agent_exit")
            said = f" (the agent exited {escape(str(exit_code))})" if exit_code is not None else ""
            loose.append(
                (
                    at,
                    f"<span class='badge warn'>stopped</span> {len(stopped)} process(es) the agent left running "
                    f"were stopped{said}",
                )
            )
    return by_call, loose


def _detail(kind: str, html: str) -> str:
    return f"<tr class='detail {kind}'><td></td><td colspan='{COLUMNS - 1}'>{html}</td></tr>"


def changed_nothing(e: LedgerEntry) -> bool:
    """Whether a call changed nothing: no file, and not still running (a started call may yet change
    files; a live update would otherwise say it changed nothing until its finish arrived). The header's
    count and the page's filter both ask this."""
    return not e.files and e.status.value != "started"


def timeline(run: Run) -> str:
    """The calls in ledger order: tool, command, status, duration, files, errors, denials, uncertain
    ends, and what the confinement refused, each under the call it belongs to; each rewind where it
    was made, and, when the agent was relaunched or forked, each call's agent session."""
    state = run.state()
    entries = [state.calls[c] for c in state.order]
    by_call, loose = events(list(state.data.note))
    rewound = recovery.rewinds(run, state)
    if not entries and not loose and not rewound.items:
        return "<p class='muted'>No calls yet.</p>"
    sessions = recovery.short_sessions(entries)
    rows = [(at, "event", html) for at, html in loose]
    rows += [(item.at, "event rewind", _rewind(run, item, rewound, sessions)) for item in rewound.items]
    rows += [(at, "event session", RELAUNCHED) for at in recovery.relaunches(state.data.note)]
    out = [
        "<table class='calls timeline'><thead><tr><th>#</th><th class='opt'>call</th><th>status</th><th>tool</th>"
        "<th class='opt'>started</th><th class='opt'>took</th><th>command</th><th>files</th></tr></thead><tbody>"
    ]
    # Rows of no call go where they happened: before the first call started after them.
    last = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    pending = sorted(rows, key=lambda item: item[0] or last)
    session = None
    for e in entries:
        started = e.started_at or e.created_at
        started = started if started.tzinfo is not None else started.replace(tzinfo=datetime.timezone.utc)
        while pending and pending[0][0] is not None and pending[0][0] < started:
            _at, kind, html = pending.pop(0)
            out.append(_detail(kind, html))
        if sessions and e.agent_session:
            if session is not None and e.agent_session != session:
                out.append(_detail("event session", _relaunched(e.agent_session, session, sessions, rewound, state)))
            session = e.agent_session
        out.append(_call(run, e, by_call.pop(e.call_id, []), rewound.by_call.get(e.call_id), sessions))
    for refusals in by_call.values():  # refusals naming a call the ledger does not list (a fetched run's)
        out.extend(_detail("refusal", row) for row in refusals)
    out.extend(_detail(kind, html) for _, kind, html in pending)
    out.append("</tbody></table>")
    return "".join(out)


def _short(session: str | None, sessions: dict[str, str]) -> str:
    """A session's short id (its whole id on hover)."""
    whole = session or ""
    return f"<code title='{escape(whole, quote=True)}'>{escape(sessions.get(whole, whole[: recovery.SHORT]))}</code>"


def _seq(state: LedgerState, call_id: str) -> str:
    """A call as the page names it: its log number and id."""
    entry = state.calls.get(call_id)
    number = f"#{entry.seq} " if entry is not None else ""
    return f"{number}<code>{escape(call_id)}</code>"


def _rewind(run: Run, item: Rewind, found: Rewinds, sessions: dict[str, str]) -> str:
    """A rewind's row: when, to which call, what it took out, the conversation, and what came of it since."""
    state = run.state()
    rid = shlex.quote(run.run_id)
    parts = [
        f"<span class='badge warn'>rewind</span> at {escape(when(item.at))} the run's files went back to just before "
        f"call {_seq(state, item.to)} (<code>sandbox rewind</code>, or the MCP tool <code>rewind</code>)"
    ]
    if item.took:
        shown = ", ".join(_seq(state, c) for c in item.took[:10])
        more = f" and {len(item.took) - 10} more" if len(item.took) > 10 else ""
        held = f"; after it the run's files no longer held the changes of {len(item.took)} call(s): "
        parts.append(held + shown + more)
    if item.session is not None:
        parts.append(
            f". The conversation was forked just before that call as agent session {_short(item.session, sessions)}"
            + (f" (session {_short(item.from_session, sessions)} is left as it was)" if item.from_session else "")
        )
    else:
        parts.append(". Only the files went back: no conversation was forked")
    if item.side_effects:
        effects = ", ".join(_seq(state, c) for c in item.side_effects[:10])
        parts.append(f". Calls from that point on that may have acted outside the files, not undone by it: {effects}")
    for then in item.then:
        said = "taken back by an undo" if then.op == "undo" else "rewound again by a redo"
        parts.append(f". {said.capitalize()} at {escape(when(then.at))}")
    parts.append(".")
    if item is found.items[-1] and found.next_op is not None:
        does = "takes it back" if found.next_op == "undo" else "rewinds again"
        parts.append(f" <code class='next'>sandbox {found.next_op} {escape(rid)}</code> {does}.")
    return "".join(parts)


def _relaunched(now: str, before: str, sessions: dict[str, str], found: Rewinds, state: LedgerState) -> str:
    """The row where the agent's calls go on in another session: which, and why as far as the ledger says."""
    why = "another session of the agent"
    for item in reversed(found.items):
        if item.session == now:
            why = f"the conversation the rewind to before call {_seq(state, item.to)} forked"
            break
        if item.from_session == now and item.taken_back:
            why = f"the conversation from before the rewind to before call {_seq(state, item.to)} (taken back)"
            break
    return (
        f"<span class='badge info'>session</span> the agent's calls from here ran in session {_short(now, sessions)} "
        f"(before: {_short(before, sessions)}): {why}"
    )


def _call(run: Run, e: LedgerEntry, refused: list[str], rewound: Rewind | None, sessions: dict[str, str]) -> str:
    cid = escape(e.call_id)
    status = e.status.value
    marks = []
    if e.applied:
        marks.append("<span class='badge ok'>applied</span>")
    if e.undone:
        marks.append("<span class='badge muted'>undone</span>")
    if e.rolled_back:  # as 'sandbox log' marks it: out of the run, so neither diff nor apply brings it
        by = f" by the rewind to before #{_number(run, rewound.to)}" if rewound is not None else ""
        marks.append(f"<span class='badge muted'>rolled back{by}</span>")
    if e.approval is not None and e.approval.value == "denied":
        marks.append(f"<span class='badge bad'>denied: {escape(e.denial_reason or 'no reason')}</span>")
    files = " ".join(names.name(f.path) for f in e.files[:6]) + (f" +{len(e.files) - 6}" if len(e.files) > 6 else "")
    session = ""
    if sessions and e.agent_session:  # the agent was relaunched or forked: which session ran this call
        session = f" <span class='session'>session {_short(e.agent_session, sessions)}</span>"
    diff_src = f"/run/{quote(run.run_id)}/call/{quote(e.call_id)}/diff" if e.commit else ""
    row = [
        f"<tr class='call {escape(status)}{' out' if e.rolled_back else ''}' id='call-{cid}' tabindex='0' "
        f"data-call='{cid}' "
        f"data-diff='{escape(diff_src, quote=True)}' data-output='{escape(output_src(run, e), quote=True)}'>"
        f"<td title='{cid}'>{e.seq}</td><td class='opt'><code>{cid}</code></td>"
        f"<td><span class='badge {STATUS_CLASS.get(status, '')}'>{escape(status)}</span> {''.join(marks)}</td>"
        f"<td>{names.text(e.tool_name)}{session}</td><td class='opt'>{escape(when(e.started_at or e.created_at))}</td>"
        f"<td class='opt'>{took(e)}</td>"
        f"<td class='cmd'><code>{names.command(command(e))}</code></td><td class='files'>{files}</td></tr>"
    ]
    if status == "uncertain":
        row.append(
            _detail(
                "uncertain",
                "<span class='badge warn'>uncertain</span> this call started and its end was never recorded: it may "
                "or may not have run (see Resume below; <code>sandbox resume</code> decides what to do with it)",
            )
        )
    if status in ("interrupted", "violation"):  # the evidence in the CLI's words ('sandbox log' shows it)
        row.append(
            _detail(status, f"<span class='badge {STATUS_CLASS[status]}'>{status}</span> {escape(e.error or '')}")
        )
    row.extend(_detail("refusal", text) for text in refused)
    if e.error and status not in ("interrupted", "violation"):
        row.append(_detail("bad", f"error: {escape(e.error)}"))
    row.append(f"<tr class='calldiff' hidden data-for='{cid}'><td colspan='{COLUMNS}'></td></tr>")
    if changed_nothing(e):  # the page's filter hides its rows together
        return "".join(row).replace("<tr class='", "<tr class='nofiles ")
    return "".join(row)


def _number(run: Run, call_id: str) -> str:
    entry = run.state().calls.get(call_id)
    return str(entry.seq) if entry is not None else escape(call_id)
