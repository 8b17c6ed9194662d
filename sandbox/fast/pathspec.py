"""git pathspecs: parsing and matching exactly as git does (``git help glossary``, "pathspec").

pygit2 does not bind libgit2's ``git_pathspec`` API, and the paths matched here are the ones a run
recorded (never a walk of a tree or an index), so the matching is a port of git's own rules:
``dir.c:match_pathspec_item`` (exact, leading-directory and fnmatch matches) and ``wildmatch.c``
(the glob engine), on the path's bytes. ``tests/fast/test_pathspec.py`` checks it against ``git ls-files``.
Each pathspec is compiled once into a regular expression with the port's exact meaning (see "compiled
matching" below; ``tests/fast/test_pathspec_compiled.py`` checks the two agree): 3 pathspecs over
10k paths take 2.6 ms, ``git ls-files -- SPECS`` 3.5 ms, the port alone 40 ms (``bench/cases/ports.py``).

Supported: plain paths and directories, globs (``*``, ``?``, ``[...]``, ``\\`` escapes; ``*``
crosses ``/`` unless ``glob`` magic is given, as in git), the long magic ``:(top,literal,glob,
icase,exclude)PATTERN`` and the short magic ``:/PATTERN`` (top) and ``:!PATTERN`` / ``:^PATTERN``
(exclude). ``attr`` magic needs .gitattributes lookups and is refused with a sentence.
"""

from __future__ import annotations

import os
import posixpath
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from sandbox.errors import UsageError

GLOB_SPECIAL = b"*?[\\"
LONG_MAGIC = ("top", "literal", "glob", "icase", "exclude")
SHORT_MAGIC = {"/": "top", "!": "exclude", "^": "exclude"}

WM_MATCH, WM_NOMATCH, WM_ABORT_ALL, WM_ABORT_TO_STARSTAR = 0, 1, -1, -2
WM_CASEFOLD, WM_PATHNAME = 1, 2
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


@dataclass(frozen=True)
class Item:
    """One parsed pathspec: the pattern (relative to the tree's top, as bytes) and its magic."""

    original: str
    pattern: bytes
    literal: bool = False
    glob: bool = False
    icase: bool = False
    exclude: bool = False

    @cached_property
    def nowildcard_len(self) -> int:
        """Length of the leading part without glob characters (all of it for ``literal``)."""
        if self.literal:
            return len(self.pattern)
        for i, ch in enumerate(self.pattern):
            if ch in GLOB_SPECIAL:
                return i
        return len(self.pattern)

    def to_git(self) -> str:
        """This item as a pathspec git reads the same way from any directory (``top`` magic)."""
        magic = ["top"] + [m for m in ("literal", "glob", "icase", "exclude") if getattr(self, m)]
        return f":({','.join(magic)})" + os.fsdecode(self.pattern)

    def matches(self, path: str) -> bool:
        """True when ``path`` (relative to the top, ``/``-separated) matches this item (ignoring exclude)."""
        return bool(self.matcher(os.fsencode(path)))

    @cached_property
    def matcher(self) -> Callable[[bytes], object]:
        """This item compiled for many paths (see :func:`_compile`): a path's bytes -> truthy when it matches."""
        return _compile([self])


def parse(spec: str, prefix: str = "") -> Item:
    """Parse one pathspec given from directory ``prefix`` (relative to the top, "" for the top).

    Raises :class:`UsageError` for unknown or unsupported magic and for patterns outside the tree.
    """
    magic: set[str] = set()
    rest = spec
    if spec.startswith(":("):
        close = spec.find(")")
        if close < 0:
            raise UsageError(f"The pathspec {spec!r} has an unclosed magic '(': write ':(exclude)PATH'.")
        for word in filter(None, (w.strip() for w in spec[2:close].split(","))):
            if word.startswith("attr:") or word == "attr":
                raise UsageError(f"The pathspec {spec!r} uses 'attr' magic, which the sandbox does not support.")
            if word.startswith("prefix:") or word not in LONG_MAGIC:
                raise UsageError(
                    f"The pathspec {spec!r} has the unknown magic {word!r}; known: {', '.join(LONG_MAGIC)}."
                )
            magic.add(word)
        rest = spec[close + 1 :]
    elif spec.startswith(":"):
        i = 1
        while i < len(spec) and spec[i] in SHORT_MAGIC:
            magic.add(SHORT_MAGIC[spec[i]])
            i += 1
        if i < len(spec) and spec[i] == ":":
            i += 1  # ':!:name' ends the magic explicitly
        rest = spec[i:]
    if "literal" in magic and "glob" in magic:
        raise UsageError(f"The pathspec {spec!r} combines 'literal' and 'glob' magic, which git refuses too.")
    base = "" if "top" in magic else prefix
    pattern = _normalize(spec, base, rest)
    return Item(
        original=spec,
        pattern=os.fsencode(pattern),
        literal="literal" in magic,
        glob="glob" in magic,
        icase="icase" in magic,
        exclude="exclude" in magic,
    )


