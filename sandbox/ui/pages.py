"""The HTML of ``sandbox ui``, rendered on the server (no build step, no framework in the browser).

Everything the agent wrote (paths, commands, errors, labels, file contents) is escaped with
:func:`html.escape` before it reaches the page: it could otherwise run script in the user's browser.
The call timeline is :mod:`sandbox.ui.timeline`, the diffs :mod:`sandbox.ui.diffs`.
"""

from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import quote

from sandbox.run.run import Run
from sandbox.store.fsutil import human_size
from sandbox.ui import names
from sandbox.ui.diffs import run_diff
from sandbox.ui.timeline import STATUS_CLASS, changed_nothing, command, timeline, when

if TYPE_CHECKING:
    from sandbox.fast.foldjson import RunRowJson


class Boot(TypedDict, total=False):
    """What a page hands its script (``data-boot``): which page it is, and the ledger tips it watches."""

    page: str
    run: str
    tip: str | None
    tips: dict[str, str | None]


def _page(title: str, body: str, data: Boot | None = None) -> str:
    """A whole page, as the shell's script fetches it with the token (:mod:`sandbox.ui.auth`): no token in it."""
    boot = escape(json.dumps(data or {}), quote=True)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)} · sandbox</title>"
        "<link rel='stylesheet' href='/static/vendor/a11y-light.min.css'>"
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


# -- the runs -------------------------------------------------------------------------------------


def runs_page(rows: list[RunRowJson], tips: dict[str, str | None]) -> str:
    """Every run: label, state, calls, changed paths, disk, isolation, what is applied."""
    if not rows:
        return _page("runs", "<h1>Runs</h1><p>No runs. Start one with <code>sandbox start</code>.</p>")
    body = ["<h1>Runs</h1><form action='/compare' method='get' id='compare-form'>"]
    body.append(
        "<table class='runs'><thead><tr><th></th><th>run</th><th>label</th><th class='opt'>created</th><th>calls</th>"
        "<th>by status</th><th>changed</th><th>not applied</th><th class='opt'>disk</th></tr></thead><tbody>"
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
            f"<td><a href='/run/{quote(r['run'])}'>{rid}</a></td><td>{names.text(r.get('label') or '')}</td>"
            f"<td class='opt'>{escape(when(r.get('created_at')))}</td><td>{r.get('calls', 0)}</td><td>{statuses}</td>"
            f"<td>{r.get('changed_paths', 0)}</td><td>{escape(applied)}</td>"
            f"<td class='opt'>{_disk(r)}</td></tr>"
        )
    body.append("</tbody></table><button type='submit'>Compare the checked runs</button></form>")
    return _page("runs", "".join(body), {"page": "runs", "tips": tips})


def _disk(row: RunRowJson) -> str:
    """A run's disk use for the runs page: "more than" it when the count stopped at its bound."""
    size = human_size(row.get("disk_bytes") or 0)
    if row.get("disk_complete", True):
        return size
    return f"<span title='the first files counted; sandbox list --disk counts them all'>more than {size}</span>"


# -- one run --------------------------------------------------------------------------------------


def run_page(run: Run) -> str:
    """One run: its summary, the call timeline, the whole diff with hunk picking, conflicts, resume."""
    from sandbox.runs.summary import summarize

    row = summarize(run)
    rid = escape(run.run_id)
    named = row.get("label")
    label = f" <span class='label'>{names.text(named)}</span>" if named else ""
    body = [
        f"<h1>Run {rid}{label}</h1>",
        _facts(run, row),
        _markers(row.get("conflict_markers") or []),
        "<div class='actions'><button data-action='preview'>Preview</button>"
        "<button data-action='apply' class='primary'>Apply the picked hunks</button>"
        "<button data-action='apply-all'>Apply all shown</button>"
        "<button data-action='apply-3way'>Apply with 3-way merge</button>"
        "<button data-action='undo'>Undo</button><button data-action='redo'>Redo</button>"
        "<label><input type='checkbox' id='split'> side by side</label>"
        "<label><input type='checkbox' id='ignore-ws'> ignore whitespace</label></div>",
        "<div id='result' class='result' aria-live='polite'></div>",
        _calls_section(run),
        "<section><h2>Comments</h2><div id='comments'>",
        comments_html(run),
        "</div></section>",
        "<section><h2>Resume</h2>",
        _resume(run),
        "</section>",
        "<section><h2>Changes</h2>",
        _pick_form(),
        "<div id='diff' data-src='/run/" + quote(run.run_id) + "/diff'>",
        run_diff(run, 0),
        "</div></section>",
        "<section><h2>Conflicts</h2><div id='conflicts' data-src='/run/"
        + quote(run.run_id)
        + "/conflicts'><p class='muted'>Loading...</p></div></section>",
    ]
    return _page(f"run {run.run_id}", "".join(body), {"page": "run", "run": run.run_id, "tip": run.ledger_tip()})


