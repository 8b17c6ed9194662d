"""What the agent wrote cannot act on the user's terminal: no escape sequence, bell, C1 control or
bidi override it put in a file name, a tool name, a command, an error, a call id, a denial reason, a
commit subject or a checkpoint label reaches the terminal of ``sandbox log``, ``status``, ``apply``,
``list`` or ``checkpoints`` as it is, and no newline in them forges a line of output
(:mod:`sandbox.cli.escape`). Checked on a real pseudo-terminal with colour off, so that any ESC in
the output came from the agent (click strips colour codes only when the output is not a terminal)."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import git, on_pty, sandbox_cmd
from tests.run.test_names import start

#: An OSC 52 clipboard write, a screen clear, a bell, a forged line and a bidi override.
EVIL = "evil\x1b]52;c;cHduZWQ=\x07\x1b[2J\nFORGED line\u202etxt.exe"
#: Bytes that must never reach the terminal as they are.
FORBIDDEN = [b"\x1b", b"\x07", "\u202e".encode(), "\u009b".encode()]


def test_nothing_the_agent_wrote_acts_on_the_terminal(repo: Path) -> None:
    run = start(repo, label="hostile")
    rid = run.run_id
    # A file with that name, made by a real command whose argv holds it too.
    made = sandbox_cmd("exec", rid, "--", sys.executable, "-c", f"open({EVIL!r}, 'w').write('x')", cwd=repo)
    assert made.returncode == 0, made.stderr
    # A tool name, a command, an error and a call id of the agent's choosing.
    call = run.start_call(
        "Bash\x1b]0;pwned\x07", {"command": "echo \x1b[2J"}, call_id="toolu_\x1b[2Jx", idempotency="idempotent"
    )
    run.finish_call(call, "failed", error="boom\x1b[2J\nFORGED error")
    # A planned call denied with a reason that holds an escape.
    planned = sandbox_cmd("call", "plan", rid, "--tool", "Write", "--input", '{"path": "p"}', cwd=repo)
    assert planned.returncode == 0, planned.stderr
    denied = sandbox_cmd("deny", rid, planned.stdout.decode().strip(), "--reason", "no\x1b[2J\u009b2J", cwd=repo)
    assert denied.returncode == 0, denied.stderr
    # A commit of the agent's own in the run's git, its subject an escape sequence.
    who = ["-c", "user.name=a", "-c", "user.email=a@a"]
    git(run.worktree, *who, "commit", "-q", "--allow-empty", "-m", "\x1b[2Jsubject")
    checkpoint = sandbox_cmd("checkpoint", rid, "--label", "c1\u009b2J", cwd=repo)
    assert checkpoint.returncode == 2, checkpoint.stderr  # a label holds no control character at all

    env: dict[str, str | None] = {"NO_COLOR": "1", "GIT_PROGRESS_DELAY": "600", "GIT_PAGER": "cat"}
    for args in (
        ["log", rid],
        ["log", rid, "--call", "1"],
        ["log", rid, "--call", "2"],
        ["log", rid, "--call", "3"],
        ["status", rid],
        ["apply", rid, "--dry-run"],
        ["list"],
        ["checkpoints", rid],
        ["diff", rid, "--stat"],
    ):
        code, screen = on_pty(*args, cwd=repo, env=env)
        assert code in (0, 1), (args, screen)
        # diff's lines are git's: git quotes control characters in names, and leaves other text
        # (a bidi override) as it is, as `git diff` does.
        for bad in FORBIDDEN[:2] if args[0] == "diff" else FORBIDDEN:
            assert bad not in screen, (args, bad, screen)
        assert not any(line.startswith(b"FORGED") for line in screen.splitlines()), (args, screen)
    code, screen = on_pty("log", rid, cwd=repo, env=env)
    assert b'"evil\\033]52;c;cHduZWQ=\\a\\033[2J\\nFORGED line\\u202etxt.exe"' in screen  # as git quotes it


def test_escape_rules() -> None:
    from sandbox.cli import escape

    assert escape.path("src/é ü.txt") == "src/é ü.txt"  # readable text stays as it is
    assert escape.path("a\tb") == '"a\\tb"' and escape.text("a\tb") == "a\\tb"
    assert escape.path('say "hi"\\') == '"say \\"hi\\"\\\\"' and escape.text('say "hi"') == 'say "hi"'
    assert escape.path("caf\udce9") == '"caf\\351"'  # a byte that is not UTF-8, as git writes it
    assert escape.text("\x1b[31m\x07\x7f\u0085\u009b") == "\\033[31m\\a\\177\\205\\233"
    assert escape.text("rtl\u202eexe\u2066\u2028\ufeff") == "rtl\\u202eexe\\u2066\\u2028\\ufeff"
    assert escape.lines("one\ntwo\x1b") == ["one", "two\\033"]


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_escaped_text_holds_nothing_a_terminal_acts_on(value: str) -> None:
    from sandbox.cli import escape

    for shown in (escape.text(value), escape.path(value)):
        assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or 0xD800 <= ord(ch) <= 0xDFFF for ch in shown)
        assert not set(shown) & set("\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
        shown.encode("utf-8")  # printable under any UTF-8 locale
    if escape.text(value) == value and '"' not in value and "\\" not in value:
        assert escape.path(value) == value  # nothing to escape: shown as it is
