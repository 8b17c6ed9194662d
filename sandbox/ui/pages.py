"""The HTML of ``sandbox ui``, rendered on the server (no build step, no framework in the browser).

Everything the agent wrote (paths, commands, errors, labels, file contents) is escaped with
:func:`html.escape` before it reaches the page: it could otherwise run script in the user's browser.
Big diffs are cut into pages of :data:`FILES_PER_PAGE` files, and a file's patch into pieces of
:data:`LINES_PER_FILE` lines loaded on demand, so a 10,000-line diff never renders at once.
"""

from __future__ import annotations

import datetime
import json
import shlex
from html import escape
from typing import Any
from urllib.parse import quote

from sandbox.errors import SandboxError
from sandbox.models import LedgerEntry
from sandbox.run.run import Run

FILES_PER_PAGE = 40
LINES_PER_FILE = 1500
STATUS_CLASS = {
    "succeeded": "ok",
    "failed": "bad",
    "uncertain": "warn",
    "started": "warn",
    "planned": "info",
    "approved": "info",
    "not_run": "muted",
}


def _page(title: str, body: str, token: str, data: dict[str, Any] | None = None) -> str:
    """A whole page: the token in a meta tag (the script sends it with each action)."""
    boot = escape(json.dumps(data or {}), quote=True)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<meta name='sandbox-token' content='{escape(token, quote=True)}'>"
        f"<title>{escape(title)} · sandbox</title>"
        "<link rel='stylesheet' href='/static/ui.css'></head>"
        f"<body data-boot='{boot}'><header><a class='home' href='/'>sandbox</a>"
        "<nav><a href='/'>runs</a><a href='/approvals'>approvals</a></nav>"
        "<span class='keys'>j/k calls · enter diff · a apply · u undo · ? keys</span></header>"
        f"<main>{body}</main><div id='toast' role='status' aria-live='polite'></div>"
        "<script src='/static/ui.js'></script></body></html>"
    )


def error_page(message: str) -> str:
    """A refusal in the CLI's words."""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><link rel='stylesheet' href='/static/ui.css'></head>"
        f"<body><main><p class='refused'>{escape(message)}</p><p><a href='/'>All runs</a></p></main></body></html>"
    )


def _when(value: Any) -> str:
    if not value:
        return ""
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return str(value.astimezone().strftime("%Y-%m-%d %H:%M:%S %z"))


def _took(entry: LedgerEntry) -> str:
    if not entry.started_at or not entry.finished_at:
        return ""
    seconds = (entry.finished_at - entry.started_at).total_seconds()
    return f"{seconds:.2f}s" if seconds < 60 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


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


# -- the runs -------------------------------------------------------------------------------------


def runs_page(rows: list[dict[str, Any]], token: str, tips: dict[str, str | None]) -> str:
    """Every run: label, state, calls, changed paths, disk, isolation, what is applied."""
    if not rows:
        return _page("runs", "<h1>Runs</h1><p>No runs. Start one with <code>sandbox start</code>.</p>", token)
    body = ["<h1>Runs</h1><form action='/compare' method='get' id='compare-form'>"]
    body.append(
        "<table class='runs'><thead><tr><th></th><th>run</th><th>label</th><th>created</th><th>calls</th>"
        "<th>by status</th><th>changed</th><th>not applied</th><th>disk</th></tr></thead><tbody>"
    )
    for r in rows:
        rid = escape(r["run"])
        statuses = " ".join(
            f"<span class='badge {STATUS_CLASS.get(k, '')}'>{v} {escape(k)}</span>"
            for k, v in sorted((r.get("by_status") or {}).items())
        )
        partly = r.get("partly_applied_calls") or []
        applied = f"{r.get('unapplied_calls', 0)}" + (f" ({len(partly)} partly)" if partly else "")
        body.append(
            f"<tr class='run-row'><td><input type='checkbox' name='run' value='{rid}' aria-label='compare {rid}'></td>"
            f"<td><a href='/run/{quote(r['run'])}'>{rid}</a></td><td>{escape(r.get('label') or '')}</td>"
            f"<td>{escape(_when(r.get('created_at')))}</td><td>{r.get('calls', 0)}</td><td>{statuses}</td>"
            f"<td>{r.get('changed_paths', 0)}</td><td>{escape(applied)}</td>"
            f"<td>{_size(r.get('disk_bytes') or 0)}</td></tr>"
        )
    body.append("</tbody></table><button type='submit'>Compare the checked runs</button></form>")
    return _page("runs", "".join(body), token, {"page": "runs", "tips": tips})


# -- one run --------------------------------------------------------------------------------------


