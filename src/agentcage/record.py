"""Frozen records for the modules that `exec` and `shell` import: what `@dataclass(frozen=True)`
gives them (a constructor from the annotated fields and their defaults, equality, a hash, a
repr, `replace`, `__post_init__`), without importing `dataclasses`.

Why not dataclasses: it imports `inspect` (and with it `ast`, `dis`, `tokenize`...), ≈ 8 ms,
where a whole `exec` into a cage may take 2.5x the interpreter's own start (≈ 30 ms); nothing
else on that path needs them. Type checkers see a record as a frozen dataclass (PEP 681's
`dataclass_transform`), so its constructor is checked as one.

A record's fields are its own annotated class attributes, in order (no inheritance, no
ClassVar, no keyword-only fields); a default is a value, or `Factory(callable)` for a fresh
one per instance. Its modules must use `from __future__ import annotations`: the annotations
are only read as names.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, dataclass_transform
else:
    def dataclass_transform(**_kwargs):
        return lambda f: f


class Factory:
    """A default made anew for each instance (dataclasses' `field(default_factory=...)`)."""

    def __init__(self, make: Callable[[], object]):
        self.make = make


class FrozenRecordError(AttributeError):
    """A field of a record was assigned after construction."""


@dataclass_transform(frozen_default=True, field_specifiers=())
def record[C: type](cls: C) -> C:
    names = tuple(cls.__annotations__)  # its own (3.10 on), as strings (the future import)
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    post_init = getattr(cls, "__post_init__", None)

    def __init__(self: Any, *args: object, **kwargs: object) -> None:
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} arguments, "
                            f"{len(args)} were given")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in values:
                raise TypeError(f"{cls.__name__}() got an unexpected or repeated argument "
                                f"{key!r}")
            values[key] = value
        for name in names:
            if name not in values:
                if name not in defaults:
                    raise TypeError(f"{cls.__name__}() missing argument {name!r}")
                default = defaults[name]
                values[name] = default.make() if isinstance(default, Factory) else default
            object.__setattr__(self, name, values[name])
        if post_init is not None:
            post_init(self)

    def fields(self: Any) -> tuple[object, ...]:
        return tuple(getattr(self, n) for n in names)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(fields(self) == fields(other))

    def __hash__(self: Any) -> int:
        return hash(fields(self))

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{cls.__name__}({shown})"

    def __setattr__(self: Any, name: str, value: object) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r} of a {cls.__name__}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r} of a {cls.__name__}")

    for method in (__init__, __eq__, __hash__, __repr__, __setattr__, __delattr__):
        method.__qualname__ = f"{cls.__name__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    cls.__record_fields__ = names  # type: ignore[attr-defined]
    return cls


def replace[R](obj: R, **changes: object) -> R:
    """A copy of the record `obj` with `changes` (dataclasses.replace)."""
    names: tuple[str, ...] = obj.__record_fields__  # type: ignore[attr-defined]
    unknown = set(changes) - set(names)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(**{n: changes[n] if n in changes else getattr(obj, n) for n in names})
