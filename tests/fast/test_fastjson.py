"""sandbox.fast.fastjson gives json's answers (and json's errors) without importing json on the hook's path."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.fast import fastjson
from tests.conftest import examples

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


def same(a: object, b: object) -> bool:
    """Equal, NaN included (json reads NaN back as a NaN)."""
    return json.dumps(a) == json.dumps(b) if isinstance(a, float | list | dict) else a == b


@settings(max_examples=examples(300), deadline=None)
@given(VALUES)
def test_dumps_is_jsons(value: object) -> None:
    assert fastjson.dumps(value) == json.dumps(value)
    assert fastjson.dumps(value, default=str) == json.dumps(value, default=str)


@settings(max_examples=examples(300), deadline=None)
@given(VALUES, st.sampled_from(["", " ", "\n", " \t\r\n "]))
def test_loads_is_jsons(value: object, space: str) -> None:
    text = space + json.dumps(value, ensure_ascii=False) + space
    assert same(fastjson.loads(text), json.loads(text))
    assert same(
        fastjson.loads(text.encode("utf-8", "surrogatepass")), json.loads(text.encode("utf-8", "surrogatepass"))
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"{",
        b'{"a": 1} x',
        b'{"a": 1}{}',
        b"\xef\xbb\xbf{}",  # a UTF-8 byte-order mark: json reads it from bytes
        "\ufeff{}",  # and refuses it in a str
        b"\xff\xfe{\x00}\x00",  # UTF-16
        b"\xff\xfe",
        b"[1,]",
        b'{"a": NaN, "b": -Infinity, "c": Infinity}',
        b'"\\ud800"',
        b"\x80",  # not UTF-8
        b"[" * 100000 + b"]" * 100000,  # deeper than the recursion limit
        b"1e400",
        b"  true  ",
    ],
)
def test_odd_input_gets_jsons_answer_or_error(data: bytes | str) -> None:
    try:
        expected: object = json.loads(data)
    except (ValueError, RecursionError) as exc:
        with pytest.raises(type(exc)) as raised:
            fastjson.loads(data)
        assert str(raised.value) == str(exc)
        return
    got = fastjson.loads(data)
    assert json.dumps(got) == json.dumps(expected)


def test_what_json_cannot_write_is_jsons_error() -> None:
    for value in ({1j: 1}, {"a": object()}, [b"bytes"]):
        with pytest.raises(TypeError) as exc:
            json.dumps(value)
        with pytest.raises(TypeError) as ours:
            fastjson.dumps(value)
        assert str(ours.value) == str(exc.value)
    circular: list[object] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        fastjson.dumps(circular)
    assert fastjson.dumps({"a": object}, default=str) == json.dumps({"a": object}, default=str)
    assert fastjson.dumps([math.inf, -math.inf, math.nan, 1.5, 10**30]) == json.dumps(
        [math.inf, -math.inf, math.nan, 1.5, 10**30]
    )


def test_it_imports_no_json_when_all_goes_well() -> None:
    import os

    import sandbox

    root = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    program = (
        f"import sys; sys.path.insert(0, {root!r}); from sandbox.fast import fastjson; "
        'v = fastjson.loads(b\' {"a": [1, 2.5, null, true, "\\\\u00e9"]} \'); s = fastjson.dumps(v); '
        "print(s, 'json' in sys.modules, 're' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.split() == ['{"a":', "[1,", "2.5,", "null,", "true,", '"\\u00e9"]}', "False", "False"], out.stderr


def test_an_error_is_jsons_in_a_process_without_json() -> None:
    # Before 3.12 the C scanner finds json.decoder's error class only in sys.modules (else a SystemError).
    import os

    import sandbox

    root = os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    bad = f"import sys; sys.path.insert(0, {root!r}); from sandbox.fast import fastjson; fastjson.loads(sys.argv[1])"
    for text in ('{"a": 1, }', '{"a": "x', "[1, 2", "nul", "{} x", ""):
        out = subprocess.run([sys.executable, "-I", "-S", "-c", bad, text], capture_output=True, text=True, cwd="/")
        with pytest.raises(json.JSONDecodeError) as expected:
            json.loads(text)
        assert out.returncode == 1
        assert out.stderr.strip().endswith(f"json.decoder.JSONDecodeError: {expected.value}"), out.stderr