def run_page(run: Run, token: str) -> str:
    """One run: its summary, the call timeline, the whole diff with hunk picking, conflicts, resume."""
    from sandbox.run.summary import summarize

    row = summarize(run)
    rid = escape(run.run_id)
    label = f" <span class='label'>{escape(row['label'])}</span>" if row.get("label") else ""
    statuses = ", ".join(f"{v} {escape(k)}" for k, v in sorted((row.get("by_status") or {}).items())) or "none"
    body = [
        f"<h1>Run {rid}{label}</h1>",
        f"<p class='facts'>created {escape(_when(row.get('created_at')))} · calls: {row['calls']} ({statuses}) · "
        f"{row['changed_paths']} changed path(s) · {row['unapplied_calls']} call(s) not applied · "
        f"worktree <code>{escape(row.get('worktree') or 'none here')}</code></p>",
        "<div class='actions'><button data-action='preview'>Preview apply of the picked hunks</button>"
        "<button data-action='apply' class='primary'>Apply the picked hunks</button>"
        "<button data-action='apply-all'>Apply everything</button>"
        "<button data-action='undo'>Undo</button><button data-action='redo'>Redo</button>"
        "<label><input type='checkbox' id='split'> side by side</label></div>",
        "<div id='result' class='result' aria-live='polite'></div>",
        "<section><h2>Calls</h2><div id='timeline'>",
        timeline(run),
        "</div></section>",
        "<section><h2>Resume</h2>",
        _resume(run),
        "</section>",
        "<section><h2>Changes</h2><div id='diff' data-src='/run/" + quote(run.run_id) + "/diff'>",
        run_diff(run, 0),
        "</div></section>",
        "<section><h2>Conflicts</h2><div id='conflicts' data-src='/run/"
        + quote(run.run_id)
        + "/conflicts'><p class='muted'>Loading...</p></div></section>",
    ]
    return _page(f"run {run.run_id}", "".join(body), token, {"page": "run", "run": run.run_id, "tip": run.ledger_tip()})