def _facts(run: Run, row: RunRowJson) -> str:
    statuses = ", ".join(f"{v} {escape(k)}" for k, v in sorted((row.get("by_status") or {}).items())) or "none"
    return (
        f"<p class='facts'>created {escape(when(row.get('created_at')))} · calls: {row['calls']} ({statuses}) · "
        f"{row['changed_paths']} changed path(s) · {row['unapplied_calls']} call(s) not applied · {_refused(run)}"
        f"worktree <code>{escape(row.get('worktree') or 'none here')}</code></p>"
    )


def facts_html(run: Run) -> str:
    """The run page's header facts and the calls' count, for a live update in place."""
    from sandbox.runs.summary import summarize

    return _facts(run, summarize(run)) + _calls_count(run)


def _calls_count(run: Run) -> str:
    """The calls, and how many changed nothing (:func:`~sandbox.ui.timeline.changed_nothing`)."""
    state = run.state()
    empty = sum(1 for c in state.order if changed_nothing(state.calls[c]))
    return f"<span class='muted' id='calls-count'>({len(state.order)}; {empty} changed nothing)</span>"


#: Above this many calls the Calls section starts collapsed: the changes are what a reviewer came for.
OPEN_CALLS = 50


def _calls_section(run: Run) -> str:
    """The timeline in a collapsible section, with the filter that hides calls that changed nothing."""
    total = len(run.state().order)
    return (
        f"<section><details id='calls'{' open' if total <= OPEN_CALLS else ''}>"
        f"<summary><h2>Calls {_calls_count(run)}</h2></summary>"
        "<label class='filter'><input type='checkbox' id='hide-empty'> hide the calls that changed nothing</label>"
        f"<div id='timeline'>{timeline(run)}</div></details></section>"
    )


def comments_html(run: Run) -> str:
    """The run's review comments (``sandbox comments``): where, what, and whether the agent got them."""
    from sandbox.run import comments

    found = comments.listed(run)
    if not found:
        return (
            "<p class='muted'>No comments. Click a line number in the changes below to leave one; "
            f"<code>sandbox resume {escape(run.run_id)} --continue</code> hands them to the agent.</p>"
        )
    rows = []
    for c in found:
        went = "not sent yet" if c.sent_at is None else f"sent to {c.sent_agent or 'the agent'}"
        if c.sent_at is not None:
            went += f" session {c.sent_session}" if c.sent_session else " (a new session)"
        rows.append(
            f"<li class='comment' data-comment='{escape(c.id, quote=True)}'><code>{escape(c.where)}</code> "
            f"<span class='badge {'muted' if c.sent_at else 'warn'}'>{escape(went)}</span> {escape(c.text)}</li>"
        )
    return "<ul class='comments'>" + "".join(rows) + "</ul>"


def _refused(run: Run) -> str:
    """How many connections the run's network allowlist refused (each is in the timeline), or ""."""
    from sandbox.fast.views import network_refusals

    count = len(network_refusals(run.state().data.note))
    return f"<span class='bad'>{count} network refusal(s)</span> · " if count else ""


def _pick_form() -> str:
    """The selection boxes: git pathspecs and calls, as ``sandbox apply PATHSPEC... --call ...`` takes them."""
    return (
        "<form id='pick' class='pick' autocomplete='off'>"
        "<label>paths <input id='pick-paths' name='paths' spellcheck='false' "
        "placeholder=\"git pathspecs: src/ '*.py' ':!tests'\"></label>"
        "<label>calls <input id='pick-calls' name='calls' spellcheck='false' "
        "placeholder='ids, log numbers, ranges 2..5'></label>"
        "<button type='submit'>Show</button><button type='button' id='pick-clear'>All changes</button>"
        "<span class='muted'>Preview and Apply take what is shown: the picked hunks, or all of it.</span></form>"
    )


def _resume(run: Run) -> str:
    """What a resume would do with the calls still in flight (the classification, nothing acted on),
    and the commands that go on from here (:func:`sandbox.ui.recovery.next_steps`): text to copy."""
    from sandbox.recovery.resumereport import classify
    from sandbox.ui.recovery import next_steps

    state = run.state()
    open_calls = [state.calls[c] for c in state.order if state.calls[c].status.value in ("started", "uncertain")]
    steps = next_steps(run, state)
    if not open_calls and not steps:
        return "<p class='muted'>No call is in flight or uncertain: a resume has nothing to decide.</p>"
    rows = []
    for e in open_calls:
        decision = classify(e)
        rows.append(
            f"<li><code>{escape(e.call_id)}</code> {names.text(e.tool_name)} <code>{names.text(command(e))}</code>: "
            f"{escape(str(getattr(decision, 'value', decision)))}</li>"
        )
    out = ["<ul class='resume'>" + "".join(rows) + "</ul>" if rows else ""]
    if steps:
        out.append("<p class='muted'>Commands to copy into your terminal (this page does not run them):</p>")
    for step in steps:
        about = f" data-call='{escape(step.call_id, quote=True)}'" if step.call_id else ""
        commands = "".join(
            f"<pre class='command'><code>{names.command(c, safe=True)}</code></pre>" for c in step.commands
        )
        out.append(f"<div class='next-step'{about}><p>{escape(step.text)}</p>{commands}</div>")
    return "".join(out)


