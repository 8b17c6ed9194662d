"""The quick path's start imports no re, typing, hmac or hashlib: each check written without them gives
the answer of the regular expression, the hmac or the hash it stands for (exhaustively where the
domain is small, on generated values elsewhere)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import escape
from sandbox.fast import foldcache, gitread, odb
from sandbox.store import fsutil, layout
from tests.conftest import examples

HEXISH = st.text(alphabet="0123456789abcdefABCDEFgxyz \n", min_size=0, max_size=45)


def test_every_character_escape_looks_at_is_one_isprintable_refuses() -> None:
    # text(), path(), suspicious() and terminal() skip the regular expression for a printable string.
    unsafe = re.compile(escape._UNSAFE)
    for code in range(0x110000):
        ch = chr(code)
        if unsafe.match(ch):
            assert not ch.isprintable(), hex(code)


#: escape's functions as they were with their patterns compiled at import (the reference).
_UNSAFE = re.compile(escape._UNSAFE)
_NEEDS_QUOTES = re.compile(escape._NEEDS_QUOTES)
_KEPT = re.compile(escape._KEPT)


def _text(value: str) -> str:
    return value if not _UNSAFE.search(value) else _UNSAFE.sub(lambda m: escape._escaped(m.group()), value)


def _path(value: str) -> str:
    if not _NEEDS_QUOTES.search(value):
        return value
    return (
        '"'
        + _NEEDS_QUOTES.sub(lambda m: "\\" + m.group() if m.group() in '"\\' else escape._escaped(m.group()), value)
        + '"'
    )


def _terminal(value: str) -> str:
    if not _UNSAFE.search(value):
        return value
    return "".join(part if _KEPT.fullmatch(part) else _text(part) for part in _KEPT.split(value))


PIECES = st.sampled_from(['"', "\\", "\x1b[31m", "\x1b]0;x\x07", "\n", "\t", "a", "\u202e", "é", "\udc80", "\xa0"])
STRINGS = st.text() | st.lists(PIECES, max_size=12).map("".join)


@settings(max_examples=examples(500), deadline=None)
@given(STRINGS)
def test_escape_gives_its_patterns_answers(value: str) -> None:
    assert escape.text(value) == _text(value)
    assert escape.path(value) == _path(value)
    assert escape.terminal(value) == _terminal(value)
    assert escape.suspicious(value) == (_UNSAFE.search(value) is not None)


@settings(max_examples=examples(500), deadline=None)
@given(HEXISH)
def test_hex_ids_as_the_patterns_read_them(text: str) -> None:
    assert odb.is_hex40(text) == bool(re.fullmatch(r"[0-9a-f]{40}", text))
    data = text.encode()
    assert odb.is_hex40_bytes(data) == bool(re.fullmatch(rb"[0-9a-fA-F]{40}", data))
    assert layout.is_clone_id(text) == bool(re.match(r"^[0-9a-f]{32}$", text))


@pytest.mark.parametrize("width", [32, 40])
def test_hex_ids_of_the_exact_width(width: int) -> None:
    for text in ("a" * width, "a" * width + "\n", "a" * width + "\n\n", "A" * width, "a" * (width - 1) + "g"):
        assert odb.is_hex40(text) == bool(re.fullmatch(r"[0-9a-f]{40}", text))
        assert odb.is_hex40_bytes(text.encode()) == bool(re.fullmatch(rb"[0-9a-fA-F]{40}", text.encode()))
        assert layout.is_clone_id(text) == bool(re.match(r"^[0-9a-f]{32}$", text))


@settings(max_examples=examples(500), deadline=None)
@given(st.text(alphabet=st.sampled_from(["H", "E", "A", "D", "_", "1", "a", "/", "-", "É", "\u0130"]), max_size=12))
def test_pseudo_refs_as_the_pattern_reads_them(name: str) -> None:
    assert gitread.is_pseudo_ref(name) == bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", name))


@settings(max_examples=examples(500), deadline=None)
@given(
    st.text(alphabet=st.sampled_from([" ", "\t", "\x1c", "\u2003", "\xa0", "#", ";", '"', "a", "B", "1"]), max_size=16)
)
def test_config_values_as_the_pattern_splits_them(value: str) -> None:
    expected = re.split(r"\s[#;]", value, maxsplit=1)[0].strip().strip('"').lower()
    assert gitread.config_value(value) == expected


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=300))
def test_the_cache_mac_is_hmacs(key: bytes, text: bytes) -> None:
    assert foldcache.mac_of(key, text) == hmac.new(key, text, hashlib.sha256).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 1 << 20, (1 << 20) + 1])
def test_object_ids_are_hashlibs(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    expected = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert odb.object_id("blob", data) == expected


def test_suppress_is_contextlibs() -> None:
    for raised in (OSError, FileNotFoundError, ValueError, KeyboardInterrupt):
        outcomes = []
        for manager in (contextlib.suppress, fsutil._suppress):
            try:
                with manager(OSError):
                    raise raised("x")
                outcomes.append("suppressed")
            except BaseException as exc:  # noqa: BLE001  (what each lets through, compared)
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1], raised


def test_shell_quoting_is_shlexs_for_every_character() -> None:
    import shlex

    from sandbox.cli import fmt

    for code in range(0x110000):
        ch = chr(code)
        assert fmt.quote(ch) == shlex.quote(ch), hex(code)


@settings(max_examples=examples(500), deadline=None)
@given(st.text() | st.lists(st.sampled_from(["'", '"', " ", "a", "-", "é", "$", "\n", ""]), max_size=8).map("".join))
def test_shell_quoting_is_shlexs(arg: str) -> None:
    import shlex

    from sandbox.cli import fmt

    assert fmt.quote(arg) == shlex.quote(arg)


@pytest.mark.parametrize("fields", ["mode name oid", "tree parents message committer_time", "a"])
def test_named_tuples_are_collections(fields: str) -> None:
    import collections
    import pickle

    from sandbox.fast import gitread, records

    ours, theirs = records.named_tuple("T", fields, __name__), collections.namedtuple("T", fields)  # noqa: PYI024
    values = list(range(len(fields.split())))
    a, b = ours(*values), theirs(*values)
    assert a == b == tuple(values) and hash(a) == hash(b) and repr(a) == repr(b) and list(a) == values
    assert ours(**dict(zip(fields.split(), values, strict=True))) == a
    assert a._fields == b._fields and a._asdict() == b._asdict()
    first = fields.split()[0]
    assert getattr(a, first) == getattr(b, first) == 0
    assert a._replace(**{first: 9}) == b._replace(**{first: 9})
    for bad in ((), (*values, 1)):
        with pytest.raises(TypeError):
            ours(*bad)
        with pytest.raises(TypeError):
            theirs(*bad)
    entry = gitread.TreeEntry(0o040000, "d", "0" * 40)
    assert entry.is_tree and pickle.loads(pickle.dumps(entry)) == entry
    assert type(pickle.loads(pickle.dumps(entry))) is gitread.TreeEntry


#: The regular expression gitguard's program_key stands for (as it was, compiled with re).
PROGRAM_KEYS = re.compile(
    r"^(core\.(fsmonitor|pager|editor|sshcommand|askpass|hookspath|gitproxy|alternaterefscommand|worktree)"
    r"|diff\.external|diff\.[^\n]*\.(textconv|command)|(diff|merge)tool\.[^\n]*\.(cmd|path)"
    r"|merge\.[^\n]*\.driver|filter\.[^\n]*\.(clean|smudge|process)|pager\.[^\n]*|alias\.[^\n]*"
    r"|sequence\.editor|gpg\.([^\n]*\.)?program|credential\.([^\n]*\.)?helper|include\.path"
    r"|includeif\.[^\n]*\.path|uploadpack\.packobjectshook|extensions\.worktreeconfig"
    r"|remote\.[^\n]*\.(uploadpack|receivepack)|web\.browser|browser\.[^\n]*\.(cmd|path)|man\.[^\n]*\.(cmd|path)"
    r"|submodule\.[^\n]*\.update|diff\.ignoresubmodules|status\.submodulesummary|submodule\.recurse)$"
)
#: Pieces of config keys: every section and name the expression knows, dots, newlines, others.
KEY_PARTS = [
    *[
        "core",
        "diff",
        "merge",
        "difftool",
        "mergetool",
        "filter",
        "pager",
        "alias",
        "sequence",
        "gpg",
        "credential",
        "include",
        "includeif",
    ],
    *["uploadpack", "extensions", "remote", "web", "browser", "man", "submodule", "status", "tool", "x"],
    *[
        "fsmonitor",
        "editor",
        "sshcommand",
        "askpass",
        "hookspath",
        "gitproxy",
        "alternaterefscommand",
        "worktree",
        "external",
    ],
    *[
        "textconv",
        "command",
        "cmd",
        "path",
        "driver",
        "clean",
        "smudge",
        "process",
        "program",
        "helper",
        "packobjectshook",
    ],
    *["worktreeconfig", "receivepack", "ignoresubmodules", "submodulesummary", "recurse", "update"],
    ".",
    ".",
    "\n",
    "a.b",
]


@settings(max_examples=examples(3000), deadline=None)
@given(st.lists(st.sampled_from(KEY_PARTS), max_size=6))
def test_program_keys_as_the_pattern_reads_them(parts: list[str]) -> None:
    from sandbox.store import gitguard

    key = "".join(parts)
    assert gitguard.program_key(key) == bool(PROGRAM_KEYS.match(key)), key


def test_every_program_key_the_pattern_names() -> None:
    from sandbox.store import gitguard

    sections = ("diff", "difftool", "mergetool", "merge", "filter", "gpg", "credential", "includeif", "remote")
    names = [n for part in KEY_PARTS for n in (part,) if part.isalpha()]
    for section in (*sections, "browser", "man", "submodule", "pager", "alias", "core", "web", "status"):
        for middle in ("", ".", ".a", ".a.b", ".x."):
            for name in names:
                for tail in ("", "\n", "\n\n"):
                    key = f"{section}{middle}.{name}{tail}"
                    assert gitguard.program_key(key) == bool(PROGRAM_KEYS.match(key)), repr(key)
