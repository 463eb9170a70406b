"""Secrets that never enter the cage: store, placeholders, staging, injection and redaction.

Host side (CLI): `open_store` + `PlaceholderBook` keep values and placeholders; `collect` and
`stage` hand the values to the gateway through a tmpfs file. Gateway side: `load_staged`,
`Injector` (outbound, after the inspector chain) and `Redactor` (inbound, before the cage).

The names below are loaded from their submodules on first use: a caller that needs one
submodule (`agentcage exec` needs only the placeholder book) does not pay for all of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcage.secrets.book import PlaceholderBook, Rotation
    from agentcage.secrets.errors import SecretStoreError, StagingError, StoreUnavailable
    from agentcage.secrets.inject import Injected, Injector
    from agentcage.secrets.placeholders import Placeholder, check_env_name, find, mint, parse
    from agentcage.secrets.redact import Redaction, Redactor
    from agentcage.secrets.rules import InjectionRule, rule_from_config, rules_from_config
    from agentcage.secrets.service import (
        SecretEntry,
        cage_environment,
        check_value,
        list_secrets,
        read_value,
        remove_secret,
        rotate_placeholders,
        set_secret,
    )
    from agentcage.secrets.staging import (
        StagedSecret,
        collect,
        load_staged,
        stage,
        staging_path,
        unstage,
    )
    from agentcage.secrets.store import SecretStore, StoreChoice, open_store

# public name -> the submodule that defines it
_HOMES = {
    "PlaceholderBook": "book", "Rotation": "book",
    "SecretStoreError": "errors", "StagingError": "errors", "StoreUnavailable": "errors",
    "Injected": "inject", "Injector": "inject",
    "Placeholder": "placeholders", "check_env_name": "placeholders", "find": "placeholders",
    "mint": "placeholders", "parse": "placeholders",
    "Redaction": "redact", "Redactor": "redact",
    "InjectionRule": "rules", "rule_from_config": "rules", "rules_from_config": "rules",
    "SecretEntry": "service", "cage_environment": "service", "check_value": "service",
    "list_secrets": "service", "read_value": "service", "remove_secret": "service",
    "rotate_placeholders": "service", "set_secret": "service",
    "StagedSecret": "staging", "collect": "staging", "load_staged": "staging",
    "stage": "staging", "staging_path": "staging", "unstage": "staging",
    "SecretStore": "store", "StoreChoice": "store", "open_store": "store",
}

__all__ = [
    "Injected",
    "InjectionRule",
    "Injector",
    "Placeholder",
    "PlaceholderBook",
    "Redaction",
    "Redactor",
    "Rotation",
    "SecretEntry",
    "SecretStore",
    "SecretStoreError",
    "StagedSecret",
    "StagingError",
    "StoreChoice",
    "StoreUnavailable",
    "cage_environment",
    "check_env_name",
    "check_value",
    "collect",
    "find",
    "list_secrets",
    "load_staged",
    "mint",
    "open_store",
    "parse",
    "read_value",
    "remove_secret",
    "rotate_placeholders",
    "rule_from_config",
    "rules_from_config",
    "set_secret",
    "stage",
    "staging_path",
    "unstage",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