def timeline(run: Run) -> str:
    """The calls in ledger order: tool, command, status, duration, files, errors and denials."""
    entries = run.entries()
    if not entries:
        return "<p class='muted'>No calls yet.</p>"
    out = [
        "<table class='calls'><thead><tr><th>#</th><th>call</th><th>status</th><th>tool</th><th>started</th>"
        "<th>took</th><th>command</th><th>files</th></tr></thead><tbody>"
    ]
    for e in entries:
        cid = escape(e.call_id)
        status = e.status.value
        marks = []
        if e.applied:
            marks.append("<span class='badge ok'>applied</span>")
        if e.undone:
            marks.append("<span class='badge muted'>undone</span>")
        if e.approval is not None and e.approval.value == "denied":
            marks.append(f"<span class='badge bad'>denied: {escape(e.denial_reason or 'no reason')}</span>")
        files = " ".join(f"<code>{escape(f.path)}</code>" for f in e.files[:6]) + (
            f" +{len(e.files) - 6}" if len(e.files) > 6 else ""
        )
        diff_src = f"/run/{quote(run.run_id)}/call/{quote(e.call_id)}/diff" if e.commit else ""
        out.append(
            f"<tr class='call' tabindex='0' data-call='{cid}' data-diff='{escape(diff_src, quote=True)}'>"
            f"<td>{e.seq}</td><td><code>{cid}</code></td>"
            f"<td><span class='badge {STATUS_CLASS.get(status, '')}'>{escape(status)}</span> {''.join(marks)}</td>"
            f"<td>{escape(e.tool_name)}</td><td>{escape(_when(e.started_at or e.created_at))}</td><td>{_took(e)}</td>"
            f"<td class='cmd'><code>{escape(command(e))}</code></td><td>{files}</td></tr>"
        )
        if e.error:
            out.append(f"<tr class='detail bad'><td></td><td colspan='7'>error: {escape(e.error)}</td></tr>")
        out.append(f"<tr class='calldiff' hidden data-for='{cid}'><td colspan='8'></td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _resume(run: Run) -> str:
    """What a resume would do with the calls still in flight (the classification, nothing acted on)."""
    from sandbox.recovery.resume import classify

    open_calls = [e for e in run.entries() if e.status.value in ("started", "uncertain")]
    if not open_calls:
        return "<p class='muted'>No call is in flight or uncertain: a resume has nothing to decide.</p>"
    rows = []
    for e in open_calls:
        decision = classify(e)
        rows.append(
            f"<li><code>{escape(e.call_id)}</code> {escape(e.tool_name)} <code>{escape(command(e))}</code>: "
            f"{escape(str(getattr(decision, 'value', decision)))}</li>"
        )
    return "<ul class='resume'>" + "".join(rows) + "</ul><p>Run <code>sandbox resume</code> to act on it.</p>"


# -- diffs ----------------------------------------------------------------------------------------


def run_diff(run: Run, page: int, side_by_side: bool = False) -> str:
    """The run's whole diff (what an apply would bring), one page of files, each hunk pickable."""
    from sandbox.merge.preview import diff_files, preview_range

    files = diff_files(run, preview_range(run))
    return _files(run, files, page, pick=True, side_by_side=side_by_side)


def call_diff(run: Run, call_id: str, side_by_side: bool = False) -> str:
    """One call's diff (its commit against its parent)."""
    from sandbox.merge.preview import diff_files, preview_range

    try:
        files = diff_files(run, preview_range(run, call_id=call_id))
    except SandboxError as exc:
        return f"<p class='muted'>{escape(exc.message)}</p>"
    return _files(run, files, 0, pick=False, side_by_side=side_by_side, per_page=len(files) or 1)


def _files(
    run: Run,
    files: list[dict[str, Any]],
    page: int,
    *,
    pick: bool,
    side_by_side: bool,
    per_page: int = FILES_PER_PAGE,
) -> str:
    if not files:
        return "<p class='muted'>No changes.</p>"
    pages = (len(files) + per_page - 1) // per_page
    page = min(page, pages - 1)
    out = []
    if pages > 1:
        links = " ".join(
            f"<a href='#' data-page='{i}' class='{'current' if i == page else ''}'>{i + 1}</a>" for i in range(pages)
        )
        out.append(f"<nav class='pages'>{len(files)} files · page {links}</nav>")
    for f in files[page * per_page : (page + 1) * per_page]:
        out.append(_file(run, f, pick, side_by_side))
    return "".join(out)


def _file(run: Run, f: dict[str, Any], pick: bool, side_by_side: bool) -> str:
    path = escape(f["path"])
    mode = ""
    if f["before_mode"] and f["after_mode"] and f["before_mode"] != f["after_mode"]:
        mode = f" mode {f['before_mode']} → {f['after_mode']}"
    head = (
        f"<div class='file' data-path='{escape(f['path'], quote=True)}'><h3>"
        + (f"<input type='checkbox' class='pick-file' aria-label='all hunks of {path}'> " if pick else "")
        + f"<span class='fstatus {escape(f['status'])}'>{escape(f['status'])}</span> "
        + f"<code>{path}</code>{escape(mode)}</h3>"
    )
    if f["binary"]:
        return head + "<p class='muted'>Binary file: not shown.</p></div>"
    body = []
    shown = 0
    for h in f["hunks"]:
        lines = h["text"].splitlines()
        if shown >= LINES_PER_FILE:
            body.append(_more(run, f["path"], shown))
            break
        cut = len(lines) > LINES_PER_FILE - shown + 1
        if cut:  # one huge hunk (a rewritten file): its start now, the rest on demand
            lines = lines[: LINES_PER_FILE - shown + 1]
        shown += len(lines)
        hunk_id = escape(h["id"], quote=True)
        box = f"<input type='checkbox' class='pick' data-hunk='{hunk_id}' aria-label='hunk {escape(h['header'])}'> "
        box = box if pick else ""
        body.append(f"<div class='hunk'><div class='hhead'>{box}<code>{escape(h['header'])}</code></div>")
        body.append(_split(lines[1:]) if side_by_side else _unified(lines[1:]))
        body.append("</div>")
        if cut:
            body.append(_more(run, f["path"], shown))
            break
    if not f["hunks"]:
        body.append("<p class='muted'>No text change (mode or type only).</p>")
    return head + "".join(body) + "</div>"


def _more(run: Run, path: str, start: int) -> str:
    more = f"/run/{quote(run.run_id)}/file?path={quote(path)}&from={start}"
    return (
        f"<p><a href='#' class='more' data-src='{escape(more, quote=True)}'>Show the rest of this file's diff</a></p>"
    )


def _unified(lines: list[str]) -> str:
    out = ["<pre class='diff'>"]
    for line in lines:
        kind = "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
        out.append(f"<span class='{kind}'>{escape(line) or ' '}</span>")
    out.append("</pre>")
    return "".join(out)


def _split(lines: list[str]) -> str:
    """Side by side: context on both sides, a run of removals paired with the additions after it."""
    rows: list[tuple[str, str, str, str]] = []
    dels: list[str] = []
    adds: list[str] = []

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            left = dels[i] if i < len(dels) else ""
            right = adds[i] if i < len(adds) else ""
            rows.append(("del" if left else "none", left[1:], "add" if right else "none", right[1:]))
        dels.clear()
        adds.clear()

    for line in lines:
        if line.startswith("-"):
            if adds:
                flush()
            dels.append(line)
        elif line.startswith("+"):
            adds.append(line)
        else:
            flush()
            rows.append(("ctx", line[1:], "ctx", line[1:]))
    flush()
    cells = "".join(
        f"<tr><td class='{lk}'>{escape(lt)}</td><td class='{rk}'>{escape(rt)}</td></tr>" for lk, lt, rk, rt in rows
    )
    return f"<table class='split'>{cells}</table>"


def file_rest(run: Run, path: str, start: int) -> str:
    """The rest of one file's diff, from line ``start`` (a big file's patch comes in pieces)."""
    from sandbox.merge.preview import diff_files, preview_range

    files = [f for f in diff_files(run, preview_range(run)) if f["path"] == path]
    if not files:
        return "<p class='muted'>No such changed file.</p>"
    lines = [line for h in files[0]["hunks"] for line in h["text"].splitlines()]
    piece = lines[start : start + LINES_PER_FILE]
    out = _unified(piece)
    if start + LINES_PER_FILE < len(lines):
        more = f"/run/{quote(run.run_id)}/file?path={quote(path)}&from={start + LINES_PER_FILE}"
        out += f"<p><a href='#' class='more' data-src='{escape(more, quote=True)}'>Show more</a></p>"
    return out


def conflicts(run: Run) -> str:
    """For each path an apply would refuse: why, what to do, and base / agent / yours."""
    from sandbox.merge.conflicts import explain
    from sandbox.merge.mergeback import NothingToApplyError

    try:
        found = explain(run)
    except NothingToApplyError:
        return "<p class='muted'>Nothing left to apply.</p>"
    if not found:
        return "<p class='muted'>No conflicts: everything would apply.</p>"
    out = []
    for c in found:
        sides = " · ".join(f"{s.label}: {escape(s.describe())}" for s in (c.base, c.agent, c.yours))
        regions = "".join(_unified(r.lines) for r in c.regions)
        out.append(
            f"<div class='conflict'><h3><code>{escape(c.path)}</code></h3><p class='refused'>{escape(c.reason)}</p>"
            f"<p>what to do: {escape(c.hint)}</p><p class='muted'>{sides}</p>{regions}</div>"
        )
    return "".join(out)


# -- best of N and approvals ------------------------------------------------------------------------


def compare_page(runs: list[Run], token: str) -> str:
    """Runs side by side: compare's table, check results, and the paths where they disagree."""
    from sandbox.run.compare import compare

    result = compare(runs)
    out = ["<h1>Compare</h1>"]
    if not result.same_base:
        out.append("<p class='warn'>These runs started from different snapshots.</p>")
    out.append(
        "<table class='runs'><thead><tr><th>run</th><th>label</th><th>calls</th><th>failed</th><th>files</th>"
        "<th>+lines</th><th>-lines</th><th>check</th></tr></thead><tbody>"
    )
    for row in result.runs:
        check = "-" if row.check is None else f"{row.check.status} ({row.check.returncode})"
        out.append(
            f"<tr><td><a href='/run/{quote(row.run_id)}'>{escape(row.run_id)}</a></td>"
            f"<td>{escape(row.label or '')}</td>"
            f"<td>{row.calls}</td><td>{row.failed}</td><td>{row.files}</td><td class='addn'>+{row.added}</td>"
            f"<td class='deln'>-{row.removed}</td><td>{escape(check)}</td></tr>"
        )
    out.append("</tbody></table>")
    out.append(f"<h2>{len(result.agree)} path(s) changed the same way; {len(result.disagree)} differ</h2><ul>")
    for path, states in sorted(result.disagree.items()):
        each = ", ".join(f"{escape(rid)} {escape(st)}" for rid, st in states.items())
        out.append(f"<li><code>{escape(path)}</code>: {each}</li>")
    out.append("</ul>")
    return _page("compare", "".join(out), token)


def approvals_page(runs: list[Run], token: str) -> str:
    """Calls waiting for an answer (planned), and calls the agent did not run, with approve / deny."""
    out = ["<h1>Approvals</h1>"]
    pending = [(run, e) for run in runs for e in run.entries() if e.status.value == "planned"]
    if not pending:
        out.append("<p class='muted'>No call is waiting for an answer.</p>")
    else:
        out.append(
            "<table class='calls'><thead><tr><th>run</th><th>call</th><th>tool</th><th>command</th><th></th>"
            "</tr></thead><tbody>"
        )
        for run, e in pending:
            cid = escape(e.call_id, quote=True)
            rid = escape(run.run_id, quote=True)
            out.append(
                f"<tr><td><a href='/run/{quote(run.run_id)}'>{escape(run.run_id)}</a></td>"
                f"<td><code>{escape(e.call_id)}</code></td><td>{escape(e.tool_name)}</td>"
                f"<td class='cmd'><code>{escape(command(e))}</code></td>"
                f"<td><button data-action='approve' data-run='{rid}' data-call='{cid}' class='primary'>"
                "Approve</button> "
                f"<button data-action='deny' data-run='{rid}' data-call='{cid}'>Deny</button></td></tr>"
            )
        out.append("</tbody></table>")
    return _page("approvals", "".join(out), token, {"page": "approvals"})
