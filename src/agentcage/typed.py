"""Frozen dataclasses from plain mappings (JSON, YAML dumps): the one conversion, done once.

Settings are declared once, as dataclasses with their defaults; a mapping becomes one with
`from_mapping`, which refuses unknown keys, turns lists into tuples and builds nested
dataclasses. Nothing downstream re-parses a dict or repeats a default.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from agentcage.errors import ConfigError

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    # once per class: resolving the annotations is most of a conversion (a gateway's
    # settings, ~2 ms; a zygote resolves them before it forks: `warm`)
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def warm(*classes: type) -> None:
    """Resolve the annotations of `classes` and of the dataclasses nested in them now."""
    for cls in classes:
        for hint in _hints(cls).values():
            if isinstance(hint, type) and dataclasses.is_dataclass(hint):
                warm(hint)


def _convert(hint: Any, value: Any, where: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else from_mapping(hint, value, where)
    if isinstance(value, list):
        return tuple(value)
    return value


def from_mapping[T](cls: type[T], values: Mapping[str, Any] | T | None, where: str) -> T:
    """`cls(**values)`, with nested dataclasses built and lists as tuples; an unknown key is a
    ConfigError naming `where` and the known keys. An instance of `cls` is returned as is."""
    if isinstance(values, cls):
        return values
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where}: expected a mapping, not {type(values).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown settings {unknown}; known: {sorted(known)}")
    hints = _hints(cls)
    converted = {k: _convert(hints.get(k), v, f"{where}.{k}") for k, v in values.items()}
    return cls(**converted)
