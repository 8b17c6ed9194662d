"""``sandbox ui`` in a real browser: Debian's chromium driven by Playwright (no browser download).

The page is served by the real ``sandbox ui`` process; the test picks two hunks, applies them and
checks the user's tree byte for byte, undoes, approves a planned call, sees a refused apply in the
CLI's words, and checks that nothing is served without the token or to another origin.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.run.run import Run
from tests.conftest import tree_digest, user_state
from tests.test_apply import start

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BEFORE_A = "".join(f"line {i}\n" for i in range(1, 41))
BEFORE_B = "alpha\nbeta\ngamma\n"


def _served(repo: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [str(exe), "ui", "--no-browser", "--json", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode() if proc.stderr else ""
    url = json.loads(line)["url"]
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def agent_run(repo: Path) -> Run:
    (repo / "src" / "a.txt").write_text(BEFORE_A)
    (repo / "src" / "b.txt").write_text(BEFORE_B)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "files"], cwd=repo, check=True)
    run = start(repo)
    after_a = BEFORE_A.replace("line 2\n", "line 2 (agent)\n").replace("line 35\n", "line 35 (agent)\n")
    with run.tool_call("edit_file", {"path": "src/a.txt"}) as call:
        call.write("src/a.txt", after_a)
    with run.tool_call("edit_file", {"path": "src/b.txt"}) as call:
        call.write("src/b.txt", "alpha\nBETA\ngamma\n")
    run.plan_call("deploy", {"env": "staging"})
    return run


def _status(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        url, method=method, headers=headers or {}, data=b"{}" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_without_the_token_every_request_is_401_and_other_origins_403(agent_run: Run, repo: Path) -> None:
    for _proc, url in _served(repo):
        base = url.split("/?", 1)[0]
        token = url.split("token=", 1)[1]
        assert _status(base + "/") == 401
        assert _status(base + f"/run/{agent_run.run_id}") == 401
        assert _status(base + "/?token=wrong") == 401
        assert _status(base + "/static/ui.js") == 401
        assert _status(base + f"/api/run/{agent_run.run_id}/undo", "POST") == 401
        foreign = {"X-Sandbox-Token": token, "Origin": "http://evil.example", "Content-Type": "application/json"}
        assert _status(base + f"/api/run/{agent_run.run_id}/undo", "POST", foreign) == 403
        rebound = {"X-Sandbox-Token": token, "Host": "evil.example"}
        assert _status(base + "/", "GET", rebound) == 400
        # The printed address works: a redirect that sets the cookie, then the page.
        import http.cookiejar

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with opener.open(url, timeout=10) as answer:
            assert answer.status == 200 and b"<h1>Runs</h1>" in answer.read()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed (make test installs it)")
def test_review_pick_two_hunks_apply_undo_approve_and_a_refusal_in_a_real_browser(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    state = user_state(repo)
    original = tree_digest(repo)
    for proc, url in _served(repo):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            assert agent_run.run_id in page.inner_text("table.runs")
            page.click(f"a[href='/run/{agent_run.run_id}']")
            page.wait_for_selector("table.calls")
            calls = page.inner_text("table.calls")
            assert "edit_file" in calls and "deploy" in calls and "planned" in calls
            # Live: a call the agent makes now shows up without a reload.
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_tool", {"path": "notes.txt"}):
                pass
            page.wait_for_function("document.getElementById('timeline').innerText.includes('live_tool')")
            # j/k and Enter: the first call's own diff opens under it.
            page.focus("tr.call")
            page.keyboard.press("Enter")
            page.wait_for_selector("tr.calldiff:not([hidden]) .file")
            # The user edits a.txt where the agent did: applying it refuses, in the CLI's words.
            (repo / "src" / "a.txt").write_text(BEFORE_A.replace("line 2\n", "line 2 (mine)\n"))
            mine = tree_digest(repo)
            page.click("button[data-action='apply-all']")
            page.wait_for_function("document.getElementById('result').classList.contains('refused')")
            refusal = page.inner_text("#result")
            assert "src/a.txt" in refusal and "Conflicts (nothing was written)" in refusal
            assert tree_digest(repo) == mine
            (repo / "src" / "a.txt").write_text(BEFORE_A)  # the user takes the edit back
            assert tree_digest(repo) == original
            page.reload()
            # Pick two hunks: the first of a.txt (line 2) and b.txt's only one; leave a.txt's second.
            a_hunks = page.locator(".file[data-path='src/a.txt'] input.pick")
            assert a_hunks.count() == 2
            a_hunks.nth(0).check()
            page.locator(".file[data-path='src/b.txt'] input.pick").first.check()
            page.click("button[data-action='preview']")
            page.wait_for_function("document.getElementById('result').textContent.includes('Would write')")
            assert tree_digest(repo) == original  # a preview writes nothing
            page.click("button[data-action='apply']")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Applied')")
            assert (repo / "src" / "a.txt").read_bytes() == BEFORE_A.replace("line 2\n", "line 2 (agent)\n").encode()
            assert (repo / "src" / "b.txt").read_bytes() == b"alpha\nBETA\ngamma\n"
            # Undo takes back exactly that apply: the tree is byte for byte as before.
            for _ in range(2):  # one per call applied, or one for the whole apply: the CLI's undo decides
                page.evaluate("document.getElementById('result').textContent = ''")
                page.click("button[data-action='undo']")
                page.wait_for_function("document.getElementById('result').textContent.startsWith('Undid')")
                if tree_digest(repo) == original:
                    break
            assert tree_digest(repo) == original
            # Approvals: the planned call, approved from the page.
            page.goto(url.split("/?", 1)[0] + "/approvals")
            assert "deploy" in page.inner_text("main")
            page.click("button[data-action='approve']")
            page.wait_for_function("document.body.innerText.includes('No call is waiting')")
            browser.close()
        planned = [e for e in Run.open(agent_run.project, agent_run.run_id).entries() if e.tool_name == "deploy"]
        assert planned[0].status.value == "approved"
        # Ctrl-C stops the page; nothing is left listening.
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 130  # stopped by Ctrl-C, as every command reports it
        try:
            urllib.request.urlopen(url, timeout=5)
            raise AssertionError("the page still answers after Ctrl-C")
        except urllib.error.URLError:
            pass
    assert user_state(repo) == state  # HEAD, index, refs: untouched by the page


def test_ui_refuses_bad_input_in_one_line(repo: Path) -> None:
    exe = Path(sys.executable).parent / "sandbox"
    for args in (["nope"], [""], ["--port", "70000"], ["--port", "x"]):
        proc = subprocess.run([str(exe), "ui", "--no-browser", *args], cwd=repo, capture_output=True, timeout=30)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.decode().count("\n") <= 3 and b"Traceback" not in proc.stderr