def _normalize(spec: str, base: str, rest: str) -> str:
    """``base/rest`` with ``.`` and ``..`` resolved, keeping a trailing ``/`` (git keeps it too)."""
    trailing = rest.endswith("/") and rest.strip("/") != ""
    joined = posixpath.join(base, rest) if base else rest
    parts: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise UsageError(f"The pathspec {spec!r} is outside the repository; give a path inside it.")
            parts.pop()
            continue
        parts.append(part)
    out = "/".join(parts)
    return out + "/" if trailing and out else out


class Pathspec:
    """A list of pathspecs as git applies them: a path is selected when it matches at least one
    positive item (or there are none) and no ``exclude`` item."""

    def __init__(self, specs: Iterable[str], prefix: str = "", excludes: Iterable[str] = ()) -> None:
        self.items = [parse(s, prefix) for s in specs]
        self.items += [parse(f":(exclude){s}" if not s.startswith(":") else _as_exclude(s), prefix) for s in excludes]
        self.positive = [i for i in self.items if not i.exclude]
        self.negative = [i for i in self.items if i.exclude]
        # Compiled once for every path asked about (a diff's or a run's paths, one by one).
        self._selects = _compile(self.positive) if self.positive else None
        self._excludes = _compile(self.negative) if self.negative else None

    def __bool__(self) -> bool:
        return bool(self.items)

    def matches(self, path: str) -> bool:
        """True when ``path`` is selected."""
        raw = path.encode(_FS_ENCODING, _FS_ERRORS)  # os.fsencode, without its checks (once per path)
        if self._selects is not None and not self._selects(raw):
            return False
        return self._excludes is None or not self._excludes(raw)

    def unmatched(self, paths: Iterable[str]) -> list[str]:
        """The positive pathspecs (as given) that match none of ``paths`` (git: "did not match any file")."""
        raws = [os.fsencode(p) for p in paths]
        return [i.original for i in self.positive if not any(i.matcher(r) for r in raws)]


def _as_exclude(spec: str) -> str:
    """``--exclude`` of a spec that already has magic: add ``exclude`` to it."""
    if spec.startswith(":("):
        return ":(exclude," + spec[2:]
    return ":!" + spec[1:] if not spec.startswith((":!", ":^")) else spec


# -- compiled matching --------------------------------------------------------------------------
#
# git tests each path against each pathspec in C; here the port (:func:`_match_item`, :func:`wildmatch`)
# costs microseconds per path and pathspec in Python, 7x git's ``ls-files`` over 10k paths. So each
# item is translated once into a regular expression (C) with exactly its meaning, and the items of a
# list into one alternation: every branch starts with its item's literal prefix (the part before the
# first glob character, ``src/app/`` of ``src/app/*.py``), so a path outside it is refused at its first
# differing byte. An item whose glob the translation does not cover (``[...]`` classes, a trailing
# backslash) keeps the port, behind a plain check of its literal prefix.


def _compile(items: list[Item]) -> Callable[[bytes], object]:
    """One test for ``items`` (a path's bytes -> truthy when it matches at least one of them)."""
    branches = [_item_regex(i) for i in items]
    if all(b is not None for b in branches):
        regex = re.compile("|".join(f"(?:{b})" for b in branches if b is not None).encode("latin-1"), re.DOTALL)
        return regex.match  # a match or None: no Python frame per path
    tests = [_item_test(i, b) for i, b in zip(items, branches, strict=True)]
    return lambda name: any(t(name) for t in tests)


