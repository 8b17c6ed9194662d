"""``sandbox ui`` in headless chromium: how long a run of many calls takes to show, and the screenshots.

``python -m bench.ui_page [--calls 500] [--diff-lines 10000] [--repeat 5] [--screenshots DIR]``

Builds a throwaway repository with one run of ``--calls`` recorded calls (one file each) and a call
that rewrites a ``--diff-lines`` file, serves it with the real ``sandbox ui``, and reads when the
page is in place (the ``sandbox-shown`` mark from navigation start: the shell fetched the page with
the token and its script runs) for the runs page and the run page: median of ``--repeat`` loads
(issue #23: within 1 s for 500 calls; a 10,000-line diff paginated, never one blocking render).
With ``--screenshots DIR`` it writes the main pages as PNG files there (``make screenshots`` writes them into docs/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@contextlib.contextmanager
def served(repo: str) -> Iterator[str]:
    """The real ``sandbox ui`` of ``repo``, no browser of its own: its first address (the token in the
    fragment, as a browser is handed it); stopped as a user stops it (SIGINT) afterwards."""
    exe = os.path.join(os.path.dirname(sys.executable), "sandbox")
    proc = subprocess.Popen([exe, "ui", "--no-browser", "--json"], cwd=repo, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        yield str(json.loads(proc.stdout.readline())["url"])
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def launch(pw: Playwright) -> Browser:
    """Debian's chromium, headless, as the tests drive it."""
    return pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])


