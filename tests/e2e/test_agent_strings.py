"""Every string of the agent's reaches a person escaped, by one function (issue 32, item 5): file
content on a terminal with no pager (``diff``, ``log -p``), through a pager only as the pager shows
it, commit messages ``branch`` writes, labels, ``log``'s paths, the review page's names. The agent
plants OSC 0 (title), OSC 52 (clipboard), an RLO and a zero-width space in a file's content, its
name and its command."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from sandbox import escape
from tests.conftest import git, on_pty, sandbox_cmd
from tests.run.test_names import start

CONTENT = "title\x1b]0;pwned\x07 clip\x1b]52;c;cHduZWQ=\x07 rlo\u202eexe zw\u200bx\n"
NAME = "invoice\u202efdp.sh"
ZW_NAME = "a\u200bb.txt"
#: Never on the terminal as they are: ESC ] (an OSC), BEL, the RLO, the zero-width space.
RAW = [b"\x1b]", b"\x07", "\u202e".encode(), "\u200b".encode()]
WRITE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2]); open(sys.argv[3], 'w').write('z')"


def _planted(repo: Path) -> str:
    run = start(repo)
    made = sandbox_cmd("exec", run.run_id, "--", sys.executable, "-c", WRITE, NAME, CONTENT, ZW_NAME, cwd=repo)
    assert made.returncode == 0, made.stderr
    return run.run_id


def test_escape_shows_bidi_zero_width_and_controls_and_keeps_colour_for_a_terminal() -> None:
    assert escape.text("a\u200bb\u200c\u200d\u2060\u061c\ufeff") == "a\\u200bb\\u200c\\u200d\\u2060\\u061c\\ufeff"
    assert escape.text("\u200e\u200f\u202a\u2066\u2069") == "\\u200e\\u200f\\u202a\\u2066\\u2069"
    assert escape.suspicious(NAME) and not escape.suspicious("naïve.txt")
    assert escape.message("one\x1b]0;t\x07\ntwo\u202e") == "one\\033]0;t\\a\ntwo\\u202e"
    coloured = "\x1b[32m+ok\x1b]52;c;eA==\x07\x1b[m\n\tx\u202e\n"
    assert escape.terminal(coloured) == "\x1b[32m+ok\\033]52;c;eA==\\a\x1b[m\n\tx\\u202e\n"


def test_content_reaches_a_terminal_escaped_without_a_pager_and_raw_only_into_a_pipe(repo: Path) -> None:
    rid = _planted(repo)
    for args, env in (
        (["diff", rid, "--no-pager"], {}),
        (["--no-pager", "log", rid, "-p"], {}),
        (["diff", rid, "--color=always", "--no-pager"], {}),
        (["diff", rid], {"GIT_PAGER": "cat"}),  # cat is no pager (as for git): written straight
        (["log", rid, "-p"], {"GIT_PAGER": "cat"}),
    ):
        code, screen = on_pty(*args, cwd=repo, env={"GIT_PROGRESS_DELAY": "600", **env})
        assert code == 0, (args, screen)
        for raw in RAW:
            assert raw not in screen, (args, raw, screen)
        assert b"\\033]52;c;cHduZWQ=\\a" in screen and b"rlo\\u202eexe zw\\u200bx" in screen, (args, screen)
    coloured = on_pty("diff", rid, "--color=always", "--no-pager", cwd=repo)[1]
    assert b"\x1b[32m" in coloured  # the colour is git's and stays
    # Into a pipe (a file, another program) the patch is the patch.
    piped = sandbox_cmd("diff", rid, cwd=repo).stdout
    assert CONTENT.encode().rstrip(b"\n") in piped


@pytest.mark.skipif(shutil.which("less") is None, reason="less is not installed")
def test_through_less_the_pager_shows_the_content_and_no_osc_reaches_the_terminal(repo: Path) -> None:
    rid = _planted(repo)
    code, screen = on_pty("diff", rid, cwd=repo, env={"GIT_PAGER": "less -R", "LESS": "FRX"})
    assert code == 0, screen
    assert b"\x1b]" not in screen and b"\x07" not in screen, screen  # less -R passes colour only


def test_branch_writes_the_agents_command_and_names_escaped_into_its_commit_messages(repo: Path) -> None:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    rid = _planted(repo)
    run = Run.open(Project.discover(str(repo))[0], rid)
    # A tool name and a call id of the agent's choosing (as a hook hands them over).
    call = run.start_call("Write\x1b]0;t\x07", {"file_path": "w\u202e.txt"}, call_id="toolu_\x1b[2J\u200bx")
    Path(run.worktree, "w\u202e.txt").write_text("w\n")
    run.finish_call(call, "succeeded", paths=["w\u202e.txt"])
    made = sandbox_cmd("branch", rid, "agent-work", cwd=repo)
    assert made.returncode == 0, made.stderr
    messages = git(repo, "log", "--format=%B", "agent-work").encode()
    for raw in RAW:
        assert raw not in messages, (raw, messages)
    assert b"\\033]52;c;cHduZWQ=\\a" in messages and b'"invoice\\u202efdp.sh"' in messages
    assert b"Write\\033]0;t\\a: w\\u202e.txt" in messages and b"toolu_\\033[2J\\u200bx" in messages


def test_a_label_with_bidi_or_zero_width_characters_is_refused(repo: Path) -> None:
    for label in ("pay\u202etxt.exe", "a\u200bb", "t\x1b]0;x\x07"):
        made = sandbox_cmd("start", "--label", label, cwd=repo)
        assert made.returncode == 2, made.stderr
        assert b"without control, bidi or zero-width characters" in made.stderr
        for raw in RAW:
            assert raw not in made.stderr


def test_log_shows_a_zero_width_space_and_an_rlo_in_a_path(repo: Path) -> None:
    rid = _planted(repo)
    code, screen = on_pty("log", rid, cwd=repo, env={"NO_COLOR": "1"})
    assert code == 0, screen
    assert b'"a\\u200bb.txt"' in screen and b'"invoice\\u202efdp.sh"' in screen
    for raw in RAW:
        assert raw not in screen


def test_the_page_shows_names_escaped_and_flagged(repo: Path) -> None:
    from sandbox.run.run import Run
    from sandbox.store.project import Project
    from sandbox.ui import diffs, pages

    rid = _planted(repo)
    planted = Run.open(Project.discover(str(repo))[0], rid)
    # data-path holds the name as it is, for the page's script to send back (never shown).
    # File content (<pre class='diff'>) is the diff's, shown as the file holds it.
    page = re.sub("data-path='[^']*'|<pre class='diff'>.*?</pre>", "", pages.run_page(planted), flags=re.S)
    diff = diffs.run_diff(planted, 0)
    for html in (page, diff):
        assert "<code>&quot;invoice\\u202efdp.sh&quot;</code> <span class='badge warn'" in html
    for ch in ("\u202e", "\u200b"):  # names, the command
        assert ch not in page, page[max(page.find(ch) - 300, 0) : page.find(ch) + 100]
    assert "invoice\u202efdp.sh" not in re.sub("data-path='[^']*'", "", diff)


def test_the_hunk_prompt_shows_the_agents_lines_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from sandbox.cli import hunkprompt

    hunkprompt._show(("@@ -1 +1 @@\n+" + CONTENT).encode())
    shown = capsys.readouterr().out
    assert "\x1b]" not in shown and "\x07" not in shown and "\u202e" not in shown and "\u200b" not in shown
    assert "+title\\033]0;pwned\\a clip\\033]52;c;cHduZWQ=\\a rlo\\u202eexe zw\\u200bx" in shown
