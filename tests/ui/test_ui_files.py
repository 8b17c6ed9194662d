"""The run page's files (issue #34, item 6): a tree that folds, a "viewed" mark per file kept by the
tab through live updates, and a whitespace-insensitive view."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.run.run import Run
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served
from tests.ui.test_ui import agent_run as agent_run_fixture

agent_run = agent_run_fixture  # src/a.txt and src/b.txt edited, and a planned call

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")


@needs_chromium
def test_the_file_tree_folds_and_viewed_files_stay_viewed_through_live_updates(agent_run: Run, repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{agent_run.run_id}#"))
            tree = page.locator("#tree")
            assert tree.locator("summary").first.inner_text() == "Files (2)"
            assert tree.locator("details[data-dir='src/'] > summary").inner_text() == "src/"
            assert tree.locator("a.tree-file").all_inner_texts() == ["a.txt", "b.txt"]
            a = page.locator("#diff .file[data-path='src/a.txt']")
            b = page.locator("#diff .file[data-path='src/b.txt']")
            # Viewed: the file folds (its hunks hidden), the tree says so.
            a.locator("input.viewed").check()
            assert not a.locator(".hunk").first.is_visible()
            assert "viewed" in (tree.locator("a.tree-file[data-path='src/a.txt']").get_attribute("class") or "")
            # Fold without viewing, and a tree link unfolds and goes to its file.
            b.locator("button.fold").click()
            assert not b.locator(".hunk").first.is_visible() and b.locator("button.fold").inner_text() == "unfold"
            tree.locator("a.tree-file[data-path='src/b.txt']").click()
            assert b.locator(".hunk").first.is_visible()
            # A directory of the tree folds, and stays folded through a live update.
            tree.locator("details[data-dir='src/'] > summary").click()
            assert not tree.locator("a.tree-file[data-path='src/a.txt']").is_visible()
            page.evaluate("window.stayed = 1")
            with Run.open(agent_run.project, agent_run.run_id).tool_call("live", {"path": "c.txt"}) as call:
                call.write("c.txt", "live\n")
            page.wait_for_selector("#diff .file[data-path='c.txt']")
            assert page.evaluate("window.stayed") == 1  # in place, no reload
            assert tree.locator("summary").first.inner_text() == "Files (3)"
            assert not tree.locator("a.tree-file[data-path='src/a.txt']").is_visible()
            assert a.locator("input.viewed").is_checked() and not a.locator(".hunk").first.is_visible()
            assert not page.locator("#diff .file[data-path='c.txt'] input.viewed").is_checked()
            # The same tab, the page loaded again: still viewed.
            _goto(page, url.split("/#", 1)[0] + f"/run/{agent_run.run_id}")
            assert page.locator("#diff .file[data-path='src/a.txt'] input.viewed").is_checked()
            # The agent changes the viewed file again: no longer viewed, shown unfolded.
            with Run.open(agent_run.project, agent_run.run_id).tool_call("edit_file", {"path": "src/a.txt"}) as call:
                call.write("src/a.txt", (repo / "src" / "a.txt").read_text().replace("line 9\n", "line 9 (more)\n"))
            page.wait_for_function(
                "document.querySelector(\"#diff .file[data-path='src/a.txt']\").innerText.includes('line 9 (more)')"
            )
            a = page.locator("#diff .file[data-path='src/a.txt']")
            assert not a.locator("input.viewed").is_checked() and a.locator(".hunk").first.is_visible()
            # Another tab holds its own marks.
            other = browser.new_page(bypass_csp=True)
            _goto(other, url.replace("/#", f"/run/{agent_run.run_id}#"))
            assert other.locator("#diff input.viewed:checked").count() == 0
            browser.close()


@needs_chromium
def test_ignoring_whitespace_recomputes_the_hunks_as_git_diff_w(repo: Path) -> None:
    import subprocess

    from playwright.sync_api import sync_playwright

    from tests.merge.test_apply import start

    body = "".join(f"def f{i}():\n    return {i}\n" for i in range(20))
    (repo / "src" / "mod.py").write_text(body)
    (repo / "src" / "only.py").write_text("x = 1\nif x:\n    y = 2\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "mods"], cwd=repo, check=True)
    run = start(repo)
    with run.tool_call("reindent", {"path": "src/mod.py"}) as call:  # every line reindented, one changed
        call.write("src/mod.py", body.replace("    return", "  return").replace("return 7\n", "return 70\n"))
        call.write("src/only.py", "x = 1\nif x:\n\ty = 2\n")
    from sandbox.merge.preview import preview_range

    rng = preview_range(run)
    expected = subprocess.run(
        ["git", "diff", "-w", "--no-color", rng.old, rng.new, "--", "src/mod.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    changed = [line for line in expected.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            mod = "#diff .file[data-path='src/mod.py']"
            assert page.locator(f"{mod} span.add").count() == 20  # every reindented line
            page.check("#ignore-ws")
            page.wait_for_selector("#diff p.note.ws")
            shown = page.locator(f"{mod} span.add, {mod} span.del").all_inner_texts()
            assert shown == changed == ["-    return 7", "+  return 70"]
            assert page.locator(f"{mod} span.add").get_attribute("data-n") == "16"  # its line in the new file
            assert page.locator(f"{mod} input.pick").count() == 0  # read, not picked
            assert page.inner_text("#diff .file[data-path='src/only.py'] p.note") == "Only whitespace changed."
            page.uncheck("#ignore-ws")
            page.wait_for_function("!document.querySelector('#diff p.note.ws')")
            assert page.locator(f"{mod} input.pick").count() > 0
            browser.close()


@needs_chromium
def test_the_rest_of_a_big_file_is_whitespace_insensitive_too(repo: Path) -> None:
    import subprocess

    from playwright.sync_api import sync_playwright

    from tests.merge.test_apply import start

    body = "".join(f"if x:\n    v{i} = {i}\n" for i in range(800))
    (repo / "big.py").write_text(body)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "big"], cwd=repo, check=True)
    run = start(repo)
    after = "".join(f"if x:\n  v{i} = {i if i % 2 else i + 1}\n" for i in range(800))  # all reindented, half changed
    with run.tool_call("reindent", {"path": "big.py"}) as call:
        call.write("big.py", after)
    for _proc, url in _served(repo):
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            page.check("#ignore-ws")
            page.wait_for_selector("#diff p.note.ws")
            big = page.locator("#diff .file[data-path='big.py']")
            assert big.locator("span.add").count() < 400  # cut: the rest on demand
            big.locator("a.more").click()
            page.wait_for_function(
                "document.querySelectorAll(\"#diff .file[data-path='big.py'] span.add\").length >= 400"
            )
            while big.locator("a.more").count():
                count = big.locator("span.add").count()
                big.locator("a.more").click()
                page.wait_for_function(
                    f"document.querySelectorAll(\"#diff .file[data-path='big.py'] span.add\").length > {count}"
                )
            assert big.locator("span.add").count() == 400  # the changed half only, not the 1,600 reindented
            assert big.locator("span.add").last.inner_text() == "+  v798 = 799"
            browser.close()
