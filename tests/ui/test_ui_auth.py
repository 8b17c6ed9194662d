"""The page is a capability, not a cookie (issue #34, item 10).

A second local origin (another 127.0.0.1 port, as an agent's dev server would be) tries the cookie, a
frame and a forged action in a real browser: all refused. The browser is opened with a one-time code,
never the token; no answer sets a cookie; actions check ``Sec-Fetch-Site``.
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.run.run import Run
from tests import cliserver
from tests.conftest import scaled, tree_digest
from tests.ui.test_ui import CHROMIUM, _goto, _served
from tests.ui.test_ui import agent_run as agent_run_fixture

agent_run = agent_run_fixture  # the review test's run: two edited files and a planned call
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


def _answer(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    data = b'{"hunks": []}' if method == "POST" else None
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status), {k.lower(): v for k, v in answer.headers.items()}, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def test_every_answer_forbids_frames_and_sets_no_cookie_and_actions_check_the_fetch_site(
    agent_run: Run, repo: Path
) -> None:
    original = tree_digest(repo)
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        token = url.split("#token=", 1)[1]
        with_token = {"X-Sandbox-Token": token}
        for path, headers in (("/", with_token), (f"/run/{agent_run.run_id}", with_token), ("/", {})):
            status, got, _body = _answer(base + path, headers=headers)
            assert got["x-frame-options"] == "DENY", path
            csp = got["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, csp
            assert "set-cookie" not in got
        # A navigation without the token gets the shell: the page's script, and no data of any run.
        status, got, body = _answer(base + f"/run/{agent_run.run_id}", headers={"Sec-Fetch-Mode": "navigate"})
        assert status == 200 and "/static/boot.js" in body and agent_run.run_id not in body and token not in body
        # An action with the token that the browser says comes from another site: refused, nothing written.
        apply = base + f"/api/run/{agent_run.run_id}/apply"
        for site in ("same-site", "cross-site", "none"):
            forged = {**with_token, "Content-Type": "application/json", "Sec-Fetch-Site": site}
            assert _answer(apply, "POST", forged)[0] == 403, site
        assert tree_digest(repo) == original
        ok = {**with_token, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}
        assert _answer(base + f"/api/run/{agent_run.run_id}/preview", "POST", ok)[0] == 200


def test_the_browser_gets_a_one_time_code_never_the_token(agent_run: Run, repo: Path, tmp_path: Path) -> None:
    argv_file = tmp_path / "browser-argv.json"
    browser = tmp_path / "browser.py"
    # Written whole (a temporary file renamed): the test reads it as soon as it exists.
    record = (
        f"import json, os, pathlib, sys\npathlib.Path({str(argv_file)!r} + '.tmp').write_text(json.dumps(sys.argv))\n"
        f"os.replace({str(argv_file)!r} + '.tmp', {str(argv_file)!r})\n"
    )
    browser.write_text(f"#!{sys.executable}\n{record}")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "BROWSER": f"{browser} %s"}
    proc = cliserver.popen("ui", "--json", cwd=repo, env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        token = url.split("#token=", 1)[1]
        deadline = time.monotonic() + scaled(20)
        while not argv_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        argv = json.loads(argv_file.read_text())
        assert token not in " ".join(argv)  # the token is never on a command line
        opened = argv[-1]
        assert "?code=" in opened
        status, got, _body = _answer(opened)
        assert status == 303 and got["location"] == f"/#token={token}"  # exchanged once, in the answer
        status, got, body = _answer(opened)
        assert status == 403 and token not in body and "used already" in body  # worthless once used
        assert _answer(opened.split("?code=")[0] + "?code=guessed")[0] == 403
    finally:
        proc.terminate()
        proc.wait(timeout=15)


class _Other(http.server.BaseHTTPRequestHandler):
    """Another local origin (an agent's dev server): serves the attacks, and notes every cookie it gets."""

    pages: dict[str, str] = {}
    cookies: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.cookies.append(self.headers.get("Cookie", ""))
        body = self.pages.get(self.path.split("?", 1)[0], "ok").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        pass


@pytest.fixture
def other_origin() -> Iterator[tuple[str, type[_Other]]]:
    handler = type("Other", (_Other,), {"pages": {}, "cookies": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@needs_chromium
def test_a_second_local_origin_gets_no_cookie_no_frame_and_no_action(
    agent_run: Run, repo: Path, other_origin: tuple[str, type[_Other]]
) -> None:
    from playwright.sync_api import sync_playwright

    other, handler = other_origin
    original = tree_digest(repo)
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        run_page = f"{base}/run/{agent_run.run_id}"
        apply = f"{base}/api/run/{agent_run.run_id}/apply"
        handler.pages["/frame.html"] = f"<iframe id='f' src='{run_page}' width='800' height='600'></iframe>"
        handler.pages["/forge.html"] = (
            "<form id='f' method='POST' enctype='text/plain' action='" + apply + "'>"
            "<input name='{\"x\":\"' value='\"}'></form><script>"
            "window.tried = [];"
            f"fetch('{apply}', {{method: 'POST', mode: 'no-cors', credentials: 'include', body: '{{}}'}})"
            ".then(() => tried.push('no-cors sent'), e => tried.push('no-cors ' + e));"
            f"fetch('{apply}', {{method: 'POST', credentials: 'include',"
            " headers: {'Content-Type': 'application/json'}, body: '{}'})"
            ".then(r => tried.push('cors ' + r.status), e => tried.push('cors refused'));"
            "setTimeout(() => document.getElementById('f').submit(), 300);</script>"
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            context = browser.new_context()  # one profile: the user's tab and the other origin's share it
            page = context.new_page()
            page.set_default_timeout(scaled(10) * 1000)
            _goto(page, run_page + "#token=" + url.split("#token=", 1)[1])  # the user's own tab, in use
            assert agent_run.run_id in page.inner_text("h1")
            assert page.evaluate("document.cookie") == "" and page.context.cookies() == []
            # The other origin, in the same browser: no cookie reaches it (cookies ignore ports).
            attacker = context.new_page()
            attacker.goto(other + "/cookie")
            assert handler.cookies and not any(handler.cookies), handler.cookies
            # A frame of the page: the browser refuses to show it (frame-ancestors 'none', DENY).
            attacker.goto(other + "/frame.html")
            attacker.wait_for_timeout(1000)
            framed = attacker.frames[1]
            assert framed.url.startswith("chrome-error://") or agent_run.run_id not in framed.content()
            # Forged actions: a form post, a no-cors fetch, a CORS fetch: none gets through.
            attacker.goto(other + "/forge.html")
            attacker.wait_for_url(apply, timeout=10_000)
            assert "needs the token" in attacker.inner_text("body")
            browser.close()
    assert tree_digest(repo) == original
