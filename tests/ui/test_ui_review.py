"""Reviewing a real run on the page (issue #34, items 9 and 6): line numbers, a comment on a line that
'sandbox comments' then lists, and the page's own keys and filters."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandbox.run import comments
from sandbox.run.run import Run
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served
from tests.ui.test_ui import agent_run as agent_run_fixture

agent_run = agent_run_fixture  # two edited files and a planned call

if TYPE_CHECKING:
    from playwright.sync_api import Dialog, Page

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


@needs_chromium
def test_line_numbers_and_a_comment_on_a_line(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{agent_run.run_id}#"))
            added = page.locator(".file[data-path='src/a.txt'] span.add").first
            assert added.inner_text() == "+line 2 (agent)"  # the number is outside the line's text
            assert added.get_attribute("data-n") == "2"
            assert added.get_attribute("data-ln") == "          2 "  # old, new
            removed = page.locator(".file[data-path='src/a.txt'] span.del").first
            assert removed.get_attribute("data-ln") == "    2       "
            added.click(position={"x": 8, "y": 5})  # the gutter
            page.fill("form.comment-box textarea", "Say why line 2 changed.")
            page.click("form.comment-box button[type=submit]")
            page.wait_for_selector("#comments li.comment")
            assert "src/a.txt:2" in page.inner_text("#comments") and "not sent yet" in page.inner_text("#comments")
            assert "Comment c1 on src/a.txt:2 recorded" in page.inner_text("#result")
            browser.close()
    made = comments.listed(Run.open(agent_run.project, agent_run.run_id))
    assert [(c.path, c.line, c.text) for c in made] == [("src/a.txt", 2, "Say why line 2 changed.")]
    assert made[0].call_id == agent_run.entries()[0].call_id


def _answer(page: Page, asked: list[str], yes: bool) -> None:
    """Answer the page's next confirmation: yes or no, noting what it asked."""

    def on(dialog: Dialog) -> None:
        asked.append(dialog.message)
        if yes:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", on)


