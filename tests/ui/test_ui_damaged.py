"""The review page never shows a damaged object as the agent's file: a garbled recorded blob is said in
the sentence the CLI says (:func:`sandbox.errors.damaged_object`), and its garbage is not on the page."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import replace_stored_object
from tests.merge.test_apply import start
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


@needs_chromium
def test_a_garbled_recorded_file_is_said_on_the_page_not_shown(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = start(repo)
    with run.tool_call("edit_file", {"path": "src/new.py"}) as call:
        call.write("src/new.py", "agent wrote this\n")
    blob = hashlib.sha1(b"blob 17\0agent wrote this\n").hexdigest()
    replace_stored_object(repo, blob, b"not what the agent wrote\n")
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            said = page.locator("#diff p.refused")
            said.wait_for()
            text = said.inner_text()
            assert blob in text and "object store is damaged" in text and "git fsck" in text, text
            assert "not what the agent wrote" not in page.inner_text("body")
            browser.close()
