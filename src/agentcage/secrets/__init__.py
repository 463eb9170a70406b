"""Secrets that never enter the cage: store, placeholders, staging, injection and redaction.

Host side (CLI): `open_store` + `PlaceholderBook` keep values and placeholders; `collect` and
`stage` hand the values to the gateway through a tmpfs file. Gateway side: `load_staged`,
`Injector` (outbound, after the inspector chain) and `Redactor` (inbound, before the cage).
"""

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
