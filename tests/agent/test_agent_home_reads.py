"""The run's copies in an agent home are read beneath the run's agent-state directory, through no link.

The agent writes everything below ``agent-state/homes/``: a directory there swapped for a link to a
secret masked inside (the user's own ``~/.claude``) must not be read as the run's state by the
unconfined ``sandbox run`` that seeds the home.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sandbox.agent import agenthome


def test_a_home_swapped_for_a_link_is_not_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    home = Path(agenthome.home_of(str(run_dir), "claude"))
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"theme": "run's"}))
    assert agenthome.read_json(str(home / "settings.json"), follow=False) == {"theme": "run's"}
    outside = tmp_path / "users-claude"
    outside.mkdir()
    (outside / "settings.json").write_text(json.dumps({"secret": "the user's"}))
    home.rename(tmp_path / "put-aside")
    os.symlink(outside, home)
    assert agenthome.read_json(str(home / "settings.json"), follow=False) is None
    os.unlink(home)
    home.mkdir()
    (home / "sub").symlink_to(outside)  # a link deeper down, and a FIFO: neither read, neither waits
    os.mkfifo(home / "fifo.json")
    assert agenthome.read_json(str(home / "sub" / "settings.json"), follow=False) is None
    assert agenthome.read_json(str(home / "fifo.json"), follow=False) is None
