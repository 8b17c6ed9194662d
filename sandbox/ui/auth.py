"""Who may use the page: a capability held by the page's own script, never an ambient cookie.

The session token authorizes a request only in the ``X-Sandbox-Token`` header, which only a script of
the page's own origin can set (another origin's request with a custom header needs a CORS preflight
this server never grants). No cookie is ever set: cookies ignore ports, so any other server on
127.0.0.1 (an agent's dev server) would receive it, and a form on another port could ride on it.

How the page gets the token:

- ``sandbox ui`` prints ``http://127.0.0.1:PORT/#token=T``: a fragment never leaves the browser. A
  navigation (which cannot carry a header) gets :func:`shell`, a page with no data whose script
  (``static/boot.js``) moves the token from the fragment into the tab's ``sessionStorage`` once,
  removes it from the address, and fetches the real page with the header.
- The browser the CLI opens gets ``/?code=C`` instead: C is a one-time code (a command line is
  readable by every local user in ``/proc``), exchanged once for a redirect to ``/#token=T`` and
  worthless after that (:meth:`Codes.redeem`).

Every answer forbids framing (``X-Frame-Options: DENY``, CSP ``frame-ancestors 'none'``) and loads
nothing but the page's own files (``default-src 'self'``). An action (``POST``) is refused when the
browser says it comes from another site (``Sec-Fetch-Site``) or origin, even with the token.
Requests naming another host are refused (DNS rebinding). The token lives only in this process and in
the tab: nothing is written to disk, so a confined agent cannot read it.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

HEADER = "x-sandbox-token"
#: Every answer's policy: no frames, no inline script or style, nothing from elsewhere.
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; object-src 'none'"
)
#: What a browser may say about an action's origin (absent: not a browser; the token still decides).
SAME_SITE = (None, "same-origin")


@dataclass
class Codes:
    """One-time codes that open the page in a browser (see the module docstring)."""

    _live: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self) -> str:
        """A new code, good for one exchange."""
        code = secrets.token_urlsafe(18)
        with self._lock:
            self._live.add(code)
        return code

    def redeem(self, code: str) -> bool:
        """True the first time ``code`` is given (and never again)."""
        with self._lock:
            for live in self._live:
                if hmac.compare_digest(live.encode(), code.encode()):
                    self._live.discard(live)
                    return True
        return False


def protect(response: Response) -> Response:
    """The headers every answer carries."""
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


def shell() -> str:
    """The page a navigation gets: no data, only the script that fetches the page with the token."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>sandbox</title>"
        "<link rel='stylesheet' href='/static/vendor/a11y-light.min.css'>"
        "<link rel='stylesheet' href='/static/ui.css'></head>"
        "<body><main><p class='muted' id='boot-note'>Loading...</p></main>"
        "<script src='/static/boot.js'></script></body></html>"
    )


class Guard(BaseHTTPMiddleware):
    """The host, token and origin checks in front of every route (see the module docstring)."""

    def __init__(self, app: Any, settings: Any) -> None:
        super().__init__(app)
        #: A :class:`sandbox.ui.server.Settings` (its ``origins``, ``allows`` and ``codes``).
        self.settings = settings

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Refuse, answer with the shell or the code's redirect, or pass the request on."""
        return protect(await self._decide(request, call_next))

    async def _decide(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        s = self.settings
        host = request.headers.get("host", "")
        if host not in (o.split("//", 1)[1] for o in s.origins):
            return PlainTextResponse("This page answers only on 127.0.0.1.", status_code=400)
        path = request.url.path
        if request.method in ("GET", "HEAD"):
            if path.startswith("/static/"):  # the page's own code: no data in it
                return await call_next(request)
            code = request.query_params.get("code")
            if code is not None and path == "/":
                if not s.codes.redeem(code):
                    return PlainTextResponse(
                        "This one-time address was used already: open the address 'sandbox ui' printed "
                        "(if you did not open it, someone else did: stop the page with Ctrl-C).",
                        status_code=403,
                    )
                return RedirectResponse(f"/#token={s.token}", status_code=303)
            if s.allows(request.headers.get(HEADER)):
                return await call_next(request)
            if request.headers.get("sec-fetch-mode") == "navigate" and not path.startswith("/api/"):
                return HTMLResponse(shell())
            return unauthorized()
        if not s.allows(request.headers.get(HEADER)):
            return unauthorized()
        origin = request.headers.get("origin")
        if origin is not None and origin not in s.origins:
            return PlainTextResponse("Cross-site requests are refused.", status_code=403)
        if request.headers.get("sec-fetch-site") not in SAME_SITE:
            return PlainTextResponse("Cross-site requests are refused.", status_code=403)
        return await call_next(request)


def unauthorized() -> Response:
    """The answer to a request without the token."""
    return PlainTextResponse(
        "This page needs the token in the address 'sandbox ui' printed; open that address.", status_code=401
    )
