"""The web application of ``sandbox ui``: its routes, the token guard, and the actions.

The guard (:class:`sandbox.ui.auth.Guard`) lets a request through only with the page's token in a
header its own script sends (the page is a capability held by the tab, never a cookie); see
:mod:`sandbox.ui.auth`.

Every read opens the run afresh (a ``Run`` per request: pygit2 objects are not shared between the
server's threads); every write takes one lock and calls the library function the CLI calls
(``mergeback.apply``, ``undo``/``redo``, ``Run.approve``/``deny``), so a refusal reads in the CLI's
words and the ledger records the action as the CLI's would be.
"""

from __future__ import annotations

import hmac
import html
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sandbox.errors import SandboxError
from sandbox.run.run import Run
from sandbox.store.project import Project
from sandbox.ui import diffs, pages, timeline
from sandbox.ui.auth import Codes, Guard

STATIC = os.path.join(os.path.dirname(__file__), "static")


class ActionAnswer(TypedDict, total=False):
    """What an action (``POST /api/run/RUN/ACTION``) answers, besides the run id."""

    ok: bool
    message: str
    #: The apply, preview, undo or redo report as JSON (its model's ``model_dump``).
    report: dict[str, object]
    call_id: str
    #: A comment's id (``comment``).
    comment: str


@dataclass
class Settings:
    """What the CLI hands the application: the repository, the token, the port it listens on."""

    project: Project
    token: str
    port: int
    #: Runs named on the command line (their ids); empty: every run of the repository.
    runs: tuple[str, ...] = ()
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    #: One-time codes that open the page in a browser (the token never goes on a command line).
    codes: Codes = field(default_factory=Codes)

    @property
    def origins(self) -> tuple[str, ...]:
        """The page's own origins."""
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    def allows(self, given: str | None) -> bool:
        """True when ``given`` is the token (compared in constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


class _Routes:
    """The application's routes over ``settings``: one method per route (bound methods are
    request-response endpoints for Starlette)."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings

    def open_run(self, request: Request) -> Run:
        """The run the request's path names, opened afresh (pygit2 objects are not shared between threads)."""
        run_id = request.path_params["run_id"]
        if run_id not in self.s.project.run_ids():
            raise SandboxError(f"No run {run_id!r} in this repository.")
        return Run.open(self.s.project, run_id)

    def runs(self, request: Request) -> Response:
        from sandbox.fast.views import STATUS_DISK_ENTRIES
        from sandbox.runs.summary import summarize_runs

        s = self.s
        # Bounded per run, as 'sandbox list' counts: a sum of every file on every load grows with the runs.
        rows = summarize_runs(s.project, disk=True, disk_limit=STATUS_DISK_ENTRIES)
        rows = [r for r in rows if not s.runs or r["run"] in s.runs]
        return HTMLResponse(pages.runs_page(rows, _tips(s)))

    def run_page(self, request: Request) -> Response:
        run = self.open_run(request)
        return HTMLResponse(pages.run_page(run))

    def calls(self, request: Request) -> Response:
        return HTMLResponse(timeline.timeline(self.open_run(request)))

    def run_diff(self, request: Request) -> Response:
        run = self.open_run(request)
        q = request.query_params
        try:
            sel = diffs.Selection.parse(q.get("paths"), q.get("calls"))
        except SandboxError as exc:  # the CLI's words, in the diff's place
            return HTMLResponse(f"<p class='refused' role='alert'>{html.escape(exc.message)}</p>")
        page = _int(q.get("page"), 0)
        side, ws = q.get("view") == "split", q.get("ws") == "ignore"
        return HTMLResponse(diffs.run_diff(run, page, side_by_side=side, sel=sel, ignore_ws=ws))

    def call_diff(self, request: Request) -> Response:
        run = self.open_run(request)
        side = request.query_params.get("view") == "split"
        return HTMLResponse(diffs.call_diff(run, request.path_params["call_id"], side_by_side=side))

    def facts(self, request: Request) -> Response:
        return HTMLResponse(pages.facts_html(self.open_run(request)))

    def comments(self, request: Request) -> Response:
        return HTMLResponse(pages.comments_html(self.open_run(request)))

    def call_output(self, request: Request) -> Response:
        from sandbox.ui.evidence import output_html

        return HTMLResponse(output_html(self.open_run(request), request.path_params["call_id"]))

    def file_rest(self, request: Request) -> Response:
        run = self.open_run(request)
        q = request.query_params
        try:
            sel = diffs.Selection.parse(q.get("paths"), q.get("calls"))
        except SandboxError as exc:
            return HTMLResponse(f"<p class='refused'>{html.escape(exc.message)}</p>")
        start, ws = _int(q.get("from"), 0), q.get("ws") == "ignore"
        return HTMLResponse(diffs.file_rest(run, q.get("path", ""), start, sel, ignore_ws=ws))

    def image(self, request: Request) -> Response:
        from sandbox.ui.images import image

        q = request.query_params
        found = image(self.open_run(request), q.get("path", ""), q.get("side", ""), q.get("call") or None)
        if found is None:
            return Response("No such image in this run's changes.", status_code=404, media_type="text/plain")
        data, kind = found
        return Response(data, media_type=kind, headers={"X-Content-Type-Options": "nosniff"})

    def conflicts(self, request: Request) -> Response:
        from sandbox.ui.conflictview import conflicts

        return HTMLResponse(conflicts(self.open_run(request)))

    def compare(self, request: Request) -> Response:
        from sandbox.runs.many import group_of

        s = self.s
        ids = [r for r in request.query_params.getlist("run") if r in s.project.run_ids()]
        if len(ids) == 1:
            ids = group_of(s.project, Run.open(s.project, ids[0]))
        if len(ids) < 2:
            raise SandboxError("Name two or more runs to compare (or one run of a 'start --count' group).")
        return HTMLResponse(pages.compare_page([Run.open(s.project, i) for i in dict.fromkeys(ids)]))

    def approvals(self, request: Request) -> Response:
        s = self.s
        ids = [r for r in s.project.run_ids() if not s.runs or r in s.runs]
        return HTMLResponse(pages.approvals_page([Run.open(s.project, i) for i in ids]))

    def tips(self, request: Request) -> Response:
        return JSONResponse(_tips(self.s))

    async def action(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        run_id = request.path_params["run_id"]
        name = request.path_params["action"]

        def act() -> tuple[int, ActionAnswer]:
            with self.s.write_lock:
                run = self.open_run(request)
                return _act(run, name, body)

        from starlette.concurrency import run_in_threadpool

        answer: ActionAnswer
        try:
            status, answer = await run_in_threadpool(act)
        except SandboxError as exc:
            status, answer = 409, {"ok": False, "message": exc.message}
        return JSONResponse({"run": run_id, **answer}, status_code=status)


async def _sandbox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SandboxError)
    return HTMLResponse(pages.error_page(exc.message), status_code=404)


