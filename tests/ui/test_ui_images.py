"""Changed images on the run page (issue #34, item 6): PNG, JPEG, GIF and WebP before and after, served
from the git objects with their type and nosniff; SVG only as an <img>, never inline (its script never runs)."""

from __future__ import annotations

import base64
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.merge.test_apply import start
from tests.ui.test_ui import CHROMIUM, _browser, _goto, _served

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")

GIF = base64.b64decode("R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==")
SVG = (
    "<svg xmlns='http://www.w3.org/2000/svg' width='20' height='20'>"
    "<script>parent.window.svgRan = 1; window.svgRan = 1;</script><rect width='20' height='20' fill='red'/></svg>\n"
)


def _drawn(kinds: tuple[str, ...], colour: str) -> dict[str, bytes]:
    """Small images of each kind, drawn by chromium's canvas (real encoders, no image library)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, page = _browser(pw)
        page.set_content("<canvas width='24' height='16'></canvas>")
        out = {}
        for kind in kinds:
            url = page.evaluate(
                "([kind, colour]) => { const c = document.querySelector('canvas'); const g = c.getContext('2d');"
                " g.fillStyle = colour; g.fillRect(0, 0, 24, 16); return c.toDataURL(kind); }",
                [kind, colour],
            )
            assert url.startswith(f"data:{kind};base64,"), url[:30]
            out[kind] = base64.b64decode(url.split(",", 1)[1])
        browser.close()
    return out


def _get(url: str, token: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"X-Sandbox-Token": token})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@needs_chromium
def test_changed_images_are_shown_before_and_after_and_svg_only_as_an_image(repo: Path) -> None:
    from playwright.sync_api import sync_playwright

    kinds = ("image/png", "image/jpeg", "image/webp")
    before, after = _drawn(kinds, "#0550ae"), _drawn(kinds, "#953800")
    (repo / "img").mkdir()
    (repo / "img" / "logo.png").write_bytes(before["image/png"])
    (repo / "img" / "photo.jpg").write_bytes(before["image/jpeg"])
    (repo / "img" / "fake.png").write_bytes(b"<html><script>alert(1)</script></html>\0")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "images"], cwd=repo, check=True)
    run = start(repo)
    with run.tool_call("draw", {"path": "img"}) as call:
        call.write("img/logo.png", after["image/png"])
        call.write("img/photo.jpg", after["image/jpeg"])
        call.write("img/new.webp", after["image/webp"])
        call.write("img/spin.gif", GIF)
        call.write("img/icon.svg", SVG)
        call.write("img/fake.png", b"<html><script>alert(2)</script></html>\0")
    for _proc, url in _served(repo):
        base, token = url.split("/#token=", 1)
        with sync_playwright() as pw:
            browser, page = _browser(pw)
            _goto(page, url.replace("/#", f"/run/{run.run_id}#"))
            expected = {
                "img/logo.png": ["before", "after"],
                "img/photo.jpg": ["before", "after"],
                "img/new.webp": ["after"],
                "img/spin.gif": ["after"],
                "img/icon.svg": ["after"],
            }
            for path, sides in expected.items():
                for side in sides:
                    img = page.locator(f"#diff .file[data-path='{path}'] figure.{side} img")
                    page.wait_for_function("el => el.dataset.shown === '1'", arg=img.element_handle())
                    assert img.evaluate("el => el.naturalWidth > 0 && el.src.startsWith('blob:')"), (path, side)
            assert "before: absent" in page.inner_text("#diff .file[data-path='img/new.webp']")
            # Named .png, not one: no preview, the binary note as before.
            fake = page.locator("#diff .file[data-path='img/fake.png']")
            assert fake.locator("img").count() == 0 and "Binary file" in fake.inner_text()
            # The SVG: an <img>, its text diff under it; never inline, its script never ran.
            assert page.locator("#diff svg").count() == 0
            assert page.locator("#diff .file[data-path='img/icon.svg'] span.add").count() == 1
            assert page.evaluate("window.svgRan") is None
            # A call's own diff (under its row in the timeline) shows its images too, from its own range.
            call_id = run.entries()[0].call_id
            page.click(f"tr#call-{call_id}")
            opened = page.locator(f"tr.calldiff[data-for='{call_id}'] .file[data-path='img/logo.png'] figure.after img")
            page.wait_for_function("el => el.dataset.shown === '1'", arg=opened.element_handle())
            assert "call=" + call_id in (opened.get_attribute("data-src") or "")
            browser.close()
        # What the server answers: the type by the bytes, nosniff; nothing the diff did not change.
        q = f"{base}/run/{run.run_id}/image?"
        for path, side, kind, data in (
            ("img/logo.png", "before", "image/png", before["image/png"]),
            ("img/logo.png", "after", "image/png", after["image/png"]),
            ("img/photo.jpg", "after", "image/jpeg", after["image/jpeg"]),
            ("img/new.webp", "after", "image/webp", after["image/webp"]),
            ("img/spin.gif", "after", "image/gif", GIF),
            ("img/icon.svg", "after", "image/svg+xml", SVG.encode()),
        ):
            status, headers, body = _get(q + f"path={path}&side={side}", token)
            assert (status, headers["content-type"], body) == (200, kind, data), path
            assert headers["x-content-type-options"] == "nosniff"
        for path, side in (("img/fake.png", "after"), ("src/app.py", "after"), ("img/new.webp", "before")):
            status, headers, _ = _get(q + f"path={path}&side={side}", token)
            assert status == 404 and headers["content-type"].startswith("text/plain"), path
        assert _get(q + "path=img/logo.png&side=after", "wrong")[0] == 401
