"""Chosen hunks placed on the user's file by their windows alone (no diff) give what the whole-file diff of
the user's change gives (issue 34's speed: a 10,000-line file's picked hunks cost about a whole-file apply).

:func:`sandbox.merge.hunks.onto_yours` first looks for each replacement's window (its lines and three of
context) as it is in the user's file; the whole-file diff (:func:`~sandbox.merge.hunks._onto_yours_by_diff`)
decides only where that is not sure. Both are compared here on random files and edits: the same bytes
placed, or the same refusal."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.merge import hunks as hk
from tests.conftest import examples

Part = tuple[int, int, list[bytes]]


@st.composite
def cases(draw: st.DrawFn, alphabet: int) -> tuple[list[bytes], bytes, list[Part]]:
    """A base, the user's file (lines replaced, inserted, deleted) and the agent's chosen replacements."""
    n = draw(st.integers(0, 40))
    unique = alphabet == 0
    base = [(f"b{i}\n" if unique else f"x{draw(st.integers(0, alphabet - 1))}\n").encode() for i in range(n)]
    if base and draw(st.booleans()):
        base[-1] = base[-1].rstrip(b"\n")  # no newline at the end of the file
    fresh = iter(range(10_000))

    def new_lines(prefix: str) -> list[bytes]:
        return [f"{prefix}{next(fresh)}\n".encode() for _ in range(draw(st.integers(0, 3)))]

    # The agent's changes: sorted, disjoint runs of removed lines, each with its added lines (a change of
    # a zero-context diff: at least one line between two changes, something removed or added).
    parts: list[Part] = []
    at = 0
    while at <= n and draw(st.booleans()):
        start = draw(st.integers(at, min(n, at + 12)))
        count = draw(st.integers(0, min(3, n - start)))
        new = new_lines("a")
        if count == 0 and not new:
            new = [b"a-only\n"]
        parts.append((start, count, new))
        at = start + count + 1
    chosen = [p for p in parts if draw(st.booleans())] or parts[:1]
    # The user's edits, from the bottom up so that the line numbers stay the base's.
    mine = list(base)
    for line in sorted(draw(st.lists(st.integers(0, n), max_size=4, unique=True)), reverse=True):
        kind = draw(st.sampled_from(["replace", "insert", "delete"]))
        if kind == "insert" or line == n:
            mine[line:line] = new_lines("u") or [b"u\n"]
        elif kind == "replace":
            mine[line] = b"u-" + mine[line]
        else:
            del mine[line]
    return base, b"".join(mine), chosen


def by_rule(base: list[bytes], yours: bytes, parts: list[Part]) -> bytes | None:
    """The rule the windows follow, line by line and slowly: each window (a replacement's lines and three
    of context) found as it is, in order, at the fewest lines from where the window before it moved it
    (the later of two as near); at the file's start or end with less context, only there; None: not found."""
    mine = hk.split_lines(yours)
    placed: list[Part] = []
    prev_end, shift, prev_w1 = 0, 0, -1
    for start, count, new in sorted(parts, key=lambda p: (p[0], p[1])):
        w0, w1 = max(0, start - hk.CONTEXT), min(len(base), start + count + hk.CONTEXT)
        window = base[w0:w1]
        if (count == 0 and not w0 < start < w1) or not window:
            return None
        expected = w0 + shift
        if w0 < prev_w1:
            tries = [expected]
        elif w0 == 0 and start < hk.CONTEXT:
            tries = [0]
        else:
            tries = [p for d in range(len(mine) + 1) for p in (expected + d, expected - d) if p >= prev_end]
        at_end = w1 == len(base) and start + count + hk.CONTEXT > w1
        found = next(
            (p for p in tries if mine[p : p + len(window)] == window and (not at_end or p + len(window) == len(mine))),
            None,
        )
        if found is None:
            return None
        shift = found - w0
        if placed and found + start - w0 < placed[-1][0] + placed[-1][1]:
            return None
        placed.append((found + start - w0, count, new))
        prev_end, prev_w1 = found + len(window), w1
    return hk.assemble(mine, placed)


