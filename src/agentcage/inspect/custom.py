"""Custom inspectors named in cage.yaml (`inspectors: [{name, config}]`), loaded fail-closed.

`name` is an import path, `package.module:Factory` or `package.module.Factory`; the factory is
called with the entry's `config` dict as `settings` and must return an object with `name`,
`phase` and `inspect(request, ctx)`. Anything that goes wrong is a ConfigError: a cage whose
configured inspector cannot run does not start, rather than running without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from agentcage.errors import ConfigError
from agentcage.inspect.protocol import Inspector

PHASES = ("headers", "body")


def _resolve(path: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"custom inspector {path!r}: write package.module:Factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import failure, including errors raised by the module itself
        raise ConfigError(
            f"custom inspector {path!r}: cannot import {module_name}: {type(e).__name__}: {e}"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"custom inspector {path!r}: {module_name} has no {attr}") from None


def load_custom(path: str, settings: Mapping[str, Any] | None = None) -> Inspector:
    factory = _resolve(path)
    if not callable(factory):
        raise ConfigError(f"custom inspector {path!r} is not callable")
    try:
        inspector = factory(settings=dict(settings or {}))
    except Exception as e:
        raise ConfigError(
            f"custom inspector {path!r} refused its settings: {type(e).__name__}: {e}"
        ) from None
    name = getattr(inspector, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"custom inspector {path!r} has no name")
    if getattr(inspector, "phase", None) not in PHASES:
        raise ConfigError(f"custom inspector {path!r}: phase must be one of {PHASES}")
    if not callable(getattr(inspector, "inspect", None)):
        raise ConfigError(f"custom inspector {path!r} has no inspect(request, ctx)")
    return inspector


def load_custom_entries(
    entries: list[Mapping[str, Any]] | tuple[Any, ...],
) -> tuple[Inspector, ...]:
    """Inspectors for every `inspectors:` entry (dicts or the pydantic model), in order."""
    loaded = []
    for entry in entries:
        get = entry.get if isinstance(entry, Mapping) else lambda k, e=entry: getattr(e, k, None)
        loaded.append(load_custom(str(get("name")), get("config") or {}))
    return tuple(loaded)