# -- best of N and approvals ------------------------------------------------------------------------


def compare_page(runs: list[Run]) -> str:
    """Runs side by side: compare's table, each run's check result (``compare --check``, a recorded
    call of tool ``check``), a link to each run, and the paths where they disagree."""
    from sandbox.runs.compare import compare

    found = {run.run_id: _last_check(run) for run in runs}
    checks = {rid: c[0] for rid, c in found.items() if c is not None and c[0] is not None}
    result = compare(runs, checks)
    out = ["<h1>Compare</h1>"]
    if not result.same_base:
        out.append("<p class='warn'>These runs started from different snapshots.</p>")
    out.append(
        "<div class='wide'><table class='runs compare'><thead><tr><th>run</th><th>label</th><th>calls</th>"
        "<th>failed</th><th>files</th><th>+lines</th><th>-lines</th><th>check</th></tr></thead><tbody>"
    )
    for row in result.runs:
        link = f"/run/{quote(row.run_id)}"
        failed = f"{row.failed}" + (f" +{row.uncertain} uncertain" if row.uncertain else "")
        check = _check_cell(row.run_id, found[row.run_id])
        out.append(
            f"<tr><td><a href='{link}'>{escape(row.run_id)}</a></td><td>{names.text(row.label or '')}</td>"
            f"<td>{row.calls}</td><td>{escape(failed)}</td><td>{row.files}</td><td class='addn'>+{row.added}</td>"
            f"<td class='deln'>-{row.removed}</td><td class='check'>{check}</td></tr>"
        )
    out.append("</tbody></table></div>")
    if not any(found.values()):
        out.append(
            "<p class='muted'>No check recorded: <code>sandbox compare RUN... --check 'CMD'</code> runs CMD in each "
            "run and records it as a call; its results show here.</p>"
        )
    out.append(f"<h2>{len(result.agree)} path(s) changed the same way; {len(result.disagree)} differ</h2><ul>")
    for path, states in sorted(result.disagree.items()):
        each = ", ".join(f"{escape(rid)} {escape(st)}" for rid, st in states.items())
        out.append(f"<li><code>{escape(path)}</code>: {each}</li>")
    out.append("</ul>")
    return _page("compare", "".join(out))


def _last_check(run: Run) -> tuple[Any, Any] | None:
    """The run's newest ``check`` call: (its outcome when it ended with an exit code, its entry)."""
    from sandbox.runs.compare import CheckOutcome

    checks = [e for e in run.entries() if e.tool_name == "check"]
    if not checks:
        return None
    e = checks[-1]
    code = e.result.get("exit_code") if isinstance(e.result, dict) else None
    outcome = CheckOutcome(e.call_id, code, e.status.value) if isinstance(code, int) else None
    return outcome, e


def _check_cell(run_id: str, found: tuple[Any, Any] | None) -> str:
    if found is None:
        return "<span class='muted'>-</span>"
    outcome, e = found
    status = e.status.value
    klass = "ok" if outcome is not None and outcome.returncode == 0 else STATUS_CLASS.get(status, "")
    said = f"exit {outcome.returncode}" if outcome is not None else status
    argv = e.input.get("argv") if isinstance(e.input, dict) else None
    # compare --check runs its command through sh -c: show the command as the user gave it.
    given = isinstance(argv, list) and len(argv) == 3 and argv[:2] == ["sh", "-c"] and isinstance(argv[2], str)
    cmd = argv[2] if given and isinstance(argv, list) else command(e)
    link = f"/run/{quote(run_id)}#call-{quote(e.call_id)}"
    return (
        f"<span class='badge {klass}'>{escape(said)}</span> <code>{escape(cmd)}</code> "
        f"<a href='{escape(link, quote=True)}' title='the check call'>{escape(e.call_id)}</a>"
    )


def approvals_page(runs: list[Run]) -> str:
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
                f"<td><code>{escape(e.call_id)}</code></td><td>{names.text(e.tool_name)}</td>"
                f"<td class='cmd'><code>{names.command(command(e))}</code></td>"
                f"<td><button data-action='approve' data-run='{rid}' data-call='{cid}' class='primary'>"
                "Approve</button> "
                f"<button data-action='deny' data-run='{rid}' data-call='{cid}'>Deny</button></td></tr>"
            )
        out.append("</tbody></table>")
    return _page("approvals", "".join(out), {"page": "approvals"})


def _markers(paths: list[str]) -> str:
    """The files where 'apply --3way' left conflict markers to resolve (as 'sandbox status' says)."""
    if not paths:
        return ""
    shown = ", ".join(f"<code>{escape(p)}</code>" for p in paths)
    return f"<p class='refused attention'>Conflict markers from a 3-way apply to resolve in your tree: {shown}</p>"
