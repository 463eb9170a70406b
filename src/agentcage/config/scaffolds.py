"""Built-in scaffolds: commented cage.yaml files shipped as package data."""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from agentcage.errors import ConfigError
from agentcage.names import NAME_RE

if TYPE_CHECKING:
    from agentcage.config.model import CageConfig

ALIASES = {"claude": "claude-code", "busybox": "minimal"}
_PLACEHOLDER = "__NAME__"


def _dir():
    return resources.files("agentcage") / "data" / "scaffolds"


def scaffold_names() -> list[str]:
    files = [p.name for p in _dir().iterdir() if p.name.endswith(".yaml")]
    return sorted(f.removesuffix(".yaml") for f in files)


def scaffold_text(scaffold: str, name: str) -> str:
    """The commented cage.yaml of `scaffold` for a cage called `name`."""
    key = ALIASES.get(scaffold, scaffold)
    if key not in scaffold_names():
        known = ", ".join(scaffold_names())
        raise ConfigError(f"scaffold {scaffold!r} does not exist; choose one of: {known}")
    if not NAME_RE.match(name):
        raise ConfigError(
            f"name {name!r}: use 1-63 of a-z, 0-9 and '-', starting with a letter or digit"
        )
    return (_dir() / f"{key}.yaml").read_text().replace(_PLACEHOLDER, name)


def scaffold_config(scaffold: str, name: str) -> CageConfig:
    from agentcage.config.load import load_config_text

    return load_config_text(scaffold_text(scaffold, name), source=f"scaffold {scaffold}")
