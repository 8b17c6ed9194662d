"""The page at 800 px (issue #34, item 6): nothing overflows the page sideways, a command wraps only at
its spaces (a token too long for the column scrolls inside it), and a long diff line scrolls in its diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.run.run import Run
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served
from tests.ui.test_ui import agent_run as agent_run_fixture

agent_run = agent_run_fixture  # src/a.txt and src/b.txt edited, and a planned call

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")

#: Every place a line break falls inside a word (between two characters that are not white space) in
#: the elements ``selector`` finds: their text, where. Measured character by character with ranges.
BREAKS_IN_WORDS = """(selector) => {
  const bad = [];
  document.querySelectorAll(selector).forEach((el) => {
    if (!el.offsetParent) return;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let top = null, before = "", node;
    while ((node = walker.nextNode())) {
      for (let i = 0; i < node.length; i++) {
        const ch = node.data[i];
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rects = range.getClientRects();
        if (rects.length && !/\\s/.test(ch)) {
          if (top !== null && rects[0].top > top + 2 && !/\\s/.test(before)) {
            bad.push(el.textContent.slice(0, 60) + " @" + i);
          }
          top = rects[0].top;
        }
        before = ch;
      }
    }
  });
  return bad;
}"""

LONG_TOKEN = "tests/integration/" + "very_long_directory_name/" * 6 + "test_everything.py::test_the_whole_thing"


@needs_chromium
def test_at_800_pixels_nothing_overflows_and_commands_wrap_only_at_spaces(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = Run.open(agent_run.project, agent_run.run_id)
    words = ["python", "-m", "pytest", "-q", "-x", "--maxfail=1", "-k", "not slow and not network", LONG_TOKEN]
    with run.tool_call("run_command", {"argv": [*words, *[f"--option-{i}=value-{i}" for i in range(12)]]}):
        pass
    with run.tool_call("edit_file", {"path": "wide.txt"}) as call:
        call.write("wide.txt", "x = '" + "w" * 400 + "'\n")
    run.plan_call("run_command", {"argv": ["deploy", "--environment=staging", LONG_TOKEN, "--verbose"]})
    for _proc, url in _served(repo):
        base = url.split("/#", 1)[0]
        with sync_playwright() as pw:
            browser, page = _browser(pw, 800, 900)
            _goto(page, url)
            for path in ("/", f"/run/{run.run_id}", "/approvals"):
                _goto(page, base + path)
                for of in ("document.documentElement", "document.body"):
                    wide = page.evaluate(f"{of}.scrollWidth")
                    assert wide <= 800, (path, of, wide)  # the page never scrolls sideways
                commands = "td.cmd code, pre.command code"
                assert page.locator(commands).count() > 0 or path == "/", path
                assert page.evaluate(BREAKS_IN_WORDS, commands) == [], path
            # The run page: the long command did wrap (at its spaces), the long line scrolls in its diff.
            _goto(page, base + f"/run/{run.run_id}")
            long = page.locator("td.cmd code", has_text="--option-11")
            assert long.evaluate("el => el.getClientRects().length > 0 && el.offsetHeight > 30")
            pre = page.locator("#diff .file[data-path='wide.txt'] pre.diff")
            assert pre.evaluate("el => el.scrollWidth > el.clientWidth")
            assert pre.evaluate("el => getComputedStyle(el).overflowX") == "auto"
            browser.close()