def build(settings: Settings) -> Starlette:
    """The application for ``settings`` (served by uvicorn on 127.0.0.1 by the CLI)."""
    r = _Routes(settings)
    routes = [
        Route("/", r.runs),
        Route("/run/{run_id}", r.run_page),
        Route("/run/{run_id}/timeline", r.calls),
        Route("/run/{run_id}/diff", r.run_diff),
        Route("/run/{run_id}/call/{call_id}/diff", r.call_diff),
        Route("/run/{run_id}/call/{call_id}/output", r.call_output),
        Route("/run/{run_id}/comments", r.comments),
        Route("/run/{run_id}/facts", r.facts),
        Route("/run/{run_id}/file", r.file_rest),
        Route("/run/{run_id}/conflicts", r.conflicts),
        Route("/run/{run_id}/image", r.image),
        Route("/compare", r.compare),
        Route("/approvals", r.approvals),
        Route("/api/tips", r.tips),
        Route("/api/run/{run_id}/{action}", r.action, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={SandboxError: _sandbox_error},
    )


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text or default))
    except ValueError:
        return default


def _tips(s: Settings) -> dict[str, str | None]:
    """Each shown run's ledger tip: the page reloads what changed (a live agent's calls)."""
    out: dict[str, str | None] = {}
    for run_id in s.project.run_ids():
        if s.runs and run_id not in s.runs:
            continue
        try:
            out[run_id] = Run.open(s.project, run_id).ledger_tip()
        except SandboxError:
            out[run_id] = None
    return out


