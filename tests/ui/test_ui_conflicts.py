"""Conflicts on the run page (issue #34, item 6): the diff3 regions with their markers styled, advice in
the page's own actions (never a CLI flag the page has no control for), and the 3-way apply the CLI offers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.merge.test_apply import start
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served
from tests.ui.test_ui_review import _answer

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")

BASE = "".join(f"line {i}\n" for i in range(1, 13))


@needs_chromium
def test_conflicts_are_styled_advised_in_the_pages_words_and_taken_with_a_3way_apply(repo: Path) -> None:
    import subprocess

    from playwright.sync_api import sync_playwright

    from tests.conftest import tree_digest

    (repo / "src" / "app.py").write_text(BASE)
    subprocess.run(["git", "commit", "-qam", "lines"], cwd=repo, check=True)
    run = start(repo)
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", BASE.replace("line 6\n", "line 6 (agent)\n"))
    mine = BASE.replace("line 6\n", "line 6 (mine)\n")
    (repo / "src" / "app.py").write_text(mine)
    before = tree_digest(repo)
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            page.wait_for_selector("#conflicts div.conflict")
            conflict = page.locator("#conflicts div.conflict")
            # The region: the four markers styled apart, each side in its own colour.
            markers = conflict.locator("pre.conflict-region span.marker")
            assert markers.all_inner_texts() == ["<<<<<<< yours", "||||||| base", "=======", ">>>>>>> agent"]
            colour = markers.first.evaluate("el => getComputedStyle(el).backgroundColor")
            plain = conflict.locator("pre.conflict-region span.ctx").first.evaluate(
                "el => getComputedStyle(el).backgroundColor"
            )
            assert colour != plain
            assert conflict.locator("span.yours").inner_text() == "line 6 (mine)"
            assert conflict.locator("span.agent").inner_text() == "line 6 (agent)"
            assert conflict.locator("span.yours").get_attribute("data-ln") == "    6 "  # its line in your file
            assert conflict.locator("span.agent").get_attribute("data-ln").strip() == ""  # not in your file
            # The advice names what the page offers, never a flag.
            advice = page.inner_text("#conflicts")
            assert "Apply with 3-way merge" in advice and "':!src/app.py' in the paths box" in advice
            assert "--" not in advice and "'sandbox " not in advice, advice
            # A plain apply is refused, in the page's words too; nothing written.
            page.click(".actions button[data-action='apply-all']")
            page.wait_for_function("document.getElementById('result').className.includes('refused')")
            said = page.inner_text("#result")
            assert "nothing was written" in said and "--" not in said, said
            assert tree_digest(repo) == before
            # The 3-way apply asks first; declined, nothing is written.
            asked: list[str] = []
            _answer(page, asked, False)
            page.click("#conflicts button[data-action='apply-3way']")
            page.wait_for_timeout(300)
            assert asked and "3-way merge" in asked[0] and tree_digest(repo) == before
            # Accepted: git's markers in your file, the page says so, Undo takes it back.
            _answer(page, asked, True)
            page.click("#conflicts button[data-action='apply-3way']")
            page.wait_for_function("document.getElementById('result').className.includes(' ok')")
            text = (repo / "src" / "app.py").read_text()
            assert "<<<<<<< yours\nline 6 (mine)\n" in text and "=======\nline 6 (agent)\n>>>>>>> agent\n" in text
            _answer(page, asked, True)
            page.keyboard.press("u")
            page.wait_for_function("document.getElementById('result').textContent.startsWith('Undid')")
            assert (repo / "src" / "app.py").read_text() == mine
            browser.close()


def test_conflict_markers_in_a_diffs_content_are_styled_apart() -> None:
    from sandbox.ui.diffs import unified

    html = unified(["+<<<<<<< yours", "+mine", "+=======", "+theirs", "+>>>>>>> agent", " <<<<<<<< not one"])
    assert html.count("class='add marker'") == 3 and "class='ctx'" in html