def _item_test(item: Item, branch: str | None) -> Callable[[bytes], object]:
    """One item's test: its regular expression, or its literal prefix and then the port."""
    if branch is not None:
        return re.compile(branch.encode("latin-1"), re.DOTALL).match
    head = item.pattern[: item.nowildcard_len]
    if item.icase:
        head = head.lower()
        return lambda name: name[: len(head)].lower() == head and _match_item(item, name)
    return lambda name: name.startswith(head) and _match_item(item, name)


def _item_regex(item: Item) -> str | None:
    """A regular expression (as text, over bytes read as latin-1, anchored at the start by
    ``re.match``) meaning exactly what :func:`_match_item` decides; None where the port must decide."""
    match = item.pattern
    if not match:
        return ""  # the top itself: everything
    # Exact, or a leading directory: the whole pattern as a plain string (its glob characters too).
    plain = _literal(match) + (".*" if match.endswith(b"/") else "(?:/.*)?") + r"\Z"
    nowild = item.nowildcard_len
    branch = plain
    if nowild < len(match):
        tail = _wild_regex(match[nowild:], pathname=item.glob, fold=item.icase)
        if tail is None:
            return None
        branch = f"{plain}|{_literal(match[:nowild])}{tail}\\Z"
    # git folds ASCII letters only (``tolower`` in the C locale); so does ``re`` over bytes.
    return f"(?i:{branch})" if item.icase else branch


def _literal(raw: bytes) -> str:
    return re.escape(raw.decode("latin-1"))


def _wild_regex(p: bytes, pathname: bool, fold: bool) -> str | None:  # noqa: C901 - one branch per glob character
    """:func:`wildmatch`'s meaning of the glob ``p`` as a regular expression (None: a bracket
    expression or a trailing backslash, left to the port; ``fold``: the icase magic). ``*`` crosses
    ``/`` unless ``pathname`` (the glob magic); then ``**`` between slashes (or at an end) crosses
    directories and ``/**/`` matches one slash too, as ``dowild`` decides from the bytes around the stars."""
    out: list[str] = []
    i, n = 0, len(p)
    # Python's engine backtracks where wildmatch gives up early: k star runs cost up to n**k steps on
    # a path that does not match. Two at most (``**/*.py``, ``*test*``); more are left to the port.
    if len(re.findall(rb"\*+", p)) > 2:  # escaped stars counted too: more go to the port, never fewer
        return None
    while i < n:
        c = p[i]
        if c == 0x5C:  # a backslash: the next byte as itself
            if i + 1 >= n:
                return None
            # dowild folds the text's byte but not the escaped one: an escaped capital never matches.
            out.append("(?!)" if fold and 0x41 <= p[i + 1] <= 0x5A else _literal(p[i + 1 : i + 2]))
            i += 2
        elif c == 0x5B:  # '['
            return None
        elif c == 0x3F:  # '?'
            out.append("[^/]" if pathname else ".")
            i += 1
        elif c == 0x2A:  # '*', a run of them
            j = i
            while j < n and p[j] == 0x2A:
                j += 1
            if not pathname:
                out.append(".*")
            elif j - i >= 2 and (i == 0 or p[i - 1] == 0x2F) and (j == n or p[j] == 0x2F or p[j : j + 2] == b"\\/"):
                if j < n and p[j] == 0x2F:
                    out.append("(?:.*/)?")  # '**/' at a boundary: no directory, or any number of them
                    j += 1
                else:
                    out.append(".*")
            else:
                out.append("[^/]*")
            i = j
        else:
            out.append(_literal(p[i : i + 1]))
            i += 1
    return "".join(out)


def _match_item(item: Item, name: bytes) -> bool:
    """git's ``match_pathspec_item`` for a file name: exact, leading directory, or fnmatch (the port
    the compiled matching is checked against, and uses where it cannot translate a glob)."""
    match = item.pattern
    if not match:
        return True  # the top itself: everything
    fold = item.icase
    ncmp = name.lower() if fold else name
    mcmp = match.lower() if fold else match
    if len(match) <= len(name) and ncmp[: len(match)] == mcmp:
        if len(match) == len(name):
            return True
        if match.endswith(b"/") or name[len(match) : len(match) + 1] == b"/":
            return True
    nowild = item.nowildcard_len
    if nowild < len(match):
        # git_fnmatch: the part before the first wildcard must match as a plain prefix first.
        if ncmp[:nowild] != mcmp[:nowild]:
            return False
        flags = (WM_PATHNAME if item.glob else 0) | (WM_CASEFOLD if fold else 0)
        return wildmatch(match[nowild:], name[nowild:], flags)
    return False


