"""A real terminal for the interactive tests: a private tmux server, a shell in one pane, bounded waits.

Each :class:`Terminal` has its own server socket (nothing of the developer's tmux is touched), a
``bash`` without start-up files whose environment is the one given, and helpers that type keys and
poll the pane. Every wait is bounded and fails with the screen it last saw.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

WIDTH, HEIGHT = 160, 45
PROMPT = "READY$ "


class Terminal:
    """``with Terminal(tmp_path, env, cwd) as term:`` then ``term.run("cmd")``, ``term.wait_for(...)``."""

    def __init__(self, where: Path, env: dict[str, str], cwd: Path) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is not installed; the interactive tests need it (Debian: apt-get install tmux).")
        self.socket = str(where / "tmux.sock")
        self.env = {**env, "TERM": "xterm-256color", "HISTFILE": "/dev/null"}
        self.cwd = cwd

    def _tmux(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            ["tmux", "-S", self.socket, *args], env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def __enter__(self) -> Terminal:
        shell = f"env PS1='{PROMPT}' bash --norc --noprofile"
        self._tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(WIDTH), "-y", str(HEIGHT),
                   "-c", str(self.cwd), shell)  # fmt: skip
        self._tmux("set-option", "-g", "history-limit", "5000")
        self.wait_for(re.escape(PROMPT.rstrip()), timeout=15)  # capture-pane drops trailing blanks
        return self

    def __exit__(self, *exc: object) -> None:
        self._tmux("kill-server", check=False)

    def screen(self) -> str:
        """The visible pane, one string."""
        return self._tmux("capture-pane", "-p", "-t", "t")

    def history(self) -> str:
        """Everything the pane showed, scrolled-off lines included."""
        return self._tmux("capture-pane", "-p", "-S", "-", "-t", "t")

    def keys(self, *keys: str) -> None:
        """Send tmux key names (``Enter``, ``Down``, ``Escape``, ``C-c``)."""
        self._tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        """Type ``text`` literally (no key names)."""
        self._tmux("send-keys", "-t", "t", "-l", text)

    def run(self, command: str) -> None:
        """Type a shell command and Enter."""
        self.type(command)
        self.keys("Enter")

    def wait_for(self, pattern: str, timeout: float = 60.0, *, history: bool = False) -> str:
        """Poll the pane until ``pattern`` (a regex) shows; the screen then. Fails with the last screen."""
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.history() if history else self.screen()
            if re.search(pattern, seen):
                return seen
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} did not show within {timeout} s; the terminal showed:\n{seen}")

    def wait_prompt(self, timeout: float = 60.0) -> str:
        """Wait until the shell's prompt is the last non-empty line (the command ended)."""
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            seen = self.screen()
            lines = [line for line in seen.splitlines() if line.strip()]
            if lines and lines[-1] == PROMPT.rstrip():
                return seen
            time.sleep(0.1)
        raise AssertionError(f"the shell prompt did not come back within {timeout} s; the terminal showed:\n{seen}")

    def settle(self, seconds: float = 0.7) -> None:
        """Give a screen that just showed a moment to take keys (an agent's UI draws before it reads)."""
        time.sleep(seconds)

    def press_until(self, key: str, pattern: str, timeout: float = 15.0, every: float = 2.0) -> str:
        """Press ``key`` until ``pattern`` shows (a UI may drop keys typed while it is still starting).

        For keys that are harmless to repeat once the screen changed (moving a selection)."""
        deadline = time.monotonic() + timeout
        while True:
            self.keys(key)
            try:
                return self.wait_for(pattern, timeout=min(every, max(0.1, deadline - time.monotonic())))
            except AssertionError:
                if time.monotonic() >= deadline:
                    raise
