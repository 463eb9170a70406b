"""Reading cage.yaml: YAML → CageConfig; every problem is one line naming key, value and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from agentcage.config.model import CageConfig
from agentcage.errors import ConfigError

_MAX_VALUE_CHARS = 60


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the key at `loc` (for listing the valid keys)."""
    model: Any = CageConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return model
        annotation = field.annotation
        inner = getattr(annotation, "__args__", None)
        candidates = [annotation, *(inner or ())]
        models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        model = models[0] if models else None
        if model is None:
            return None
    return model


def _fix(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        owner = _model_at(tuple(err["loc"][:-1]))
        keys = ", ".join(owner.model_fields) if owner else "see docs/cage.md"
        return f"unknown key; remove it (valid keys here: {keys})"
    if kind == "missing":
        return "required; add it"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def format_errors(exc: ValidationError, data: Any) -> list[str]:
    """One line per problem: `key: value — what is wrong and how to fix it`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        hide = err["type"] == "missing" or not err["loc"]
        value = "" if hide else f" = {_show(err.get('input'))}"
        lines.append(f"{loc}{value}: {_fix(err)}")
    return lines


def load_config_text(text: str, source: str = "cage.yaml") -> CageConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}{where}: not valid YAML; check the indentation") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys (name:, domains:, ...)")
    try:
        return CageConfig.model_validate(data)
    except ValidationError as e:
        lines = format_errors(e, data)
        raise ConfigError("\n".join(f"{source}: {line}" for line in lines)) from None


def load_config(path: str | Path) -> CageConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror}); check the path") from None
    return load_config_text(text, source=str(p))


def dump_config(config: CageConfig) -> str:
    """The config as YAML (defaults included), for the state directory."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