def _git(cwd: str, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def build(root: str, calls: int, diff_lines: int) -> tuple[str, list[str]]:
    """A repository with a run of ``calls`` calls and a big rewrite, a second run (a rename, a binary
    file, a mode change, a connection its allowlist refused), a planned call, and a check in each."""
    import datetime

    from sandbox.agent.netrecord import _Recorder
    from sandbox.confine.proxy import Refusal
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    repo = os.path.join(root, "project")
    os.makedirs(os.path.join(repo, "src"))
    for i in range(20):
        with open(os.path.join(repo, "src", f"mod{i}.py"), "w", encoding="utf-8") as fh:
            fh.write("".join(f"value_{j} = {j}\n" for j in range(40)))
    with open(os.path.join(repo, "big.txt"), "w", encoding="utf-8") as fh:
        fh.write("".join(f"line {j}\n" for j in range(diff_lines)))
    with open(os.path.join(repo, "logo.png"), "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with open(os.path.join(repo, "build.sh"), "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\nmake\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=Bench", "-c", "user.email=b@example.com", "commit", "-qm", "initial")
    project, workdir, _ = Project.discover(repo)
    assert workdir is not None
    exe = os.path.join(os.path.dirname(sys.executable), "sandbox")
    made = subprocess.run([exe, "start", "--count", "2", "--label", "try", "--json"], cwd=repo, capture_output=True)
    ids = [r["run"] for r in json.loads(made.stdout)["runs"]]  # best of two, from one snapshot
    for run_id, label in zip(ids, ("try-1", "try-2"), strict=True):
        run = Run.open(project, run_id)
        count = calls if label == "try-1" else 3
        for n in range(count):
            with run.tool_call("edit_file", {"path": f"src/mod{n % 20}.py"}) as call:
                text = "".join(f"value_{j} = {j}\n" for j in range(40)).replace("value_3 =", f"value_3_{n} =")
                call.write(f"src/mod{n % 20}.py", text)
        if label == "try-1":
            with run.tool_call("run_command", {"argv": ["sh", "-c", "rewrite big.txt"]}) as call:
                call.write("big.txt", "".join(f"LINE {j}\n" for j in range(diff_lines)))
            with run.tool_call("run_command", {"argv": ["make", "test"]}) as call:
                call.failed_with = "exit code 2"
            run.plan_call("deploy", {"env": "staging"})
        else:
            refused = _Recorder(run, "session-1")
            with run.tool_call("run_command", {"argv": ["pip", "install", "requests"]}) as call:
                refused(Refusal("pypi.org", 443, datetime.datetime.now(datetime.timezone.utc), "CONNECT"))
                call.failed_with = "exit code 1"
            with run.tool_call("refactor", {"path": "src/mod1.py"}) as call:
                call.rename("src/mod1.py", "src/values.py")
                call.write("src/values.py", "".join(f"value_{j} = {j}\n" for j in range(40)).replace("= 5", "= 50"))
                call.write("logo.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 5)
                call.chmod("build.sh", True)
    # compare --check: a recorded 'check' call in each run (the compare page shows its result).
    subprocess.run(
        [exe, "compare", *ids, "--check", "test -f src/values.py", "--isolate", "off"], cwd=repo, capture_output=True
    )
    return repo, ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--diff-lines", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--screenshots", default=None, help="Write the main pages as PNG files into DIR.")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    root = tempfile.mkdtemp(prefix="bench-ui-")
    home = os.path.join(root, "home")
    os.makedirs(home)
    os.environ.update({"HOME": home, "XDG_DATA_HOME": os.path.join(home, "data"), "GIT_CONFIG_NOSYSTEM": "1"})
    os.environ.update({"SANDBOX_HOOK_AUTOSTART": "0", "TZ": "UTC"})
    try:
        repo, ids = build(root, args.calls, args.diff_lines)
        with served(repo) as url:
            base = url.split("/#", 1)[0]
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(url)
                page.wait_for_selector("html[data-shown]", state="attached")
                timings: dict[str, list[float]] = {"runs page": [], f"run page ({args.calls} calls)": []}
                for _ in range(args.repeat):
                    for name, path in (("runs page", "/"), (f"run page ({args.calls} calls)", f"/run/{ids[0]}")):
                        # The address loads the shell, whose script fetches the page with the token
                        # (sandbox/ui/auth.py): the page's DOMContentLoaded is its 'sandbox-shown' mark,
                        # set when the fetched page is in place and its script runs.
                        page.goto(base + path, wait_until="domcontentloaded")
                        page.wait_for_selector("html[data-shown]", state="attached")
                        shown = "() => performance.getEntriesByName('sandbox-shown')[0].startTime"
                        ms = page.evaluate(shown)
                        timings[name].append(float(ms))
                big = page.locator(".file[data-path='big.txt'] pre.diff span").count()
                for name, values in timings.items():
                    print(
                        f"{name}: in place (its DOMContentLoaded) median {statistics.median(values):.0f} ms "
                        f"(min {min(values):.0f}, max {max(values):.0f}, n={len(values)})"
                    )
                print(f"{args.diff_lines}-line rewrite: {big} diff lines rendered with the page (the rest on demand)")
                if args.screenshots:
                    os.makedirs(args.screenshots, exist_ok=True)
                    shots = {
                        "ui-runs.png": "/",
                        "ui-run.png": f"/run/{ids[1]}",
                        "ui-compare.png": f"/compare?run={ids[0]}&run={ids[1]}",
                        "ui-approvals.png": "/approvals",
                    }
                    for name, path in shots.items():
                        page.goto(base + path, wait_until="networkidle")
                        page.screenshot(path=os.path.join(args.screenshots, name))
                        print(f"wrote {os.path.join(args.screenshots, name)}")
                    # The changes of the small run: a rename, a binary file, a mode change, coloured lines.
                    page.goto(base + f"/run/{ids[1]}", wait_until="networkidle")
                    page.evaluate("document.getElementById('pick').scrollIntoView()")
                    page.wait_for_selector("#diff span.hl")
                    page.screenshot(path=os.path.join(args.screenshots, "ui-run-changes.png"))
                    print(f"wrote {os.path.join(args.screenshots, 'ui-run-changes.png')}")
                    narrow = browser.new_page(viewport={"width": 600, "height": 1000})
                    narrow.goto(url)
                    narrow.goto(base + f"/run/{ids[1]}", wait_until="networkidle")
                    narrow.screenshot(path=os.path.join(args.screenshots, "ui-run-narrow.png"))
                    print(f"wrote {os.path.join(args.screenshots, 'ui-run-narrow.png')}")
                browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