def wildmatch(pattern: bytes, text: bytes, flags: int = 0) -> bool:
    """git's ``wildmatch()``: True when ``text`` matches the glob ``pattern``."""
    return _dowild(pattern, 0, text, 0, flags) == WM_MATCH


_CLASSES: dict[bytes, Callable[[int], bool]] = {
    b"alnum": lambda c: chr(c).isascii() and chr(c).isalnum(),
    b"alpha": lambda c: chr(c).isascii() and chr(c).isalpha(),
    b"blank": lambda c: c in (0x20, 0x09),
    b"cntrl": lambda c: c < 0x20 or c == 0x7F,
    b"digit": lambda c: 0x30 <= c <= 0x39,
    b"graph": lambda c: 0x21 <= c <= 0x7E,
    b"lower": lambda c: 0x61 <= c <= 0x7A,
    b"print": lambda c: 0x20 <= c <= 0x7E,
    b"punct": lambda c: 0x21 <= c <= 0x7E and not chr(c).isalnum(),
    b"space": lambda c: c in (0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D),
    b"upper": lambda c: 0x41 <= c <= 0x5A,
    b"xdigit": lambda c: chr(c) in "0123456789abcdefABCDEF",
}


def _lower(c: int) -> int:
    return c + 32 if 0x41 <= c <= 0x5A else c


def _dowild(p: bytes, pi: int, text: bytes, ti: int, flags: int) -> int:  # noqa: C901 - a faithful port
    """A line-by-line port of ``dowild`` in git's wildmatch.c (indices instead of pointers)."""
    fold = bool(flags & WM_CASEFOLD)
    while pi < len(p):
        p_ch = p[pi]
        t_ch = text[ti] if ti < len(text) else 0
        if t_ch == 0 and p_ch != ord("*"):
            return WM_ABORT_ALL
        if fold:
            t_ch, p_ch = _lower(t_ch), _lower(p_ch)
        if p_ch == ord("\\"):
            pi += 1
            p_ch = p[pi] if pi < len(p) else 0
            if t_ch != p_ch:
                return WM_NOMATCH
        elif p_ch == ord("?"):
            if flags & WM_PATHNAME and t_ch == ord("/"):
                return WM_NOMATCH
        elif p_ch == ord("*"):
            pi += 1
            if pi < len(p) and p[pi] == ord("*"):
                prev = pi - 2
                while pi < len(p) and p[pi] == ord("*"):
                    pi += 1
                nxt = p[pi] if pi < len(p) else 0
                if not flags & WM_PATHNAME:
                    match_slash = True  # without WM_PATHNAME, '*' == '**'
                elif (prev < 0 or p[prev] == ord("/")) and (
                    nxt == 0 or nxt == ord("/") or (nxt == ord("\\") and p[pi + 1 : pi + 2] == b"/")
                ):
                    if nxt == ord("/") and _dowild(p, pi + 1, text, ti, flags) == WM_MATCH:
                        return WM_MATCH
                    match_slash = True
                else:
                    match_slash = False
            else:
                match_slash = not flags & WM_PATHNAME
            if pi >= len(p):
                if not match_slash and b"/" in text[ti:]:
                    return WM_NOMATCH
                return WM_MATCH
            if not match_slash and p[pi] == ord("/"):
                slash = text.find(b"/", ti)
                if slash < 0:
                    return WM_NOMATCH
                ti = slash
                # the slash is consumed below, with the pattern's
                pi += 1
                ti += 1
                continue
            return _star(p, pi, text, ti, t_ch, flags, match_slash)
        elif p_ch == ord("["):
            pi, found = _bracket(p, pi, t_ch, flags, fold)
            if found != WM_MATCH:
                return found
        elif t_ch != p_ch:
            return WM_NOMATCH
        pi += 1
        ti += 1
    return WM_NOMATCH if ti < len(text) else WM_MATCH


