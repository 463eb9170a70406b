"""Reading cage.yaml: YAML → CageConfig; every problem is one line naming key, value and fix."""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from agentcage.config import syntax
from agentcage.config.document import document_text
from agentcage.config.model import CageConfig
from agentcage.config.overrides import Overrides, apply
from agentcage.errors import ConfigError

_MAX_VALUE_CHARS = 60
# A cage.yaml is a page of settings. These bounds keep a hostile or broken file (a YAML alias
# bomb, megabytes of domains, nesting thousands deep) from hanging the CLI or exhausting memory:
# such a file is refused with one line before anything else happens.
MAX_CONFIG_BYTES = syntax.MAX_CONFIG_BYTES
MAX_NODES = 100_000
MAX_DEPTH = 64


class _BoundedLoader(yaml.SafeLoader):
    """safe_load, refusing aliases (`*name`: the alias bomb, where a few lines expand to
    billions of values) and bounding the number and nesting of nodes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(f"line {mark.line + 1}: YAML aliases (*name) are not accepted in a "
                           "cage.yaml; write the value out")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} values; a cage.yaml is a page of settings")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Refused(Exception):
    pass


# Only the start of a value is shown, so only the start is rendered: a bounded repr, never the
# repr of a whole large or deeply nested value.
_REPR = reprlib.Repr(maxlevel=2, maxdict=4, maxlist=4, maxtuple=4, maxset=4, maxstring=40,
                     maxother=40, maxlong=40)


def _show(value: Any) -> str:
    text = _REPR.repr(value)
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


def _fix(err: ErrorDetails) -> str:
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
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // 1024} KiB; a cage.yaml "
                          "is a page of settings")
    try:
        loader = _BoundedLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except _Refused as e:
        raise ConfigError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}{where}: not valid YAML; check the indentation") from None
    except ValueError as e:  # e.g. an integer with thousands of digits
        raise ConfigError(f"{source}: a value cannot be read ({e}); fix it") from None
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
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read ({e.strerror}); check the path") from None
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is tolerated, other encodings not
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    return load_config_text(text, source=str(p))


def dump_config(config: CageConfig) -> str:
    """The config as YAML (defaults included), for the state directory."""
    return document_text(config.model_dump(mode="json"))


def apply_overrides(config: CageConfig, *, name: str | None = None, uplink: str | None = None,
                    dns: Sequence[str] = (), trust: Sequence[str] = (),
                    upstream_ca: Sequence[str] = (), allow: Sequence[str] = (),
                    lifecycle: str | None = None, host_user: int | None = None) -> CageConfig:
    """`config` with command-line choices applied on top (validated again as a whole): a name,
    an uplink, DNS servers (replacing), trusted networks, upstream CA files and allowed domains
    (added), a lifecycle, the host uid. What each does: overrides.py."""
    data = yaml.safe_load(dump_config(config))
    apply(data, Overrides(name, uplink, dns, trust, upstream_ca, allow, lifecycle, host_user))
    # in the configuration's own order (a scaffold's stored form keeps it too)
    return load_config_text(yaml.safe_dump(data, sort_keys=False), source="command-line options")
