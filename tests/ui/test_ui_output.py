"""A call's output on the page (issue #34, item 4): the kept tails, escaped, under the call when it is opened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.run.output import Tail
from tests.merge.test_apply import start
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_opening_a_call_shows_its_output_escaped(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = start(repo)
    with run.tool_call("run_command", {"argv": ["pytest"]}) as call:
        call.output = {
            "stdout": Tail.of("collected 1 item\n"),
            "stderr": Tail.of("<script>window.pwned=1</script>\n\x1b[31mFAILED\u202e test\n"),
        }
        call.result = {"exit_code": 1}
        call.failed_with = "exit code 1"
        failing = call.call_id
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            page.click(f"tr#call-{failing}")
            opened = page.locator(f"tr.calldiff[data-for='{failing}']")
            opened.locator("div.output[data-stream='stderr']").wait_for()
            assert "collected 1 item" in opened.locator("div.output[data-stream='stdout'] pre").inner_text()
            err = opened.locator("div.output[data-stream='stderr'] pre").inner_text()
            assert "<script>window.pwned=1</script>" in err  # shown as text, never run
            assert "\\x1b[31mFAILED\\u202e test" in err and "\u202e" not in err
            assert page.evaluate("window.pwned") is None
            assert "This call changed no files." in opened.inner_text()
            browser.close()
