"""``list_files``' glob is the model's input: a pattern Python's ``re`` would backtrack on for hours
(and hold the GIL, stopping the whole server) answers at once, with the same meaning either way."""

from __future__ import annotations

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
