"""Reviewing a real run on the page (issue #34, items 9 and 6): line numbers, a comment on a line that
'sandbox comments' then lists, and the page's own keys and filters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.run import comments
from sandbox.run.run import Run
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served
from tests.ui.test_ui import agent_run as agent_run_fixture

agent_run = agent_run_fixture  # two edited files and a planned call

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
