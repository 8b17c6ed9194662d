"""Bidi and zero-width characters in a file's content (issue #34, item 10): written out, each boxed, the
line flagged and the file warned about (as GitHub does), in the unified and the side-by-side view; the
name of a file that holds one is escaped and flagged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.merge.test_apply import start
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")

#: The classic "Trojan Source" line: reads as a comment's end, runs as code.
TROJAN = 'access = "user\u202e \u2066# admin only\u2069 \u2066"  # check\n'


@needs_chromium
def test_bidi_and_zero_width_characters_are_written_out_and_their_lines_flagged(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = start(repo)
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('app')\n" + TROJAN + "name = 'ad\u200bmin'\nplain = 1\n")
        call.write("src/inv\u202eoice.txt", "x\n")
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            app = page.locator("#diff .file[data-path='src/app.py']")
            assert "bidi or zero-width characters" in app.locator("p.hidden-chars").inner_text()
            flagged = app.locator("span.add.hidden-chars")
            assert flagged.count() == 2
            assert flagged.nth(0).inner_text() == '+access = "user\\u202e \\u2066# admin only\\u2069 \\u2066"  # check'
            assert flagged.nth(1).inner_text() == "+name = 'ad\\u200bmin'"
            assert flagged.nth(0).locator("span.hc").count() == 4
            assert flagged.nth(0).locator("span.hc").first.get_attribute("title") == "hidden character U+202E"
            mark = flagged.nth(0).evaluate("el => getComputedStyle(el, '::after').content")
            assert "hidden characters" in mark
            assert app.locator("span.add:not(.hidden-chars)").all_inner_texts() == ["+plain = 1"]
            # Nothing of it reaches the page as a raw character, coloured by the highlighter or not.
            page.wait_for_selector("#diff .file[data-path='src/app.py'] span.add.hl")
            text = page.inner_text("#diff")
            assert not any(ch in text for ch in "\u202e\u2066\u2069\u200b")
            assert flagged.nth(0).locator("span.hc").count() == 4  # kept through the colouring
            # The name: escaped and flagged, in the file's heading and the tree.
            named = page.locator("#diff .file h3", has_text="oice.txt")
            assert "inv\\u202eoice.txt" in named.inner_text() and "hidden characters" in named.inner_text()
            assert "inv\\u202eoice.txt" in page.inner_text("#tree")
            # Side by side: the same.
            page.check("#split")
            page.wait_for_selector("#diff table.split")
            cells = page.locator("#diff .file[data-path='src/app.py'] td.hidden-chars")
            assert cells.count() == 2 and "\\u200b" in cells.nth(1).inner_text()
            browser.close()
