"""The inspector chain: the protocol, the built-in inspectors (domain, secrets, body-size,
entropy, content-type), custom ones, the one registry and the one chain runner.

Every inspector satisfies `agentcage.inspect.protocol.Inspector` (name, phase, inspect) and
returns a Decision; nothing here imports mitmproxy or the gateway.

The names below are loaded on first use: the CLI imports the settings types of two inspectors
(settings.py: its cage.yaml schema takes their defaults) and should not pay for the inspectors.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "BodySizeCounter": "body_size", "BodySizeInspector": "body_size",
    "BodyTooLarge": "body_size",
    "first_block": "chain", "run_chain": "chain", "run_one": "chain",
    "ContentTypeInspector": "content_type", "ContentTypeSettings": "settings",
    "load_custom": "custom", "load_custom_entries": "custom",
    "DomainInspector": "domain",
    "EntropyInspector": "entropy", "EntropySettings": "settings",
    "Decision": "protocol", "InspectionContext": "protocol", "Inspector": "protocol",
    "RequestView": "protocol",
    "ORDER": "registry", "REGISTRY": "registry", "ChainParts": "registry",
    "build_chain": "registry",
    "SecretsInspector": "secrets",
}  # fmt: skip

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
