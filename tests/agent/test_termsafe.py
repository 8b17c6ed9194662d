"""A command's output reaches the user's terminal drawing, not acting (issue 31/32 leftovers).

``sandbox exec`` on a real pseudo-terminal (:func:`tests.conftest.on_pty`): the command's OSC 52
(clipboard), OSC 0 (title), DCS, APC, device reports and resets do not reach the terminal, its colours,
carriage returns and cursor movement (a progress bar) do; on a pipe the bytes stay exact, and exit codes
pass through either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.agent.termsafe import STRING_LIMIT, TerminalFilter
from tests.conftest import on_pty, sandbox_cmd

HOSTILE = (
    b"\x1b]52;c;aGFja2Vk\x07"  # OSC 52: write the clipboard
    b"\x1b]0;owned\x1b\\"  # OSC 0: the window title
    b"\x1bP+q544e\x1b\\"  # DCS: a terminfo query (the terminal answers on its input)
    b"\x1b_apc\x1b\\"  # APC
    b"\x1b[6n\x1b[21t\x1b[>c"  # reports: the terminal types an answer
    b"\x05"  # ENQ: the answerback
    b"\x1bc"  # RIS: a full reset
    b"\xc2\x9d1;x\xc2\x9c"  # OSC as a C1 control in UTF-8
    b"\x1b[?1000h"  # mouse reporting left on
    b"\x1b[3J"  # the scrollback erased
)
DRAWING = b"\x1b[1;31mred\x1b[0m\r 10%\x1b[K\r 99%\x1b[2A\x1b[?25l\x1b[?25h\x1b(0q\x1b(B caf\xc3\xa9\n"


def octal(data: bytes) -> str:
    """``data`` as printf's octal escapes."""
    return "".join(f"\\{b:03o}" for b in data)


def printf_argv(data: bytes) -> list[str]:
    """A command that writes ``data`` exactly."""
    return ["printf", octal(data)]


def start(repo: Path) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["run"])


def test_the_filter_keeps_drawing_and_drops_acting_in_any_chunking() -> None:
    data = b"a" + HOSTILE + b"b" + DRAWING
    whole = TerminalFilter().feed(data)
    assert whole == b"a1;xb" + DRAWING  # the C1 opener dropped: what it held is shown as text
    one = TerminalFilter()
    assert b"".join(one.feed(data[i : i + 1]) for i in range(len(data))) == whole
    # An unterminated string swallows only so much, then the rest is text (its opener never went out).
    long = TerminalFilter()
    shown = long.feed(b"\x1b]52;c;" + b"A" * (STRING_LIMIT + 10)) + long.feed(b"tail")
    assert b"\x1b" not in shown and shown.endswith(b"tail") and len(shown) < 100


def test_exec_on_a_terminal_draws_but_does_not_act(repo: Path) -> None:
    run_id = start(repo)
    code, screen = on_pty("exec", run_id, "--", *printf_argv(b"x" + HOSTILE + b"y" + DRAWING), cwd=repo)
    assert code == 0, screen
    assert b"xy" in screen
    assert DRAWING.replace(b"\n", b"\r\n") in screen or DRAWING in screen
    for bad in (
        b"\x1b]",
        b"\x1bP",
        b"\x1b_",
        b"\x1b[6n",
        b"\x1b[21t",
        b"\x05",
        b"\x1bc",
        b"\xc2\x9d",
        b"?1000h",
        b"[3J",
    ):
        assert bad not in screen, bad


@pytest.mark.parametrize("code", [0, 3])
def test_exec_on_a_pipe_passes_the_bytes_exactly_and_the_exit_code(repo: Path, code: int) -> None:
    run_id = start(repo)
    data = b"x" + HOSTILE + DRAWING
    argv = ["sh", "-c", f"printf '{octal(data)}'; exit {code}"]
    proc = sandbox_cmd("exec", run_id, "--", *argv, cwd=repo)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == data
    on_terminal, screen = on_pty("exec", run_id, "--", *argv, cwd=repo)
    assert on_terminal == code
    assert b"\x1b]52" not in screen
