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
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandbox.run.run import Run
from tests import cliserver
from tests.conftest import scaled, tree_digest, user_state
from tests.merge.test_apply import start

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Error, Page, Playwright, Request

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BEFORE_A = "".join(f"line {i}\n" for i in range(1, 41))
BEFORE_B = "alpha\nbeta\ngamma\n"


def _served(repo: Path, *args: str) -> Iterator[tuple[cliserver.Forked | subprocess.Popen[bytes], str]]:
    proc = cliserver.popen(
        "ui", "--no-browser", "--json", *args, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
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
        base = url.split("/#", 1)[0]
        token = url.split("token=", 1)[1]
        assert _status(base + "/") == 401
        assert _status(base + f"/run/{agent_run.run_id}") == 401
        assert _status(base + "/?token=" + token) == 401  # only the header carries it
        assert _status(base + "/api/tips") == 401
        assert _status(base + f"/api/run/{agent_run.run_id}/undo", "POST") == 401
        foreign = {"X-Sandbox-Token": token, "Origin": "http://evil.example", "Content-Type": "application/json"}
        assert _status(base + f"/api/run/{agent_run.run_id}/undo", "POST", foreign) == 403
        rebound = {"X-Sandbox-Token": token, "Host": "evil.example"}
        assert _status(base + "/", "GET", rebound) == 400
        # With the token in the header (as the page's script sends it): the page.
        request = urllib.request.Request(base + "/", headers={"X-Sandbox-Token": token})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200 and b"<h1>Runs</h1>" in answer.read()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed (make test installs it)")
def test_review_pick_two_hunks_apply_undo_approve_and_a_refusal_in_a_real_browser(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    state = user_state(repo)
    original = tree_digest(repo)
    for proc, url in _served(repo):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            _goto(page, url)
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
            _goto(page, page.url)
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
            _goto(page, url.split("/#", 1)[0] + "/approvals")
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


# -- what the first version left out (issue #23): refusals, renames, picking, colours, checks, narrow --


def _goto(page: Page, address: str) -> None:
    """Open an address and wait for the page to be in place (the shell fetched it, its script runs)."""
    page.goto(address)
    page.wait_for_selector("html[data-shown]", state="attached")


def _browser(pw: Playwright, width: int = 1280, height: int = 800) -> tuple[Browser, Page]:
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
    # Playwright's string predicates are an eval, which the page's CSP forbids (test_ui_auth keeps the CSP).
    page = browser.new_page(viewport={"width": width, "height": height}, bypass_csp=True)
    page.set_default_timeout(scaled(10) * 1000)  # the page waits on the server, which load slows
    return browser, page


def _note_url(into: list[str], request: Request) -> None:
    into.append(request.url)


def _note_error(into: list[str], error: Error) -> None:
    into.append(str(error))


def _show(page: Page, paths: str, calls: str) -> str:
    """Type a selection into the page's boxes, show it, and read the diff pane."""
    page.evaluate("document.getElementById('diff').innerHTML = ''")
    page.fill("#pick-paths", paths)
    page.fill("#pick-calls", calls)
    page.click("#pick button[type=submit]")
    page.wait_for_function("document.getElementById('diff').innerText.trim().length > 0")
    return page.inner_text("#diff")


needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


@needs_chromium
def test_the_timeline_shows_what_the_confinement_refused_under_its_call(repo: Path) -> None:
    import datetime

    from playwright.sync_api import sync_playwright

    from sandbox.agent.netrecord import _Recorder
    from sandbox.confine.proxy import Refusal
    from sandbox.recovery.resume import resume

    run = start(repo)
    recorder = _Recorder(run, "session-1")
    now = datetime.datetime.now(datetime.timezone.utc)
    with run.tool_call("run_command", {"argv": ["curl", "https://example.com"]}) as call:
        during = datetime.datetime.now(datetime.timezone.utc)  # refused while the call runs: under it
        recorder(Refusal("example.com", 443, during, "CONNECT"))
        refused_in = call.call_id
    recorder(Refusal("evil.example", 80, now, "GET"))  # between calls: a row of its own
    recorder.dropped = 3
    recorder.finish()
    outage = {"previous_pid": 4242, "previous_started_at": now.isoformat(), "restarted_at": now.isoformat()}
    run.note({"host_outage": {**outage, "note": "the repository's host had died"}})
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    open_call = run.start_call("send_email", {"to": "x"}, idempotency="non_idempotent", replay="never")
    resume(Run.open(run.project, run.run_id))  # the call never ended: now uncertain
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            assert "2 network refusal(s)" in page.inner_text("p.facts")
            under = page.locator(f"tr#call-{refused_in} + tr.refusal").inner_text()
            assert "refused" in under and "example.com:443" in under and "allowlist" in under
            events = page.locator("tr.detail.event").all_inner_texts()
            assert any("evil.example:80" in t and "outside any call" in t and "session-1" in t for t in events)
            assert any("3 more network connection(s)" in t for t in events)
            assert any("host outage" in t and "4242" in t for t in events)
            # The outage row sits where it happened: after the refusing call, before the edit.
            order = page.locator("tr.call, tr.detail.event").all_inner_texts()
            at = next(i for i, t in enumerate(order) if "host outage" in t)
            assert "curl" in " ".join(order[:at]) and "src/app.py" in " ".join(order[at:])
            uncertain = page.locator(f"tr#call-{open_call}.uncertain + tr.detail.uncertain").inner_text()
            assert "may or may not have run" in uncertain and "sandbox resume" in uncertain
            browser.close()


@needs_chromium
def test_renames_binary_files_and_mode_changes_are_named_and_a_rename_is_picked_whole(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    body = "".join(f"def f{i}():\n    return {i}\n" for i in range(30))
    (repo / "src" / "old_name.py").write_text(body)
    (repo / "image.bin").write_bytes(b"\x00\x01BIN" * 10)
    (repo / "tool.sh").write_text("echo hi\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "more files"], cwd=repo, check=True)
    run = start(repo)
    with run.tool_call("refactor", {"path": "src"}) as call:
        call.rename("src/old_name.py", "src/new_name.py")
        call.write("src/new_name.py", body.replace("return 7\n", "return 7000\n"))
        call.write("image.bin", b"\x00\x02BIN" * 12)
        call.chmod("tool.sh", True)
    original = tree_digest(repo)
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            renamed = page.locator(".file[data-path='src/new_name.py']")
            title = renamed.locator("h3").inner_text()
            assert "renamed" in title.lower() and "src/old_name.py → src/new_name.py" in title and "% similar" in title
            assert "return 7000" in renamed.inner_text()  # the edit between the two names, not a whole new file
            assert page.locator(".file[data-path='src/old_name.py']").count() == 0
            binary = page.locator(".file[data-path='image.bin']").inner_text()
            assert "Binary file image.bin (50 bytes → 60 bytes)" in binary
            mode = page.locator(".file[data-path='tool.sh'] h3").inner_text()
            assert "mode 100644 → 100755 (file → executable)" in mode
            # The rename's one checkbox takes both paths, and nothing else.
            renamed.locator("input.pick").check()
            page.click("button[data-action='preview']")
            page.wait_for_function("document.getElementById('result').textContent.includes('Would write')")
            said = page.inner_text("#result").splitlines()[0]
            assert said == "Would write 2 path(s): src/new_name.py, src/old_name.py."
            assert tree_digest(repo) == original
            page.click("button[data-action='apply']")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Applied')")
            browser.close()
    assert not (repo / "src" / "old_name.py").exists()
    assert (repo / "src" / "new_name.py").read_text() == body.replace("return 7\n", "return 7000\n")
    assert (repo / "image.bin").read_bytes() == b"\x00\x01BIN" * 10
    assert not os.access(repo / "tool.sh", os.X_OK)


@needs_chromium
def test_pick_by_path_and_call_previews_exactly_what_apply_writes_and_refuses_in_the_clis_words(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = start(repo)
    with run.tool_call("edit", {"path": "src"}) as call:  # call 1
        call.write("src/a.txt", "a from call 1\n")
        call.write("docs/x.md", "# x\n")
    with run.tool_call("edit", {"path": "src/b.txt"}) as call:  # call 2
        call.write("src/b.txt", "b from call 2\n")
        second = call.call_id
    with run.tool_call("edit", {"path": "src/a.txt"}) as call:  # call 3
        call.write("src/a.txt", "a from call 3\n")
    exe = Path(sys.executable).parent / "sandbox"
    cli = subprocess.run(
        [str(exe), "apply", run.run_id, "src/", "--call", "1..2", "--dry-run", "--json"],
        cwd=repo,
        capture_output=True,
        check=True,
    )
    cli_would = json.loads(cli.stdout)["would_apply"]  # a dry run lists what it would write there
    original = tree_digest(repo)
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))

            errors: list[str] = []
            page.on("pageerror", partial(_note_error, errors))
            # A call's own diff offers to show only that call: the calls box takes its id.
            page.click(f"tr.call[data-call='{second}']")
            page.click(f"tr.calldiff[data-for='{second}'] a.pick-call")
            page.wait_for_function(  # the whole run's diff shows both files; the call's, only b.txt
                "(t => t.includes('b from call 2') && !t.includes('a from call'))"
                "(document.getElementById('diff').innerText)"
            )
            assert page.input_value("#pick-calls") == second
            # Refusals in the CLI's words: a pathspec it does not support, one that matches nothing, no such call.
            for paths, calls, cli_args in (
                (":(attr)x", "", [":(attr)x"]),
                ("nope/", "", ["nope/"]),
                ("", "99", ["--call", "99"]),
            ):
                said = subprocess.run([str(exe), "diff", run.run_id, *cli_args], cwd=repo, capture_output=True)
                sentence = said.stderr.decode().strip().removeprefix("sandbox: ")
                assert said.returncode != 0 and sentence and _show(page, paths, calls).strip() == sentence
            # Applying what is shown then refuses in the same words, and writes nothing.
            page.click("button[data-action='apply-all']")
            page.wait_for_function("document.getElementById('result').classList.contains('refused')")
            assert page.inner_text("#result").strip() == sentence and tree_digest(repo) == original
            # src/ of calls 1..2: a.txt as call 1 left it, and b.txt; not docs/x.md, not call 3's a.txt.
            shown = _show(page, "src/", "1..2")
            assert "a from call 1" in shown and "b from call 2" in shown
            assert "docs/x.md" not in shown and "a from call 3" not in shown
            page.click("button[data-action='preview']")
            page.wait_for_function("document.getElementById('result').textContent.includes('Would write')")
            preview = page.inner_text("#result")
            listed = sorted(line.strip() for line in preview.splitlines()[1:] if line.startswith("  "))
            assert listed == sorted(cli_would) == ["src/a.txt", "src/b.txt"]
            assert tree_digest(repo) == original
            page.click("button[data-action='apply-all']")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Applied')")
            assert errors == []
            browser.close()
    assert (repo / "src" / "a.txt").read_text() == "a from call 1\n"
    assert (repo / "src" / "b.txt").read_text() == "b from call 2\n"
    assert not (repo / "docs" / "x.md").exists()  # exactly what the preview listed, nothing else
    changed = [e.call_id for e in Run.open(run.project, run.run_id).entries() if e.applied]
    assert len(changed) == 1  # call 2 whole; call 1 only in part (docs/x.md left out), call 3 not at all


@needs_chromium
def test_diff_lines_are_syntax_coloured_offline_by_the_vendored_highlighter(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = start(repo)
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "def main():\n    return 'agent'\n")
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        asked: list[str] = []
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            page.on("request", partial(_note_url, asked))
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            page.wait_for_selector(".file[data-path='src/app.py'] span.add .hljs-keyword")
            added = page.locator(".file[data-path='src/app.py'] span.add").first
            assert added.inner_text().startswith("+def main")
            # The colour-blind-safe backgrounds stay: blue added, orange removed.
            assert added.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(221, 244, 255)"
            removed = page.locator(".file[data-path='src/app.py'] span.del").first
            assert removed.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(255, 241, 229)"
            licence = page.request.get(base + "/static/vendor/LICENSE-highlight.js.txt")
            assert licence.status == 200 and "BSD 3-Clause" in licence.text()
            browser.close()
        assert asked and all(u.startswith(base + "/") for u in asked), asked  # nothing from another host


@needs_chromium
def test_compare_shows_each_runs_check_result_and_links_to_it(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    exe = Path(sys.executable).parent / "sandbox"
    made = subprocess.run([str(exe), "start", "--count", "2", "--json"], cwd=repo, capture_output=True, check=True)
    ids = [r["run"] for r in json.loads(made.stdout)["runs"]]
    with Run.open(start(repo).project, ids[0]).tool_call("edit", {"path": "done.txt"}) as call:
        call.write("done.txt", "yes\n")
    subprocess.run(
        [str(exe), "compare", *ids, "--check", "test -f done.txt", "--isolate", "off"],
        cwd=repo,
        capture_output=True,
        check=True,
    )
    checks = {rid: [e for e in Run.open(start(repo).project, rid).entries() if e.tool_name == "check"] for rid in ids}
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url)
            _goto(page, base + f"/compare?run={ids[0]}&run={ids[1]}")
            rows = {rid: page.locator("table.compare tr", has=page.locator(f"a[href='/run/{rid}']")) for rid in ids}
            assert "exit 0" in rows[ids[0]].locator("td.check").inner_text()
            assert "exit 1" in rows[ids[1]].locator("td.check").inner_text()
            assert "test -f done.txt" in rows[ids[1]].locator("td.check").inner_text()
            # The check's link opens that run at that call.
            rows[ids[1]].locator("td.check a").click()
            page.wait_for_selector(f"tr#call-{checks[ids[1]][-1].call_id}:focus")
            assert page.url.startswith(base + f"/run/{ids[1]}")
            browser.close()


@needs_chromium
def test_usable_in_a_600_pixel_window(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        with sync_playwright() as pw:
            browser, page = _browser(pw, 600, 900)
            _goto(page, url)
            for path in ("/", f"/run/{agent_run.run_id}", "/approvals"):
                _goto(page, base + path)
                wide = page.evaluate("document.documentElement.scrollWidth")
                assert wide <= 600, (path, wide)  # no sideways scrolling of the page
                for button in page.locator("main button:visible").all():
                    box = button.bounding_box()
                    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 600, path
            _goto(page, base + "/approvals")
            assert page.locator("button[data-action='approve']").is_visible()  # the answer, not cut off
            # The run page's own controls work there: pick a hunk, preview.
            _goto(page, base + f"/run/{agent_run.run_id}")
            page.locator(".file[data-path='src/b.txt'] input.pick").first.check()
            page.click("button[data-action='preview']")
            page.wait_for_function("document.getElementById('result').textContent.includes('Would write')")
            browser.close()


@needs_chromium
def test_the_page_shows_interrupted_and_violation_calls_rolled_back_calls_and_conflict_markers(repo: Path) -> None:
    """What 'log' and 'status' say of a call and a tree, the run page shows too."""
    from playwright.sync_api import sync_playwright

    from tests.conftest import sandbox_cmd

    run = start(repo)
    stopped = run.start_call("Bash", {"command": "sleep 30"})
    run.finish_call(stopped, "failed", error="interrupted: the user pressed Ctrl-C", mark="interrupted")
    forged = run.start_call("Write", {"file_path": "x"})
    run.finish_call(forged, "failed", error="violation: no PreToolUse for it", mark="violation")
    assert sandbox_cmd("checkpoint", run.run_id, "--label", "before", cwd=repo).returncode == 0
    with run.tool_call("edit_file", {"path": "src/util.py"}) as call:
        call.write("src/util.py", "X = 'rolled back'\n")
        rolled = call.call_id
    assert sandbox_cmd("rollback", run.run_id, "--files", "--to", "before", cwd=repo).returncode == 0
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    (repo / "src" / "app.py").write_text("print('mine')\n")
    assert sandbox_cmd("apply", run.run_id, "--3way", cwd=repo).returncode == 1  # markers left to resolve
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            assert "interrupted" in page.locator(f"tr#call-{stopped} .badge").first.inner_text()
            assert "the user pressed Ctrl-C" in page.locator(f"tr#call-{stopped} + tr.detail").inner_text()
            assert "violation" in page.locator(f"tr#call-{forged} .badge").first.inner_text()
            assert "rolled back" in page.locator(f"tr#call-{rolled}").inner_text()
            # Its own diff is no longer offered: the CLI's refusal, and no link to pick its changes.
            page.click(f"tr#call-{rolled}")
            opened = page.locator(f"tr.calldiff[data-for='{rolled}']")
            page.wait_for_function(
                f"document.querySelector(\"tr.calldiff[data-for='{rolled}']\").innerText.includes('rolled back')"
            )
            assert opened.locator("a.pick-call").count() == 0
            attention = page.locator("p.attention").inner_text()
            assert "src/app.py" in attention and "3-way apply" in attention
            browser.close()


@needs_chromium
def test_the_wait_at_the_agents_prompt_is_shown_apart_from_what_the_call_took(repo: Path) -> None:
    """As `sandbox log` says "[waited ... at the agent's prompt]", the page's TOOK keeps that wait apart."""
    from playwright.sync_api import sync_playwright

    run = start(repo)
    asked = run.plan_call("run_command", {"argv": ["true"]})
    time.sleep(0.7)  # the user at the agent's permission prompt
    run.start_call("run_command", {"argv": ["true"]}, call_id=asked)
    run.finish_call(asked, "succeeded")
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            took = page.locator(f"tr#call-{asked} td").nth(5).inner_text()
            assert "at the agent's prompt" in took and took.startswith("0.")
            browser.close()
