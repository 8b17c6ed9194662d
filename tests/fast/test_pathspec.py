"""git pathspecs: the sandbox's matching agrees with git's own (``git diff A B -- SPEC``) on real trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.errors import UsageError
from sandbox.fast.pathspec import Pathspec, wildmatch
from tests.conftest import git, make_repo

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

FILES = [
    "README.md",
    "setup.py",
    "Src.PY",
    "src/x.py",
    "src/a/y.py",
    "src/a/b/z.py",
    "src/a/b/z.txt",
    "src/*star.py",
    "src/q?.py",
    "docs/index.md",
    "docs/a.md",
    "tests/test_make.py",
    "tests/test_x.py",
    "we ird/f[1].txt",
    "caf\u00e9/menu.txt",
]

SPECS = [
    "src",
    "src/",
    "src/a",
    "*.py",
    "src/*.py",
    ":(glob)src/*.py",
    ":(glob)src/**/*.py",
    ":(glob)**/z.*",
    ":!src",
    ":(exclude)*.md",
    ":^tests/test_make.py",
    ":!:tests",
    ":(icase)src.py",
    ":(icase)SRC",
    ":(literal)src/*star.py",
    "src/*star.py",
    "src/q?.py",
    "we ird/f[1].txt",
    "we ird/f\\[1].txt",
    "[st]*",
    "src/a/b/z.[a-t]xt",
    "*[[:digit:]]*",
    "*[![:alpha:]]*",
    "sr*",
    ":(glob)sr*",
    ":/docs",
    "docs/../src/x.py",
    "**/a.md",
    ":(glob)**/a.md",
    ":(glob)src/**",
    "src/a*",
    "d?cs",
    ":(icase)*.PY",
    ":(glob,icase)SRC/*.PY",
    "caf\u00e9",
    "caf?/*",
    "*",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("ps") / "r", {f: "x\n" for f in FILES})


def git_selects(root: Path, cwd: Path, specs: list[str]) -> list[str]:
    out = git(cwd, "-c", "core.quotepath=off", "diff", "--name-only", "-z", EMPTY_TREE, "HEAD", "--", *specs)
    return sorted(p for p in out.split("\0") if p)


@pytest.mark.parametrize("prefix", ["", "src"])
@pytest.mark.parametrize("spec", SPECS)
def test_matching_agrees_with_git(tree: Path, prefix: str, spec: str) -> None:
    cwd = tree / prefix if prefix else tree
    for specs in ([spec], [spec, "*.py"], [spec, ":!src/a"]):
        ours = sorted(f for f in FILES if Pathspec(specs, prefix).matches(f))
        assert ours == git_selects(tree, cwd, specs), specs


def test_excludes_option_is_an_exclude_pathspec(tree: Path) -> None:
    spec = Pathspec(["src"], "", excludes=["src/a", ":(glob)**/*.txt"])
    assert sorted(f for f in FILES if spec.matches(f)) == git_selects(
        tree, tree, ["src", ":(exclude)src/a", ":(exclude,glob)**/*.txt"]
    )


def test_unmatched_and_bad_magic() -> None:
    spec = Pathspec(["src", "nothing/here", ":!docs"])
    assert spec.unmatched(["src/x.py"]) == ["nothing/here"]
    for bad in (":(attr:text)x", ":(nonsense)x", ":(literal,glob)x", "../outside", ":(exclude"):
        with pytest.raises(UsageError):
            Pathspec([bad])


def test_wildmatch_cases_from_git() -> None:
    # A few of git's t/t3070-wildmatch.sh cases (pathname mode is the glob magic).
    assert wildmatch(b"foo/**/bar", b"foo/bar", 2)
    assert wildmatch(b"foo/**/bar", b"foo/a/b/bar", 2)
    assert not wildmatch(b"foo*bar", b"foo/baz/bar", 2)
    assert wildmatch(b"foo*bar", b"foo/baz/bar", 0)
    assert wildmatch(b"**[!te]", b"ten", 0)
    assert not wildmatch(b"**[!ten]", b"ten", 0)
    assert wildmatch(b"*[al]?", b"ball", 0)
    assert wildmatch(b"[]]", b"]", 0)
    assert wildmatch(b"a[[:upper:]]c", b"abc", 1)
