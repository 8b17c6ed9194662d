"""Which ``sandbox run`` session a process belongs to, read from its ancestors (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbox.agent import procs
from tests.conftest import wait_until

# The first process sets nothing (it stands for the session's first process, which sandbox run starts with
# the token), starts a child with an environment of its own (as Codex starts its MCP servers), whose child
# claims another session in its own environment; the last one writes its pid and sleeps.
_CHAIN = """
import os, subprocess, sys
out = sys.argv[1]
inner = "import os, subprocess, sys; subprocess.run([sys.executable, '-c', " \\
        "'import os, sys, time; open(sys.argv[1], \\"w\\").write(str(os.getpid())); time.sleep(60)', sys.argv[1]], " \\
        "env={'SANDBOX_SESSION': 'claimed', 'PATH': os.environ['PATH']})"
subprocess.run([sys.executable, "-c", inner, out], env={"PATH": os.environ["PATH"]})
"""


def test_a_process_started_without_the_token_does_not_cut_it_from_its_session(tmp_path: Path) -> None:
    out = tmp_path / "pid"
    env = {**os.environ, procs.ENV_VAR: "the-session"}
    first = subprocess.Popen([sys.executable, "-c", _CHAIN, str(out)], env=env)
    try:
        wait_until(lambda: out.exists() and out.read_text(), timeout=30)
        last = int(out.read_text())
        assert procs.token_of(last) == "claimed"
        assert procs.token_of(procs.parent(last) or 0) is None  # the middle one has none
        # The session is the highest ancestor's: neither the gap nor the claim below it changes that.
        assert procs.session_of(last) == "the-session"
    finally:
        for proc in procs.descendants(first.pid):
            os.kill(proc.pid, 9)
        first.kill()
        first.wait()
