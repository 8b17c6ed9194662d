"""``json.loads`` and ``json.dumps`` for the hook's fast path, without importing :mod:`json`.

Importing :mod:`json` imports :mod:`re` (for three patterns of its pure-Python fallback), and ``re``
imports :mod:`enum`, :mod:`functools` and the collections: about as much CPU as the interpreter's own
start, on every tool call of an agent (issue 30; measured with bench/cases/startup.py). The work itself
is done by the C accelerator module ``_json``, which :mod:`json` uses for the same calls: here it is
called directly, configured as ``json.loads(data)`` and ``json.dumps(value, default=...)`` with their
defaults configure it, so each answer is the one :mod:`json` gives. Anything out of the ordinary (an
error to report, a payload in UTF-16, an interpreter without ``_json``) is handed to :mod:`json`
itself, which then gives its own answer or raises its own error. tests/agent/test_fastjson.py holds
both equal to :mod:`json` on generated values.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time: this module is on the hook's fast path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_SPACE = " \t\n\r"  # json's WHITESPACE: what may stand before and after the value


class _Decoding:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder()`` made with no arguments."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        """``NaN``, ``Infinity``, ``-Infinity`` as ``json.loads`` reads them."""
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``."""
    try:
        from _json import make_scanner
    except ImportError:
        return _json_loads(data)
    if isinstance(data, bytes):
        if data[:3] == b"\xef\xbb\xbf" or data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:4]:
            return _json_loads(data)  # not plain UTF-8 (json.detect_encoding): json decides
        text = data.decode("utf-8", "surrogatepass")
    else:
        text = data
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = make_scanner(_Decoding)(text, start)  # type: ignore[arg-type]  # any object with its fields
    except Exception:  # json itself says what is wrong, and raises it as json does
        # "Expecting value" (StopIteration), or an error the C scanner raises as json.decoder's
        # JSONDecodeError: before 3.12 it finds that class only in sys.modules, and without json
        # imported it fails with a SystemError instead.
        return _json_loads(data)
    if text.startswith("\ufeff") or text[end:].strip(_SPACE):
        return _json_loads(data)  # a byte-order mark, or extra data: json raises it
    return value


def dumps(value: object, default: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps(value, default=default)``."""
    try:
        from _json import encode_basestring_ascii, make_encoder

        # JSONEncoder.iterencode's arguments for the defaults: a dict of markers (check_circular),
        # ensure_ascii, no indent, ", " and ": ", sort_keys, skipkeys and allow_nan as json has them.
        encode = make_encoder({}, default or _refuse, encode_basestring_ascii, None, ": ", ", ", False, False, True)
        return "".join(encode(value, 0))
    except (ImportError, TypeError, ValueError, RecursionError):
        import json  # what json says of it (or json's own way, where _json differs)

        return json.dumps(value, default=default)


def _refuse(value: object) -> object:
    """``JSONEncoder.default``: nothing else is serializable (json says it in its words)."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _json_loads(data: bytes | str) -> Any:
    import json

    return json.loads(data)