def check(base: list[bytes], yours: bytes, parts: list[Part], exact: bool = True) -> None:
    if not parts:
        return
    by_diff = hk._onto_yours_by_diff(base, yours, parts)
    placed = hk.onto_yours(base, yours, parts)
    if exact:
        assert placed == by_diff
    rule = by_rule(base, yours, parts)
    assert placed == (by_diff if rule is None else rule)


@settings(max_examples=examples(400), deadline=None)
@given(cases(alphabet=0))
def test_windows_place_hunks_as_the_whole_file_diff_does(case: tuple[list[bytes], bytes, list[Part]]) -> None:
    check(*case)


@settings(max_examples=examples(400), deadline=None)
@given(cases(alphabet=3))
def test_repeated_lines_are_placed_by_the_rule(case: tuple[list[bytes], bytes, list[Part]]) -> None:
    """Lines from three values: a window found is placed by the rule (nearest, as git apply searches),
    which may differ from where the diff aligned a repeated line; one not found, by the diff."""
    check(*case, exact=False)


def test_a_repeated_window_lands_where_git_apply_puts_it(tmp_path: Path) -> None:
    """Seven x0 lines then seven x1; the agent adds a line after the tenth, the user deletes an x0 line. The
    window (six x1 lines) is still where it was expected, and the line lands there, byte for byte where
    `git apply` puts it; the whole-file diff would have moved it up a line (its alignment of the repeats)."""
    base = [b"x0\n"] * 7 + [b"x1\n"] * 7
    parts: list[Part] = [(10, 0, [b"agent\n"])]
    yours = b"".join(base[1:])
    placed = hk.onto_yours(base, yours, parts)
    assert hk._onto_yours_by_diff(base, yours, parts) == b"x0\n" * 6 + b"x1\n" * 3 + b"agent\n" + b"x1\n" * 4
    (tmp_path / "f.txt").write_bytes(yours)
    patch = b"--- a/f.txt\n+++ b/f.txt\n@@ -8,6 +8,7 @@\n" + b" x1\n" * 3 + b"+agent\n" + b" x1\n" * 3
    (tmp_path / "p.diff").write_bytes(patch)
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True)
    assert placed == (tmp_path / "f.txt").read_bytes() == b"x0\n" * 6 + b"x1\n" * 4 + b"agent\n" + b"x1\n" * 3


def test_parsed_hunks_are_kept_per_process_and_each_caller_gets_its_own(tmp_path: Path) -> None:
    """file_hunks parses a file once per (path, before, after): a second call shares the parsed hunks (no
    second read or diff), hands back its own FileHunks (``taken`` set on one is not on the other), and
    forget() drops them; take(content=False) gives the same ids and replacements, without the content."""
    import pygit2

    from sandbox.store.objects import MODE_FILE, Entry

    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    base = b"".join(f"line {i}\n".encode() for i in range(40))
    agent = base.replace(b"line 5\n", b"FIVE\n").replace(b"line 30\n", b"THIRTY\n")
    before, after = Entry(MODE_FILE, str(repo.create_blob(base))), Entry(MODE_FILE, str(repo.create_blob(agent)))
    hk.forget()
    first = hk.file_hunks(repo, "f.txt", before, after)
    first.taken = [first.hunks[0].id]
    second = hk.file_hunks(repo, "f.txt", before, after)
    assert second is not first and second.hunks[1] is first.hunks[1] and second.old is first.old
    assert second.taken == [] and [h.id for h in second.hunks] == [h.id for h in first.hunks]
    assert hk.file_hunks(repo, "g.txt", before, after).hunks[0].id != first.hunks[0].id  # the path is in the id
    hk.forget()
    assert hk.file_hunks(repo, "f.txt", before, after).hunks[1] is not first.hunks[1]
    choice = hk.Choice(ids={second.hunks[1].id})
    full, bare = hk.take(second, choice), hk.take(second, choice, content=False)
    assert full is not None and bare is not None and full.content == agent.replace(b"FIVE\n", b"line 5\n")
    assert bare.content is None and (bare.ids, bare.parts) == (full.ids, full.parts)