def _bracket(p: bytes, pi: int, t_ch: int, flags: int, fold: bool) -> tuple[int, int]:  # noqa: C901 - a faithful port
    """The ``[...]`` branch of :func:`_dowild` (``pi`` at the ``[``): where the pattern's closing ``]``
    is, and WM_MATCH when ``t_ch`` is in the class (else what ``dowild`` returns there)."""
    pi += 1
    p_ch = p[pi] if pi < len(p) else 0
    if p_ch == ord("!"):
        p_ch = ord("^")
    negated = p_ch == ord("^")
    if negated:
        pi += 1
        p_ch = p[pi] if pi < len(p) else 0
    prev_ch = 0
    matched_class = False
    while True:
        if not p_ch:
            return pi, WM_ABORT_ALL
        if p_ch == ord("\\"):
            pi += 1
            p_ch = p[pi] if pi < len(p) else 0
            if not p_ch:
                return pi, WM_ABORT_ALL
            if t_ch == p_ch:
                matched_class = True
        elif p_ch == ord("-") and prev_ch and pi + 1 < len(p) and p[pi + 1] != ord("]"):
            pi += 1
            p_ch = p[pi]
            if p_ch == ord("\\"):
                pi += 1
                p_ch = p[pi] if pi < len(p) else 0
                if not p_ch:
                    return pi, WM_ABORT_ALL
            if prev_ch <= t_ch <= p_ch or fold and 0x61 <= t_ch <= 0x7A and prev_ch <= t_ch - 32 <= p_ch:
                matched_class = True
            p_ch = 0
        elif p_ch == ord("[") and p[pi + 1 : pi + 2] == b":":
            start = pi + 2
            end = start
            while end < len(p) and p[end] != ord("]"):
                end += 1
            if end >= len(p):
                return pi, WM_ABORT_ALL
            if end - start == 0 or p[end - 1] != ord(":"):
                # not a class name: treat the '[' as a literal
                pi = start - 2
                p_ch = ord("[")
                if t_ch == p_ch:
                    matched_class = True
            else:
                name = p[start : end - 1]
                test = _CLASSES.get(name)
                if test is None:
                    return pi, WM_ABORT_ALL  # malformed [:class:]
                if name == b"upper" and fold:
                    test = _CLASSES[b"lower"]
                if t_ch and test(t_ch):
                    matched_class = True
                pi = end
                p_ch = 0
        elif t_ch == p_ch:
            matched_class = True
        prev_ch = p_ch
        pi += 1
        p_ch = p[pi] if pi < len(p) else 0
        if p_ch == ord("]"):
            break
    if matched_class == negated or (flags & WM_PATHNAME and t_ch == ord("/")):
        return pi, WM_NOMATCH
    return pi, WM_MATCH


def _star(p: bytes, pi: int, text: bytes, ti: int, t_ch: int, flags: int, match_slash: bool) -> int:
    """The end of :func:`_dowild`'s ``*`` branch: try the rest of the pattern at every place the star
    may stop (``t_ch``: the text's byte at ``ti``, folded as the caller folds it)."""
    fold = bool(flags & WM_CASEFOLD)
    while True:
        if t_ch == 0:
            break
        if p[pi] not in GLOB_SPECIAL:
            lit = _lower(p[pi]) if fold else p[pi]
            while ti < len(text) and (match_slash or text[ti] != ord("/")):
                t_ch = _lower(text[ti]) if fold else text[ti]
                if t_ch == lit:
                    break
                ti += 1
            else:
                t_ch = text[ti] if ti < len(text) else 0
            if t_ch != lit:
                return WM_ABORT_ALL if match_slash else WM_ABORT_TO_STARSTAR
        matched = _dowild(p, pi, text, ti, flags)
        if matched != WM_NOMATCH:
            if not match_slash or matched != WM_ABORT_TO_STARSTAR:
                return matched
        elif not match_slash and t_ch == ord("/"):
            return WM_ABORT_TO_STARSTAR
        ti += 1
        t_ch = text[ti] if ti < len(text) else 0
        if fold:
            t_ch = _lower(t_ch)
    return WM_ABORT_ALL