@needs_chromium
def test_filter_keys_confirmations_and_live_updates_in_place(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.conftest import tree_digest

    original = tree_digest(repo)
    deploy = [e for e in agent_run.entries() if e.tool_name == "deploy"][0].call_id
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{agent_run.run_id}#"))
            assert page.inner_text("#calls-count") == "(3; 1 changed nothing)"
            # The filter hides the call that changed nothing, and its rows.
            page.check("#hide-empty")
            assert not page.locator(f"tr#call-{deploy}").is_visible()
            assert page.locator("tr.call:visible").count() == 2
            # n / N: to the next hunk, the next file.
            page.locator("h1").click()
            page.keyboard.press("n")
            assert page.locator("#diff .hunk.at").count() == 1
            page.keyboard.press("N")
            assert page.locator("#diff .file.at").count() == 1
            # a and u ask first: dismissed, nothing is written.
            page.locator(".file[data-path='src/b.txt'] input.pick").first.check()
            page.locator("h1").click()
            asked: list[str] = []
            answer = partial(_answer, page, asked)
            answer(False)
            page.keyboard.press("a")
            page.wait_for_timeout(300)
            assert asked == ["Apply the 1 picked hunk(s) to your tree?"] and tree_digest(repo) == original
            answer(True)
            page.keyboard.press("a")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Applied')")
            assert (repo / "src" / "b.txt").read_text() == "alpha\nBETA\ngamma\n"
            answer(False)
            page.keyboard.press("u")
            page.wait_for_timeout(300)
            assert (repo / "src" / "b.txt").read_text() == "alpha\nBETA\ngamma\n"
            answer(True)
            page.keyboard.press("u")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Undid')")
            assert tree_digest(repo) == original
            # Live, in place: no reload, an open call stays open, the header's counts follow.
            page.uncheck("#hide-empty")
            first = agent_run.entries()[0].call_id
            page.click(f"tr#call-{first}")
            page.wait_for_function(
                f"document.querySelector(\"tr.calldiff[data-for='{first}']:not([hidden]) .file\") !== null"
            )
            page.evaluate("window.stayed = 1; window.scrollTo(0, 200)")
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_tool", {"path": "c.txt"}) as call:
                call.write("c.txt", "live\n")
            page.wait_for_function("document.getElementById('timeline').innerText.includes('live_tool')")
            page.wait_for_function("document.querySelector('p.facts').innerText.includes('calls: 4')")
            assert page.evaluate("window.stayed") == 1  # no reload
            assert page.locator(f"tr.calldiff[data-for='{first}']").is_visible()
            assert page.inner_text("#calls-count") == "(4; 1 changed nothing)"
            # The runs page: a box checked for comparing stays checked through a live update.
            _goto(page, base + "/")
            page.check(f"input[name=run][value='{agent_run.run_id}']")
            page.evaluate("window.stayed = 2")
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_two", {"path": "d.txt"}) as call:
                call.write("d.txt", "live\n")
            row = page.locator("tr.run-row", has=page.locator(f"a[href='/run/{agent_run.run_id}']"))
            page.wait_for_function(
                "[...document.querySelectorAll('tr.run-row td')].some(td => td.innerText.trim() === '5')"
            )
            assert page.evaluate("window.stayed") == 2
            assert row.locator("input[name=run]").is_checked()
            browser.close()


def test_a_running_call_is_not_said_to_have_changed_nothing(agent_run: Run) -> None:
    """A call still running may yet change files: the count of the calls that changed nothing leaves it out,
    and the filter that hides them does not hide it. (A live update said "2 changed nothing" while a call's
    finish was on its way.)"""
    from sandbox.ui import pages
    from sandbox.ui.timeline import timeline

    assert "(3; 1 changed nothing)" in pages.facts_html(agent_run)  # the planned deploy ran nothing
    running = agent_run.start_call("Bash", {"command": "make"})
    assert "(4; 1 changed nothing)" in pages.facts_html(agent_run)
    row = next(r for r in timeline(agent_run).split("<tr ") if f"id='call-{running}'" in r)
    assert "nofiles" not in row and "started" in row
    agent_run.finish_call(running, "succeeded")
    assert "(4; 2 changed nothing)" in pages.facts_html(agent_run)  # it ended with no file changed
    row = next(r for r in timeline(agent_run).split("<tr ") if f"id='call-{running}'" in r)
    assert "nofiles" in row


_HOLD_CALL_DIFFS = """
window.held = [];
const real = window.fetch;
window.fetch = (url, options) => real(url, options).then(answer =>
  String(url).endsWith('/diff') && String(url).includes('/call/')
    ? new Promise(release => window.held.push(() => release(answer)))
    : answer);
"""


@needs_chromium
def test_a_call_opened_as_a_live_update_replaces_the_timeline_shows_its_diff(agent_run: Run, repo: Path) -> None:
    """The call's diff arrives after a live update replaced the timeline: it goes into the row shown (open),
    not the replaced one. (CI saw the row open and empty for ever when an update came between the click and
    the answer.)"""
    from playwright.sync_api import sync_playwright

    first = agent_run.entries()[0].call_id
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{agent_run.run_id}#"))
            page.evaluate(_HOLD_CALL_DIFFS)
            page.click(f"tr#call-{first}")
            page.wait_for_function("window.held.length === 1")  # the answer is in, and held back
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_tool", {"path": "c.txt"}) as call:
                call.write("c.txt", "live\n")
            page.wait_for_function("document.getElementById('timeline').innerText.includes('live_tool')")
            page.evaluate("window.held.forEach(release => release())")
            page.wait_for_function(
                f"document.querySelector(\"tr.calldiff[data-for='{first}']:not([hidden]) .file\") !== null"
            )
            assert "line 2 (agent)" in page.inner_text(f"tr.calldiff[data-for='{first}']")
            # Closed before its answer came, it stays closed.
            page.evaluate("window.held = []")
            for _ in range(3):  # closed, opened (its answer held), closed
                page.click(f"tr#call-{first}")
            page.wait_for_function("window.held.length === 1")
            page.evaluate("window.held.forEach(release => release())")
            page.wait_for_timeout(300)
            assert not page.locator(f"tr.calldiff[data-for='{first}']").is_visible()
            browser.close()


_HOLD_FIRST_TIMELINE = """
window.held = [];
const real = window.fetch;
window.fetch = (url, options) => real(url, options).then(answer =>
  String(url).endsWith('/timeline') && window.held.length === 0
    ? new Promise(release => window.held.push(() => release(answer)))
    : answer);
"""


@needs_chromium
def test_an_older_live_update_that_answers_last_does_not_undo_a_newer_one(agent_run: Run, repo: Path) -> None:
    """Two live updates a second apart, the first one's timeline answering last: the page keeps the newer
    calls (it showed the older timeline until the run moved on again, which a finished run never does)."""
    from playwright.sync_api import sync_playwright

    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{agent_run.run_id}#"))
            page.evaluate(_HOLD_FIRST_TIMELINE)
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_one", {"path": "c.txt"}) as call:
                call.write("c.txt", "one\n")
            page.wait_for_function("window.held.length === 1")  # the first update's timeline, held back
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live_two", {"path": "d.txt"}) as call:
                call.write("d.txt", "two\n")
            page.wait_for_function("document.getElementById('timeline').innerText.includes('live_two')")
            page.evaluate("window.held.forEach(release => release())")
            page.wait_for_timeout(500)
            assert "live_two" in page.inner_text("#timeline")
            browser.close()