def _act(run: Run, name: str, body: Mapping[str, object]) -> tuple[int, ActionAnswer]:
    """One action, as the CLI does it; (HTTP status, answer)."""
    from sandbox.merge import mergeback

    if name in ("apply", "preview"):
        from sandbox.merge import hunks

        # The page's selection as the CLI takes it: 'apply PATHSPEC... --call A..B --hunks-from F'.
        ids = body.get("hunks")
        choice = hunks.Choice(ids={str(i) for i in ids}) if isinstance(ids, list) and ids else None
        sel = diffs.Selection.of(body)
        merge = body.get("three_way") is True  # 'apply --3way': markers where both changed the same lines
        try:
            report = mergeback.apply(
                run, sel.calls or None, sel.spec(), dry_run=name == "preview", choice=choice, three_way=merge
            )
        except mergeback.ApplyConflict as exc:
            from sandbox.ui.conflictview import page_hint

            said = page_hint(exc.message, "PATH")
            return 409, {"ok": False, "message": said, "report": _page_hints(_dump(exc.report))}
        return 200, {"ok": True, "report": _dump(report), "message": _said(report)}
    if name in ("undo", "redo"):
        from sandbox.merge import undo

        moved = _rewind_moved(run, name)
        if moved is not None:
            return 200, moved
        report = (undo.undo if name == "undo" else undo.redo)(run)
        return 200, {"ok": True, "report": _dump(report), "message": _said(report)}
    if name == "comment":
        from sandbox.run import comments

        line = body.get("line")
        made = comments.add(
            run,
            str(body.get("path") or ""),
            line if isinstance(line, int) and not isinstance(line, bool) else None,
            str(body.get("text") or ""),
        )
        said = f"Comment {made.id} on {made.where} recorded; 'sandbox resume {run.run_id} --continue' hands it on."
        return 200, {"ok": True, "message": said, "comment": made.id}
    if name in ("approve", "deny"):
        from sandbox.run.names import resolve_call

        call_id = resolve_call(run, str(body.get("call_id") or "")).call_id
        if name == "approve":
            entry = run.approve(call_id)
        else:
            reason = body.get("reason")
            entry = run.deny(call_id, str(reason) if reason else None)
        return 200, {"ok": True, "call_id": entry.call_id, "message": f"Call {entry.call_id}: {name}d."}
    return 404, {"ok": False, "message": f"No action {name!r}."}


def _page_hints(report: dict[str, object]) -> dict[str, object]:
    """A refused apply's report with each conflict's hint in the page's own actions (not the CLI's flags)."""
    from sandbox.ui.conflictview import page_hint

    found = report.get("conflicts")
    for c in found if isinstance(found, list) else []:
        for key in ("hint", "reason"):
            if isinstance(c, dict) and isinstance(c.get(key), str):
                c[key] = page_hint(c[key], str(c.get("path", "")))
    return report


def _rewind_moved(run: Run, name: str) -> ActionAnswer | None:
    """Right after a rewind (or its undo), undo (redo) is about the rewind, as 'sandbox undo' ('redo') does it."""
    from sandbox.recovery import rewind_undo

    moved = rewind_undo.undo_report(run, name)
    if moved is None:
        return None
    report, message = moved
    return {"ok": True, "report": _dump(report), "message": message}


def _dump(report: BaseModel) -> dict[str, object]:
    """A report as JSON data (the CLI's ``--json`` of the same action)."""
    return report.model_dump(mode="json")


def _said(report: Any) -> str:
    """One line in the CLI's words for what an apply, undo or redo did."""
    verb = {"apply": "Applied", "undo": "Undid", "redo": "Redid"}.get(report.op, "Wrote")
    if report.dry_run:
        would = report.would_apply
        return f"Would write {len(would)} path(s): {', '.join(would) or 'none'}."
    written = report.applied or report.restored
    if not written:
        return "Nothing to do."
    return f"{verb}: {len(written)} path(s) in your tree ({', '.join(written)})."
