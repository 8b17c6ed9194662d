"""Named tuples for the fast path's run time, without :mod:`collections` or :mod:`typing`.

The fast read path's records (a tree entry, a commit, the agent's git activity) are typed as
``typing.NamedTuple`` for mypy; at run time they are made here, as ``collections.namedtuple`` makes
them (fields by position and by name, equality and hashing as tuples, ``_fields``, ``_replace``,
``_asdict``, the same ``repr``), because importing :mod:`collections` and building each class with
``exec`` costs ``list``, ``status``, ``log`` and ``path`` a seventh of the interpreter's own start
(:mod:`sandbox.cli.quick`). tests/fast/test_no_re.py holds them to ``collections.namedtuple``.
"""

from __future__ import annotations

from operator import itemgetter

TYPE_CHECKING = False  # no typing at run time: the quick path's start
if TYPE_CHECKING:
    from typing import Any


def named_tuple(typename: str, field_names: str, module: str) -> type[tuple[Any, ...]]:
    """A tuple class with the fields ``field_names`` (space-separated), as ``collections.namedtuple``."""
    fields = tuple(field_names.split())
    arity = len(fields)

    def __new__(cls: type[tuple[Any, ...]], *args: Any, **kwargs: Any) -> tuple[Any, ...]:  # noqa: N807
        if kwargs:
            missing = [f for f in fields[len(args) :] if f not in kwargs]
            extra = sorted(set(kwargs) - set(fields[len(args) :]))
            if missing or extra:
                raise TypeError(f"{typename}() missing {missing} or got unexpected {extra}")
            args += tuple(kwargs[f] for f in fields[len(args) :])
        if len(args) != arity:
            raise TypeError(f"{typename}() takes {arity} arguments but {len(args)} were given")
        return tuple.__new__(cls, args)

    def __repr__(self: tuple[Any, ...]) -> str:  # noqa: N807
        return f"{type(self).__name__}(" + ", ".join(f"{n}={v!r}" for n, v in zip(fields, self, strict=True)) + ")"

    def _replace(self: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
        made = type(self)(*(changes.pop(f, v) for f, v in zip(fields, self, strict=True)))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return made

    def _asdict(self: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(fields, self, strict=True))

    def __getnewargs__(self: tuple[Any, ...]) -> tuple[Any, ...]:  # noqa: N807
        return tuple(self)

    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": module,
        "__doc__": f"{typename}({', '.join(fields)})",
        "_fields": fields,
        "__match_args__": fields,
        "__new__": __new__,
        "__repr__": __repr__,
        "_replace": _replace,
        "_asdict": _asdict,
        "__getnewargs__": __getnewargs__,
    }
    for index, name in enumerate(fields):
        namespace[name] = property(itemgetter(index), doc=f"Alias for field number {index}")
    return type(typename, (tuple,), namespace)
