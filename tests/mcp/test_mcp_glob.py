"""``list_files``' glob is the model's input: a pattern Python's ``re`` would backtrack on for hours
(and hold the GIL, stopping the whole server) answers at once, with the same meaning either way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.errors import UsageError
from sandbox.mcp import find

PATTERNS = [
    "*.py",
    "**/*.py",
    "src/**/*.ts",
    "a/*/c",
    "*a*b*c*",
    "**a**b",
    "**/x/**/y*z?",
    "t?st_*_*.py",
    "[abc]*[!x].txt",
    "[a-c]?/**",
    "*[*]*",
    "**",
    "a/b",
    "**/",
]
PATHS = [
    "a.py",
    "src/a.py",
    "src/x/y/z.ts",
    "src/z.ts",
    "a/b/c",
    "a/b/x/c",
    "xaybzc",
    "x/a/y/b",
    "ab",
    "q/x/r/s/y1z2",
    "x/yz3",
    "test_a_b.py",
    "tst_a_b.py",
    "b1.txt",
    "a/x.txt",
    "c1/d/e",
    "x*y",
    "a/b",
    "a/b/",
    "",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_state_walk_means_what_the_regular_expression_means(pattern: str) -> None:
    glob = find.glob_regex(pattern)
    by_states = find.glob_regex(pattern)
    by_states.regex = None  # force the one-step-per-character walk
    regex = re.compile(glob.text, re.DOTALL)  # what the regular expression means, stars or not
    for path in PATHS:
        assert by_states.fullmatch(path) == (regex.fullmatch(path) is not None), (pattern, path)


def test_what_the_globs_match() -> None:
    def m(pattern: str, path: str) -> bool:
        return find.glob_regex(pattern).fullmatch(path)

    assert m("*.py", "a/b/c.py") and m("*.py", "c.py") and not m("*.py", "c.pyc")
    assert m("t*_*_*.py", "d/test_a_b.py") and not m("t*_*_*.py", "d/test_a/b.py")  # the state walk
    assert m("**a**b*c", "x/a/y/bzc") and not m("**a**b*c", "x/a/y/b/c")
    assert m("[!x]*[!x]*[!x]", "abc") and not m("[!x]*[!x]*[!x]", "a/c")  # a negated class stays in a name
    assert m("[]]*", "]") and m("[a-]*", "-")


def test_a_crafted_pattern_answers_at_once(tmp_path: Path) -> None:
    # 7 star pairs over 60 characters took 8 s with re; 12 would take years (and hold the GIL).
    code = (
        "from sandbox.mcp import find\n"
        "g = find.glob_regex('*a' * 12 + '*b')\n"
        "assert not g.fullmatch('a' * 250)\n"
        "assert not g.fullmatch('/'.join(['a' * 200] * 20))\n"
        "assert g.fullmatch('a' * 30 + 'b')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_backwards_range_is_one_sentence() -> None:
    with pytest.raises(UsageError, match="runs backwards"):
        find.glob_regex("[z-a].txt")


def test_a_name_that_is_not_utf8_is_shown_and_the_answer_can_be_sent(tmp_path: Path) -> None:
    """An answer is sent as UTF-8 JSON: a file name with a byte that is not UTF-8 (the model's, or in
    the user's tree) came back as a lone surrogate, and the SDK failed to encode the whole answer."""
    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    assert ws.run is not None
    os.mkdir(os.path.join(os.fsencode(ws.run.worktree), b"sub"))
    with open(os.path.join(os.fsencode(ws.run.worktree), b"sub", b"caf\xff.txt"), "wb") as f:
        f.write(b"hello\n")
    for answer in (ws.list_files("sub"), ws.list_files(pattern="*.txt"), ws.search("hello")):
        answer.encode("utf-8")  # strict: what the SDK does with it
        assert "caf\\xff.txt" in answer, answer


SEARCH_CHILD = """
import sys
from sandbox.errors import UsageError
from sandbox.mcp.state import Settings
from sandbox.mcp.workspace import Workspace
from sandbox.store.project import Project

project, workdir, _run = Project.discover(sys.argv[1])
project.data_root = sys.argv[2]
ws = Workspace(project, workdir, Settings(data_root=project.data_root))
ws.start_run()
with open(ws.run.worktree + "/input.txt", "w") as f:
    f.write("a" * 40 + "b\\n")
try:
    print(ws.search("(a+)+$"))
except UsageError as exc:
    print("REFUSED", exc.message)
"""


def test_a_search_pattern_past_pcres_backtracking_limit_is_refused_not_run_again_in_python(tmp_path: Path) -> None:
    """git grep gives up on '(a+)+$' over 'aaaa...ab' (PCRE's match limit); the fallback ran the same
    pattern through Python's re, which has no limit and holds the GIL: the server stopped for ever."""
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    proc = subprocess.run(
        [sys.executable, "-c", SEARCH_CHILD, str(repo), str(tmp_path / "data")],
        capture_output=True,
        timeout=120,
        check=True,
    )
    out = proc.stdout.decode()
    assert out.startswith("REFUSED") and "backtrack" in out, out


def test_a_command_that_makes_a_name_that_is_not_utf8_gets_an_answer_that_can_be_sent(tmp_path: Path) -> None:
    """``run_command`` listing a changed file whose name is not UTF-8 (it was a lone surrogate in the
    answer, and the SDK's failure to encode it ended the whole server)."""
    import json

    from sandbox.mcp.state import Settings
    from sandbox.mcp.workspace import Workspace
    from sandbox.store.project import Project
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    project, workdir, _run = Project.discover(str(repo))
    project.data_root = str(tmp_path / "data")
    ws = Workspace(project, workdir, Settings(data_root=project.data_root))
    ws.start_run()
    result = ws.run_command("printf hi > \"$(printf 'caf\\377.txt')\"; printf '\\377\\n'")
    answer = json.dumps(result.to_json(), ensure_ascii=False)
    answer.encode("utf-8")  # strict: what the SDK does with it
    assert "caf\\\\xff.txt" in answer, answer
