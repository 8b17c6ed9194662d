"""Compiled pathspec matching (:func:`sandbox.fast.pathspec._compile`) decides exactly as the port of
git's rules (``_match_item``/``wildmatch``, itself checked against git in ``test_pathspec.py``), and
tests a path against the port only under the pathspec's literal prefix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.fast import pathspec
from sandbox.fast.pathspec import Item, Pathspec
from tests.conftest import examples

PATTERN = st.text(alphabet="ab/*?\\[]!-.A", max_size=9)
PATH = st.text(alphabet="ab/.*?[A", min_size=1, max_size=10)
MAGIC = st.sampled_from([{}, {"glob": True}, {"icase": True}, {"glob": True, "icase": True}, {"literal": True}])


def item(pattern: str, magic: dict[str, bool]) -> Item:
    return Item(original=pattern, pattern=pattern.encode(), **magic)


@settings(max_examples=examples(3000), deadline=None)
@given(PATTERN, MAGIC, st.lists(PATH, min_size=1, max_size=8))
def test_one_item_decides_as_the_port(pattern: str, magic: dict[str, bool], paths: list[str]) -> None:
    it = item(pattern, magic)
    test = pathspec._compile([it])
    for path in paths:
        raw = path.encode()
        assert bool(test(raw)) == pathspec._match_item(it, raw), (pattern, magic, path)


@settings(max_examples=examples(1000), deadline=None)
@given(st.lists(st.tuples(PATTERN, MAGIC), min_size=1, max_size=4), st.lists(PATH, min_size=1, max_size=8))
def test_a_list_decides_as_the_port(specs: list[tuple[str, dict[str, bool]]], paths: list[str]) -> None:
    items = [item(p, m) for p, m in specs]
    test = pathspec._compile(items)
    for path in paths:
        raw = path.encode()
        assert bool(test(raw)) == any(pathspec._match_item(i, raw) for i in items), (specs, path)


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("**/*.py", "a/b/c.py"),
        (":(glob)src/**/x.py", "src/x.py"),
        (":(glob)src/**", "src/a/b"),
        (":(glob)a\\/**", "a/b"),
        (":(icase)SRC/*.PY", "src/a/x.py"),
        ("caf\u00e9/*", "caf\u00e9/menu.txt"),
        (":(icase)x*\\A", "xyA"),  # git folds the path's byte, not an escaped one: never matches
    ],
)
def test_spelled_out_cases(pattern: str, path: str) -> None:
    parsed = pathspec.parse(pattern)
    assert parsed.matches(path) == pathspec._match_item(parsed, path.encode()) is ("A" not in pattern)


def test_the_port_runs_only_under_the_literal_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted, not timed: every path went through the port for every pathspec (which then compared
    the prefix); now a glob the regular expressions cover never reaches it, and one they do not
    (a ``[...]`` class) reaches it only for the paths under its literal prefix (``src/app/``)."""
    paths = [f"lib/m{i}/f{j}.py" for i in range(100) for j in range(10)] + [f"src/app/f{j}.py" for j in range(10)]
    calls: list[bytes] = []
    real = pathspec._match_item

    def counted(it: Item, name: bytes) -> bool:
        calls.append(name)
        return real(it, name)

    monkeypatch.setattr(pathspec, "_match_item", counted)
    spec = Pathspec(["src/app/*.py", ":(exclude)src/app/f[0-4].py"])
    chosen = [p for p in paths if spec.matches(p)]
    assert chosen == [f"src/app/f{j}.py" for j in range(5, 10)]
    assert len(calls) == 10 and all(c.startswith(b"src/app/") for c in calls)
    calls.clear()
    assert sum(Pathspec([":(glob)src/**/*.py", "*.md"]).matches(p) for p in paths) == 10
    assert calls == []
