"""The review workflow of ``sandbox ui`` in headless chromium, as screenshots for the README.

``python -m bench.ui_review --screenshots DIR``

Builds a throwaway repository and a demo run (``sandbox start``; an agent's edits recorded call by
call: a file the user edited too, a rename, a changed image, a line with a hidden bidi character),
serves it with the real ``sandbox ui`` and walks the review a person does: the file tree with one
file marked viewed, a comment typed on a line, the comments listed, the conflicts with the 3-way
apply, the page at 800 px. Each step is a PNG in DIR (``make screenshots`` writes them into docs/:
``ui-review.png``, ``ui-comment.png``, ``ui-conflicts.png``, ``ui-review-800.png``), and the commands
of the workflow (``sandbox comments RUN``) are run and printed as the README shows them.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

APP = "".join(f"def step_{i}(value):\n    return value + {i}\n\n" for i in range(12))


def _git(cwd: str, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _png(colour: str) -> bytes:
    """A small PNG drawn by chromium's canvas (no image library)."""
    from playwright.sync_api import sync_playwright

    from bench.ui_page import launch

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page()
        page.set_content("<canvas width='96' height='48'></canvas>")
        url = page.evaluate(
            "(c) => { const el = document.querySelector('canvas'); const g = el.getContext('2d');"
            " g.fillStyle = c; g.fillRect(0, 0, 96, 48); g.fillStyle = '#fff'; g.fillRect(12, 12, 24, 24);"
            " return el.toDataURL('image/png'); }",
            colour,
        )
        browser.close()
    return base64.b64decode(str(url).split(",", 1)[1])


def build(root: str) -> tuple[str, str]:
    """A repository and a demo run of an agent's edits; the user's own edit overlaps one of them."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    repo = os.path.join(root, "project")
    os.makedirs(os.path.join(repo, "src"))
    os.makedirs(os.path.join(repo, "docs"))
    files = {
        "src/app.py": APP,
        "src/util.py": "def helper(x):\n    return x * 2\n",
        "docs/logo.png": _png("#0550ae"),
        "README.md": "# demo\n\nA small project.\n",
    }
    for rel, data in files.items():
        with open(os.path.join(repo, rel), "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=Demo", "-c", "user.email=demo@example.com", "commit", "-qm", "initial")
    exe = os.path.join(os.path.dirname(sys.executable), "sandbox")
    made = subprocess.run([exe, "start", "--label", "review-demo", "--json"], cwd=repo, capture_output=True, check=True)
    run_id = json.loads(made.stdout)["run"]
    project, _, _ = Project.discover(repo)
    run = Run.open(project, run_id)
    with run.tool_call("edit_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", APP.replace("value + 3\n", "value + 30  # tuned\n").replace("value + 9", "value * 9"))
    with run.tool_call("run_command", {"argv": ["git", "mv", "src/util.py", "src/helpers.py"]}) as call:
        call.rename("src/util.py", "src/helpers.py")
        call.write("src/helpers.py", "def helper(x):\n    return x * 3\n")
    with run.tool_call("edit_file", {"path": "docs/logo.png"}) as call:
        call.write("docs/logo.png", _png("#953800"))
    with run.tool_call("edit_file", {"path": "README.md"}) as call:
        call.write("README.md", "# demo\n\nA small project.\naccess = 'user\u202e # admin'\n")
    # The user's own edit of a line the agent changed too: a conflict the page shows and merges 3-way.
    with open(os.path.join(repo, "src", "app.py"), "w", encoding="utf-8") as fh:
        fh.write(APP.replace("value + 9", "value - 9"))
    return repo, run_id


def shoot(repo: str, run_id: str, out: str) -> None:
    """Walk the review in chromium and write the screenshots into ``out``."""
    from playwright.sync_api import sync_playwright

    from bench.ui_page import launch, served

    os.makedirs(out, exist_ok=True)

    def wrote(name: str) -> str:
        path = os.path.join(out, name)
        print(f"wrote {path}")
        return path

    with served(repo) as url, sync_playwright() as pw:
        run_url = url.replace("/#", f"/run/{run_id}#")
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(run_url)
        page.wait_for_selector("html[data-shown]", state="attached")
        page.wait_for_selector("#diff .file[data-path='docs/logo.png'] img[data-shown]")
        page.locator("#diff .file[data-path='src/helpers.py'] input.viewed").check()
        page.evaluate("document.querySelector('#diff').closest('section').scrollIntoView()")
        page.screenshot(path=wrote("ui-review.png"))
        line = page.locator("#diff .file[data-path='src/app.py'] span.add").first
        line.click(position={"x": 8, "y": 5})  # the line number's gutter opens a comment box
        page.fill("form.comment-box textarea", "Why 30? Keep 3 unless a test needs it.")
        page.locator("#diff .file[data-path='src/app.py']").screenshot(path=wrote("ui-comment.png"))
        page.click("form.comment-box button[type=submit]")
        page.wait_for_selector("#comments li.comment")
        page.wait_for_selector("#conflicts div.conflict")
        page.evaluate("document.getElementById('toast').className = ''")  # the comment's toast out of the way
        page.wait_for_timeout(400)
        page.locator("#conflicts").screenshot(path=wrote("ui-conflicts.png"))
        narrow = browser.new_page(viewport={"width": 800, "height": 1000})
        narrow.goto(run_url.split("#", 1)[0] + "#" + url.split("#", 1)[1])
        narrow.wait_for_selector("html[data-shown]", state="attached")
        narrow.screenshot(path=wrote("ui-review-800.png"))
        browser.close()
    exe = os.path.join(os.path.dirname(sys.executable), "sandbox")
    listed = subprocess.run([exe, "comments", run_id], cwd=repo, capture_output=True, text=True, check=True)
    print(f"$ sandbox comments {run_id}\n{listed.stdout}", end="")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--screenshots", default="docs", help="Write the screenshots into DIR.")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-ui-review-")
    home = os.path.join(root, "home")
    os.makedirs(home)
    os.environ.update({"HOME": home, "XDG_DATA_HOME": os.path.join(home, "data"), "GIT_CONFIG_NOSYSTEM": "1"})
    os.environ.update({"SANDBOX_HOOK_AUTOSTART": "0", "TZ": "UTC"})
    os.environ.update({"GIT_AUTHOR_NAME": "Demo", "GIT_AUTHOR_EMAIL": "demo@example.com"})
    os.environ.update({"GIT_COMMITTER_NAME": "Demo", "GIT_COMMITTER_EMAIL": "demo@example.com"})
    try:
        repo, run_id = build(root)
        shoot(repo, run_id, os.path.abspath(args.screenshots))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
