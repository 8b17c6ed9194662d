"""``make screenshots``' review walk (bench/ui_review.py) in a real chromium: every step's picture is
written, and the workflow's commands answer as the README shows them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled
from tests.ui.test_ui import CHROMIUM

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_the_review_walk_writes_each_screenshot(tmp_path: Path) -> None:
    out = tmp_path / "shots"
    done = subprocess.run(
        [sys.executable, "-m", "bench.ui_review", "--screenshots", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr
    for name in ("ui-review.png", "ui-comment.png", "ui-conflicts.png", "ui-review-800.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000, name
    assert "src/app.py:11 (call #1)  [not sent yet]" in done.stdout
    assert "Why 30? Keep 3 unless a test needs it." in done.stdout
